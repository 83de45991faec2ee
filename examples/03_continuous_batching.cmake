# SPDX-License-Identifier: Apache-2.0
add_executable(03_continuous_batching ${CMAKE_CURRENT_LIST_DIR}/03_continuous_batching/main.cpp)
target_link_libraries(03_continuous_batching PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(03_continuous_batching PRIVATE ${CMAKE_CURRENT_LIST_DIR})
