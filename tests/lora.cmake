# SPDX-License-Identifier: Apache-2.0
# LoRA adapters (lora/): PEFT loading and errors, merged adapters against HF + PEFT, on the
# host and, for the merged weights, under emulation.
servekit_test(test_lora LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora.cpp)
if(TARGET servekit_simt)
  servekit_test(test_lora_emulated LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_emulated.cpp LIBS servekit_simt)
  servekit_schedule_variants(test_lora_emulated)
endif()
servekit_test(test_lora_unmerged LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_unmerged.cpp)
servekit_test(test_adapter_store LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_adapter_store.cpp)
if(TARGET servekit_simt)
  servekit_test(test_lora_device LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_lora_device.cpp LIBS servekit_simt)
endif()
