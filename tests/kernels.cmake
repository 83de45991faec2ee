# SPDX-License-Identifier: Apache-2.0
# The decoder's CUDA kernels run by the emulator against the host reference (label `emulated`),
# the whole tiny model on the Emulated backend against the HF fixtures, and an nvcc compile +
# ptxas check of the same kernel source (label `cuda-compile`) when nvcc is there.
if(NOT TARGET servekit_simt)
  return()
endif()

servekit_test(test_kernels LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_basic.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_kernels_linear.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_kernels_attention.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_kernels_mask.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_kernels_lora.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_kernels_lora_mma.cpp
  LIBS servekit_simt)
servekit_test(test_kernels_gpt2 LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_gpt2.cpp LIBS servekit_simt)
servekit_schedule_variants(test_kernels)
servekit_schedule_variants(test_kernels_gpt2)

if(SERVEKIT_HAVE_CUDA)
  add_test(NAME kernels_nvcc_compile
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/check_nvcc_kernels.sh ${CMAKE_CUDA_COMPILER}
            ${CMAKE_CURRENT_BINARY_DIR}/kernels_nvcc)
  set_tests_properties(kernels_nvcc_compile PROPERTIES LABELS cuda-compile)
endif()
