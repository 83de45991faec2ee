# SPDX-License-Identifier: Apache-2.0
add_executable(02_batching ${CMAKE_CURRENT_LIST_DIR}/02_batching/main.cpp)
target_link_libraries(02_batching PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(02_batching PRIVATE ${CMAKE_CURRENT_LIST_DIR})
