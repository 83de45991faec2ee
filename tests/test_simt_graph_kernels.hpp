// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernels of test_simt_graph.cpp. Plain CUDA C++ (scripts/check_nvcc_simt.sh compiles them and
// a capture of them too).
#include "servekit/simt/simt.hpp"

namespace simt_test {

struct Affine {
  float a, b;
};

// y[i] = f.a * x[i] + f.b: a kernel whose by-value argument a capture must copy.
__global__ void affine(float* y, const float* x, Affine f, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = f.a * x[i] + f.b;
}

}  // namespace simt_test
