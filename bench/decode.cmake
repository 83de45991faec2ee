# SPDX-License-Identifier: Apache-2.0
add_executable(bench_decode_host ${CMAKE_CURRENT_LIST_DIR}/decode_host.cpp)
target_link_libraries(bench_decode_host PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
