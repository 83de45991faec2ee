// SPDX-License-Identifier: Apache-2.0
// bench/speculative.cpp compiled by nvcc: n-gram speculation on backend::Cuda, f16 weights.
#include "speculative.cpp"
