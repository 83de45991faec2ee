# SPDX-License-Identifier: Apache-2.0
# A short, reproducible run of every libFuzzer target (fuzz/, built with clang by
# scripts/fuzz.sh): 20000 inputs each from seed 1 and the committed corpus. Fails on a crash,
# a sanitizer report or an exception other than servekit::Error. `scripts/fuzz.sh 600` runs them longer (docs/reliability.md has figures).
find_program(SERVEKIT_CLANGXX clang++)
if(NOT SERVEKIT_CLANGXX)
  message(STATUS "servekit: no clang++, fuzz_smoke not registered")
  return()
endif()
add_test(NAME fuzz_smoke COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/fuzz.sh --runs 10000)
set_tests_properties(fuzz_smoke PROPERTIES LABELS "fuzz" ENVIRONMENT
  "SERVEKIT_BUILD_DIR=${PROJECT_BINARY_DIR}" TIMEOUT 900)
