# SPDX-License-Identifier: Apache-2.0
add_executable(bench_constrain ${CMAKE_CURRENT_LIST_DIR}/constrain.cpp)
target_link_libraries(bench_constrain PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
