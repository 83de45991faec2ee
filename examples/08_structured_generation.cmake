# SPDX-License-Identifier: Apache-2.0
add_executable(08_structured_generation ${CMAKE_CURRENT_LIST_DIR}/08_structured_generation/main.cpp)
target_link_libraries(08_structured_generation PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(08_structured_generation PRIVATE ${CMAKE_CURRENT_LIST_DIR})
