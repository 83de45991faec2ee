# SPDX-License-Identifier: Apache-2.0
add_executable(05_lora ${CMAKE_CURRENT_LIST_DIR}/05_lora/main.cpp)
target_link_libraries(05_lora PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(05_lora PRIVATE ${CMAKE_CURRENT_LIST_DIR})
