// SPDX-License-Identifier: Apache-2.0
// tests/test_simt_async.cpp compiled by nvcc, for test_simt_cuda (tests/cuda.cmake).
#include "../test_simt_async.cpp"
