# SPDX-License-Identifier: Apache-2.0
# `servekit serve` driven by the real Python clients (tests/server/test_server.py): lorax-client,
# text-generation and openai against the tiny fixture model and its adapters. The clients live in
# the venv tools/server_venv.sh makes (scripts/test.sh runs it before ctest); nothing is
# downloaded here.
if(TARGET servekit_cli)
  set(SERVEKIT_SERVER_VENV "${PROJECT_SOURCE_DIR}/.venv-server" CACHE PATH
    "venv with the server tests' Python clients (tools/server_venv.sh)")
  add_test(NAME test_server_clients
    COMMAND bash -c "test -x \"$0/bin/python\" || { echo \"no Python clients at $0: run tools/server_venv.sh\" >&2; exit 1; }; exec \"$0/bin/python\" -m pytest -q -p no:cacheprovider \"$1\""
      ${SERVEKIT_SERVER_VENV} ${CMAKE_CURRENT_LIST_DIR}/server)
  set_tests_properties(test_server_clients PROPERTIES LABELS "host;server" TIMEOUT 900
    ENVIRONMENT "SERVEKIT_BIN=$<TARGET_FILE:servekit_cli>")
endif()
