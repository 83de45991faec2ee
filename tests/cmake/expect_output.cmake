# SPDX-License-Identifier: Apache-2.0
# cmake -DCMD=<program;args> -DEXPECT=<regex;regex...> -P expect_output.cmake
# Runs CMD; passes when it exits 0 and its output (stdout + stderr) matches every regex. Unlike
# ctest's PASS_REGULAR_EXPRESSION, the exit status still counts.
execute_process(COMMAND ${CMD} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
set(all "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit status ${rc}:\n${all}")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT all MATCHES "${re}")
    message(FATAL_ERROR "output does not match \"${re}\":\n${all}")
  endif()
endforeach()
message(STATUS "${all}")
