// SPDX-License-Identifier: Apache-2.0
// tests/test_kernels_lora_mma.cpp compiled by nvcc, for test_kernels_cuda (tests/cuda.cmake).
#include "../test_kernels_lora_mma.cpp"
