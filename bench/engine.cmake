# SPDX-License-Identifier: Apache-2.0
add_executable(bench_engine ${CMAKE_CURRENT_LIST_DIR}/engine.cpp)
target_link_libraries(bench_engine PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
