# SPDX-License-Identifier: Apache-2.0
if(TARGET servekit_cli)
  servekit_test(test_cli LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli.cpp)
  target_compile_definitions(test_cli PRIVATE SERVEKIT_CLI="$<TARGET_FILE:servekit_cli>")
  if(SERVEKIT_DIMS STREQUAL "tests")  # the CLI's shapes, which an error lists
    target_compile_definitions(test_cli PRIVATE SERVEKIT_COMPILED_DIMS_FOR_TESTS)
  endif()
  add_dependencies(test_cli servekit_cli)
endif()

# The composition flags against the library's own runs: built with the CLI's generated list of
# compositions (apps/servekit.cmake), so that it checks each one the CLI has.
if(TARGET servekit_cli)
  servekit_test(test_cli_compositions LABELS host
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli_compositions.cpp)
  target_compile_definitions(test_cli_compositions PRIVATE
    SERVEKIT_CLI="$<TARGET_FILE:servekit_cli>")
  target_include_directories(test_cli_compositions PRIVATE
    ${PROJECT_BINARY_DIR}/apps/servekit_cli_compositions)
  if(SERVEKIT_HAVE_EMULATION)
    target_link_libraries(test_cli_compositions PRIVATE servekit::simt)
    target_compile_definitions(test_cli_compositions PRIVATE SERVEKIT_TEST_EMULATED)
  endif()
  add_dependencies(test_cli_compositions servekit_cli)
endif()
