# SPDX-License-Identifier: Apache-2.0
# JSON-schema constrained generation: the schema compiler, the matcher and token masks (host);
# then the engine on a random model over a corpus of schemas, whose outputs Python's
# jsonschema validates (test_constrain_validate, in the server tests' venv).
servekit_test(test_constrain LABELS host
  SOURCES test_constrain.cpp test_constrain_ranges.cpp test_constrain_keywords.cpp
          test_constrain_gbnf.cpp)
target_compile_definitions(test_constrain PRIVATE SERVEKIT_SOURCE_TESTS="${CMAKE_CURRENT_SOURCE_DIR}")

servekit_test(test_constrain_engine LABELS host SOURCES test_constrain_engine.cpp)
target_compile_definitions(test_constrain_engine PRIVATE
  SERVEKIT_SOURCE_TESTS="${CMAKE_CURRENT_SOURCE_DIR}")
set_tests_properties(test_constrain_engine PROPERTIES FIXTURES_SETUP constrained_outputs)

if(NOT DEFINED SERVEKIT_SERVER_VENV)
  set(SERVEKIT_SERVER_VENV "${PROJECT_SOURCE_DIR}/.venv-server" CACHE PATH
    "venv with the server tests' Python clients (tools/server_venv.sh)")
endif()
add_test(NAME test_constrain_validate
  COMMAND bash -c "test -x \"$0/bin/python\" || { echo \"no venv at $0: run tools/server_venv.sh\" >&2; exit 1; }; exec \"$0/bin/python\" \"$1\" constrained_outputs.json"
    ${SERVEKIT_SERVER_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/constrain/validate.py)
set_tests_properties(test_constrain_validate PROPERTIES LABELS host
  FIXTURES_REQUIRED constrained_outputs WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

if(TARGET servekit_simt)
  servekit_test(test_constrain_emulated LABELS emulated
    SOURCES test_constrain_emulated.cpp LIBS servekit_simt)
endif()
