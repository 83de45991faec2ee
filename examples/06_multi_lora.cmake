# SPDX-License-Identifier: Apache-2.0
add_executable(06_multi_lora ${CMAKE_CURRENT_LIST_DIR}/06_multi_lora/main.cpp)
target_link_libraries(06_multi_lora PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(06_multi_lora PRIVATE ${CMAKE_CURRENT_LIST_DIR})
