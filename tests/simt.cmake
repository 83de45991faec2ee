# SPDX-License-Identifier: Apache-2.0
# simt: the CUDA emulator's own tests (label `emulated`), the same under AddressSanitizer, and an
# nvcc compile check of the same kernel source (label `cuda-compile`) when nvcc is there.
if(NOT TARGET servekit_simt)  # the Emulated backend needs boost.context + CUDA headers
  return()
endif()


set(SERVEKIT_SIMT_TEST_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_block.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_warp.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_memory.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_mma.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_async.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_schedule.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_graph.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_simt_errors.cpp)

servekit_test(test_simt LABELS emulated SOURCES ${SERVEKIT_SIMT_TEST_SOURCES} LIBS servekit_simt)

# The same tests under AddressSanitizer: the fiber switches carry ASan's annotations, and
# abandoned stacks are unpoisoned before reuse.
servekit_test(test_simt_asan LABELS emulated SOURCES ${SERVEKIT_SIMT_TEST_SOURCES} LIBS servekit_simt)
target_compile_options(test_simt_asan PRIVATE -fsanitize=address -fno-omit-frame-pointer)
target_link_options(test_simt_asan PRIVATE -fsanitize=address)
set_tests_properties(test_simt_asan PROPERTIES
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0:detect_stack_use_after_return=0")

if(SERVEKIT_HAVE_CUDA)
  add_test(NAME simt_nvcc_compile
    COMMAND ${PROJECT_SOURCE_DIR}/scripts/check_nvcc_simt.sh ${CMAKE_CUDA_COMPILER}
            ${CMAKE_CURRENT_BINARY_DIR}/simt_nvcc)
  set_tests_properties(simt_nvcc_compile PROPERTIES LABELS cuda-compile)
endif()
