// SPDX-License-Identifier: Apache-2.0
// Lesson 1 on the Cuda backend: the same main.cpp, compiled by nvcc with backend::Cuda.
#define SERVEKIT_BACKEND_CUDA 1
#include "main.cpp"
