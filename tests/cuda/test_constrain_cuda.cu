// SPDX-License-Identifier: Apache-2.0
// tests/test_constrain_emulated.cpp compiled by nvcc, for test_engine_cuda (tests/cuda.cmake):
// constrained rows on backend::Cuda.
#include "../test_constrain_emulated.cpp"
