# SPDX-License-Identifier: Apache-2.0
# Checkpoint reading: dtype conversions, safetensors, the GPT-2 loader.
servekit_test(test_dtype LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dtype.cpp)
servekit_test(test_safetensors LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.cpp)
servekit_test(test_load_gpt2 LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_load_gpt2.cpp)
servekit_test(test_bad_inputs LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bad_inputs.cpp)
