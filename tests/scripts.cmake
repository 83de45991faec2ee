# SPDX-License-Identifier: Apache-2.0
# scripts/get_gpt2.sh: its offline message (HF_ENDPOINT pointed at a closed port, so the test is
# offline wherever it runs), its check of a folder, an unknown name; and DistilGPT2's shape
# among the compiled ones (a distilgpt2 config.json gets past the shape check).
if(TARGET servekit_cli)
  set(get "${PROJECT_SOURCE_DIR}/scripts/get_gpt2.sh")
  set(env "SERVEKIT_BUILD_DIR=${PROJECT_BINARY_DIR};HF_ENDPOINT=http://127.0.0.1:9")
  add_test(NAME get_gpt2_offline COMMAND bash -c
    "out=$(bash \"$0\" distilgpt2 --out \"$1\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 3 ] && grep -q 'cannot reach http://127.0.0.1:9' <<< \"$out\" && grep -q 'hf download distilbert/distilgpt2' <<< \"$out\" && [ ! -e \"$1/model.safetensors\" ]"
    ${get} ${CMAKE_CURRENT_BINARY_DIR}/get_gpt2_offline)
  add_test(NAME get_gpt2_check COMMAND bash -c
    "out=$(bash \"$0\" --check \"$1\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 0 ] && grep -q 'loads and generates' <<< \"$out\""
    ${get} ${SERVEKIT_FIXTURES}/tiny-a)
  add_test(NAME get_gpt2_unknown COMMAND bash -c
    "out=$(bash \"$0\" bert 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 2 ] && grep -q \"unknown model 'bert'\" <<< \"$out\""
    ${get})
  # A config.json of DistilGPT2's shape and no weights: the error is the missing weights, not
  # an unsupported shape. A build for the tests' shapes only (SERVEKIT_DIMS=tests, what
  # scripts/test.sh asks) instead names the shape as not compiled and the option that adds it.
  set(distil_config "printf '{\"model_type\": \"gpt2\", \"n_layer\": 6, \"n_head\": 12, \"n_embd\": 768, \"vocab_size\": 50257, \"n_positions\": 1024, \"n_ctx\": 1024}'")
  if(SERVEKIT_DIMS STREQUAL "all")
    set(distil_check "! grep -q 'unsupported model shape' <<< \"$out\" && grep -q 'distilgpt2' <<< \"$out\" && grep -q '^servekit: error: .*safetensors' <<< \"$out\"")
  else()
    set(distil_check "grep -q 'unsupported model shape: n_layer 6' <<< \"$out\" && grep -q 'DSERVEKIT_DIMS=all for every GPT-2 shape' <<< \"$out\"")
  endif()
  add_test(NAME distilgpt2_shape COMMAND bash -c
    "d=\"$1\"; mkdir -p \"$d\"; ${distil_config} > \"$d/config.json\"; out=$(\"$0\" generate --model \"$d\" -n 1 hi 2>&1); echo \"$out\"; ${distil_check}"
    $<TARGET_FILE:servekit_cli> ${CMAKE_CURRENT_BINARY_DIR}/distilgpt2_shape)
  set_tests_properties(get_gpt2_offline get_gpt2_check get_gpt2_unknown distilgpt2_shape
    PROPERTIES LABELS host ENVIRONMENT "${env}")
endif()

# scripts/gpu_check.sh where there is no GPU (an nvidia-smi that fails stands in for one that
# finds none): it says so, exits 2, and writes nothing; so does an unknown step, alone or among
# steps joined by commas.
add_test(NAME gpu_check_without_gpu COMMAND bash -c
  "d=\"$1\"; rm -rf \"$d\"; mkdir -p \"$d/bin\"; printf '#!/bin/sh\\nexit 9\\n' > \"$d/bin/nvidia-smi\"; chmod +x \"$d/bin/nvidia-smi\"; out=$(PATH=\"$d/bin:$PATH\" bash \"$0\" tests \"$d/report\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 2 ] && grep -q 'no NVIDIA GPU here' <<< \"$out\" && [ ! -e \"$d/report\" ] || exit 1; out=$(bash \"$0\" tests,bogus \"$d/report\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 2 ] && grep -q \"unknown step 'bogus'\" <<< \"$out\" && [ ! -e \"$d/report\" ]"
  ${PROJECT_SOURCE_DIR}/scripts/gpu_check.sh ${CMAKE_CURRENT_BINARY_DIR}/gpu_check_without_gpu)
set_tests_properties(gpu_check_without_gpu PROPERTIES LABELS host)

# The library's layers (scripts/check_layers.sh): no header includes a higher layer. And the
# check itself fails on a tree where kv/ includes serve/.
add_test(NAME layers COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check_layers.sh
  ${PROJECT_SOURCE_DIR}/include/servekit)
add_test(NAME layers_catches_upward COMMAND bash -c
  "d=\"$1\"; rm -rf \"$d\"; mkdir -p \"$d/kv\" \"$d/serve\"; printf '#include \"servekit/serve/engine.hpp\"\\n' > \"$d/kv/x.hpp\"; out=$(bash \"$0\" \"$d\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 1 ] && grep -q 'kv/x.hpp:1: kv includes serve' <<< \"$out\""
  ${PROJECT_SOURCE_DIR}/scripts/check_layers.sh ${CMAKE_CURRENT_BINARY_DIR}/layers_catches_upward)
set_tests_properties(layers layers_catches_upward PROPERTIES LABELS host)
