# SPDX-License-Identifier: Apache-2.0
# The lessons run on the tiny fixture model (its own 512-token vocabulary): each must exit 0
# (01 exits 1 when the cached and uncached loops disagree, 02 fails when batching changes a
# row's tokens) and print the mechanism its page explains.
if(NOT SERVEKIT_BUILD_EXAMPLES)
  return()
endif()
set(tiny --model ${SERVEKIT_FIXTURES}/tiny-a --vocab ${SERVEKIT_FIXTURES}/tiny-vocab)
set(lesson_out ${CMAKE_CURRENT_BINARY_DIR}/lessons)

# name, program and args (a list), expected output (a list of regexes)
function(lesson_test name cmd expect)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} "-DCMD=${cmd}" "-DEXPECT=${expect}"
                                -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cmake/expect_output.cmake)
  set_tests_properties(${name} PROPERTIES LABELS "host;examples")
endfunction()

lesson_test(lesson_01_kv_cache
  "$<TARGET_FILE:01_kv_cache>;${tiny};--tokens;6;--by-hand;4;--out;${lesson_out}/01"
  "input_ids \\[1, [0-9]+\\]:;logits \\[1, [0-9]+, 512\\];step 1: fed   1 token\\(s\\) at position;cache 2 x \\(K, V\\) \\[1, 4, [0-9]+, 16\\];same tokens by both loops: yes")
lesson_test(lesson_02_batching_contiguous
  "$<TARGET_FILE:02_batching>;${tiny};--layout;contiguous;--max-batch;4;--out;${lesson_out}/02c"
  "input_ids \\[3, [0-9]+\\]:;attention_mask \\[3, [0-9]+\\]:;position_ids \\[3, [0-9]+\\]:")
lesson_test(lesson_02_batching_paged
  "$<TARGET_FILE:02_batching>;${tiny};--layout;paged;--max-batch;4;--out;${lesson_out}/02p"
  "sequences \\(slot, start position, tokens\\): \\(0, 0, [0-9]+\\) \\(1, 0, [0-9]+\\)")
lesson_test(lesson_04_quantization
  "$<TARGET_FILE:04_quantization>;${tiny};--tokens;4;--out;${lesson_out}/04"
  "corner \\[0:3, 0:5\\]:;-> u8zp-tensor -> fp32;error +\\[")
lesson_test(lesson_08_structured_generation
  "$<TARGET_FILE:08_structured_generation>;${tiny};--tokens;40;--samples;3"
  "== 1. without a constraint;valid Person: [0-9] of 3 without the constraint, 3 of 3 with it;tokens allowed at each step")
lesson_test(lesson_09_prefix_caching
  "$<TARGET_FILE:09_prefix_caching>;${tiny};--tokens;6;--out;${lesson_out}/09"
  "request 1 \\( *[0-9]+ tokens\\): . *0\\+ ;request 2 \\( *[0-9]+ tokens\\): . *0= ;same logits as a whole prefill without the cache: yes;TTFT off \\(ms\\)")
lesson_test(lesson_10_speculative_decoding
  "$<TARGET_FILE:10_speculative_decoding>;${tiny};--tokens;40;--out;${lesson_out}/10"
  "step  1 at position +[0-9]+, proposed;drew:;same tokens as plain decoding: yes;speedup [0-9.]+x at acceptance;same tokens: yes")
