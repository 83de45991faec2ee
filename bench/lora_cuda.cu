// SPDX-License-Identifier: Apache-2.0
// bench/lora.cpp compiled by nvcc: the LoRA dispatches on backend::Cuda, f16 base weights.
#include "lora.cpp"
