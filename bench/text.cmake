# SPDX-License-Identifier: Apache-2.0
# Tokenizer encode throughput: bench_tokenizer_encode [gpt2 dir] (defaults to data/gpt2).
add_executable(bench_tokenizer_encode ${CMAKE_CURRENT_LIST_DIR}/tokenizer_encode.cpp)
target_link_libraries(bench_tokenizer_encode PRIVATE servekit::servekit servekit_warnings)
target_compile_definitions(bench_tokenizer_encode PRIVATE
  SERVEKIT_FIXTURES="${PROJECT_SOURCE_DIR}/tests/fixtures"
  SERVEKIT_DATA="${PROJECT_SOURCE_DIR}/data")
