// SPDX-License-Identifier: Apache-2.0
// tests/test_engine_emulated.cpp compiled by nvcc, for test_engine_cuda (tests/cuda.cmake): the
// engine on backend::Cuda.
#include "../test_engine_emulated.cpp"
