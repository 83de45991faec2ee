# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD=<servekit build dir> -DWORK=<dir> -P installed_cli.cmake
# Install, move the prefix, and run the moved program: version line, vocabulary, tokenize.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
file(RENAME ${WORK}/prefix ${WORK}/moved)
set(cli ${WORK}/moved/bin/servekit)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=SERVEKIT_VOCAB ${cli} --version
                OUTPUT_VARIABLE version COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "${version}")
if(NOT version MATCHES "vocabulary: ${WORK}/moved/share/servekit/gpt2")
  message(FATAL_ERROR "the moved install does not use its own vocabulary")
endif()
file(WRITE ${WORK}/in.jsonl "{\"text\": \"Hello world\"}\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=SERVEKIT_VOCAB ${cli} tokenize
                INPUT_FILE ${WORK}/in.jsonl OUTPUT_VARIABLE ids COMMAND_ERROR_IS_FATAL ANY)
if(NOT ids MATCHES "\\[15496,995\\]")
  message(FATAL_ERROR "tokenize printed: ${ids}")
endif()
message(STATUS "moved install tokenizes: ${ids}")
