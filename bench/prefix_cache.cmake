# SPDX-License-Identifier: Apache-2.0
add_executable(bench_prefix_cache ${CMAKE_CURRENT_LIST_DIR}/prefix_cache.cpp)
target_link_libraries(bench_prefix_cache PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
