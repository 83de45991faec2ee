# SPDX-License-Identifier: Apache-2.0
# Serving invariants for every weight format x cache layout x backend on the HF fixtures
# (test_invariants_*), and the uint8 device linear under emulation (test_kernels_u8). The
# emulated parts are split in several executables so that ctest -j runs them side by side.
servekit_test(test_invariants_host LABELS host
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_invariants_host.cpp)

if(NOT TARGET servekit_simt)
  return()
endif()

servekit_test(test_kernels_u8 LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_u8.cpp LIBS servekit_simt)
servekit_schedule_variants(test_kernels_u8)
foreach(part float u8 b)
  servekit_test(test_invariants_emulated_${part} LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_invariants_emulated_${part}.cpp LIBS servekit_simt)
endforeach()
# The same invariants with device storage (weights, scratch and caches as the Cuda backend keeps
# them); test_invariants_cuda (tests/cuda.cmake) is its twin for a GPU.
servekit_test(test_invariants_device_storage LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_invariants_device_storage.cpp LIBS servekit_simt)
