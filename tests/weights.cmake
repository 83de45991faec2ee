# SPDX-License-Identifier: Apache-2.0
# Weight formats: fp16, bf16, zero-point uint8 (per tensor, channel, group), their fused linear
# kernels, and the decoder on the HF fixtures in every format.
servekit_test(test_weights LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_weights.cpp)
servekit_test(test_weights_hf LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_weights_hf.cpp)
