# SPDX-License-Identifier: Apache-2.0
add_executable(04_quantization ${CMAKE_CURRENT_LIST_DIR}/04_quantization/main.cpp)
target_link_libraries(04_quantization PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(04_quantization PRIVATE ${CMAKE_CURRENT_LIST_DIR})
