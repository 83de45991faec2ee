# SPDX-License-Identifier: Apache-2.0
add_executable(09_prefix_caching ${CMAKE_CURRENT_LIST_DIR}/09_prefix_caching/main.cpp)
target_link_libraries(09_prefix_caching PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(09_prefix_caching PRIVATE ${CMAKE_CURRENT_LIST_DIR})
