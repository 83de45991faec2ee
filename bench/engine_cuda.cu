// SPDX-License-Identifier: Apache-2.0
// bench/engine.cpp compiled by nvcc: the engine's schedulers on backend::Cuda.
#include "engine.cpp"
