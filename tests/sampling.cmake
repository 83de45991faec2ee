# SPDX-License-Identifier: Apache-2.0
# Sampling on the device (kernels/sampling.hpp) under the emulator, against the filtered
# distribution computed on the host (label `emulated`).
if(NOT TARGET servekit_simt)
  return()
endif()

servekit_test(test_kernels_sampling LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_sampling.cpp LIBS servekit_simt)
servekit_schedule_variants(test_kernels_sampling)
