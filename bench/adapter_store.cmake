# SPDX-License-Identifier: Apache-2.0
add_executable(bench_adapter_store ${CMAKE_CURRENT_LIST_DIR}/adapter_store.cpp)
target_link_libraries(bench_adapter_store PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
