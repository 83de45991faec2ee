# SPDX-License-Identifier: Apache-2.0
add_executable(bench_lora ${CMAKE_CURRENT_LIST_DIR}/lora.cpp)
target_link_libraries(bench_lora PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
