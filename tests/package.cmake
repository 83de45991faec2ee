# SPDX-License-Identifier: Apache-2.0
# Build a tiny consumer of the library both ways a user would.
foreach(mode package subdirectory)
  add_test(NAME consumer_${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DSOURCE=${PROJECT_SOURCE_DIR}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer_${mode} -P ${CMAKE_CURRENT_LIST_DIR}/consumer/run.cmake)
  set_tests_properties(consumer_${mode} PROPERTIES LABELS "host;package")
endforeach()

# The installed CLI works from its own prefix, moved elsewhere, with nothing of the source or
# build tree: it finds the vocabulary installed beside it.
if(TARGET servekit_cli)
  add_test(NAME cli_installed
           COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/cli_installed
                   -P ${CMAKE_CURRENT_LIST_DIR}/cmake/installed_cli.cmake)
  set_tests_properties(cli_installed PROPERTIES LABELS "host;package")
endif()
