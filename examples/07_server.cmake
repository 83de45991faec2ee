# SPDX-License-Identifier: Apache-2.0
if(TARGET servekit_http)
  add_executable(07_server ${CMAKE_CURRENT_LIST_DIR}/07_server/main.cpp)
  target_link_libraries(07_server PRIVATE servekit::http servekit_warnings CLI11::CLI11)
endif()
