# SPDX-License-Identifier: Apache-2.0
if(NOT SERVEKIT_HAVE_HTTP)
  message(FATAL_ERROR "servekit's CLI serves HTTP with cpp-httplib: install libcpp-httplib-dev "
    "and pkg-config (scripts/setup.sh does)")
endif()
# `serve` is its own translation unit: it compiles in parallel with the rest of the CLI.
add_executable(servekit_cli ${CMAKE_CURRENT_LIST_DIR}/servekit_cli.cpp
  ${CMAKE_CURRENT_LIST_DIR}/serve.cpp)
set_target_properties(servekit_cli PROPERTIES OUTPUT_NAME servekit)
target_link_libraries(servekit_cli PRIVATE servekit::servekit servekit::http servekit_warnings
  CLI11::CLI11)
target_compile_definitions(servekit_cli PRIVATE
  SERVEKIT_VERSION="${PROJECT_VERSION}")
install(TARGETS servekit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
