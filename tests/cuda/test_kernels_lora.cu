// SPDX-License-Identifier: Apache-2.0
// tests/test_kernels_lora.cpp compiled by nvcc, for test_kernels_cuda (tests/cuda.cmake).
#include "../test_kernels_lora.cpp"
