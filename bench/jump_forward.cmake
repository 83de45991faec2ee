# SPDX-License-Identifier: Apache-2.0
add_executable(bench_jump_forward ${CMAKE_CURRENT_LIST_DIR}/jump_forward.cpp)
target_link_libraries(bench_jump_forward PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
