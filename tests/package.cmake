# SPDX-License-Identifier: Apache-2.0
# Build a tiny consumer of the library both ways a user would.
foreach(mode package subdirectory)
  add_test(NAME consumer_${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} -DSOURCE=${PROJECT_SOURCE_DIR}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/consumer_${mode} -P ${CMAKE_CURRENT_LIST_DIR}/consumer/run.cmake)
  set_tests_properties(consumer_${mode} PROPERTIES LABELS "host;package")
endforeach()
