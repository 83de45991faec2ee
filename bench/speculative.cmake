# SPDX-License-Identifier: Apache-2.0
add_executable(bench_speculative ${CMAKE_CURRENT_LIST_DIR}/speculative.cpp)
target_link_libraries(bench_speculative PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
