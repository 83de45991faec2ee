# SPDX-License-Identifier: Apache-2.0
if(TARGET servekit_cli)
  servekit_test(test_cli LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli.cpp)
  target_compile_definitions(test_cli PRIVATE SERVEKIT_CLI="$<TARGET_FILE:servekit_cli>")
  add_dependencies(test_cli servekit_cli)
endif()
