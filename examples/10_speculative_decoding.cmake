# SPDX-License-Identifier: Apache-2.0
add_executable(10_speculative_decoding ${CMAKE_CURRENT_LIST_DIR}/10_speculative_decoding/main.cpp)
target_link_libraries(10_speculative_decoding PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(10_speculative_decoding PRIVATE ${CMAKE_CURRENT_LIST_DIR})
