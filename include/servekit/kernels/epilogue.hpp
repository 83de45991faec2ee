// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The three ways a linear layer writes its output, shared by every backend's kernels.
namespace servekit::kernels {
inline namespace SERVEKIT_DEVICE_ABI {

enum class Epilogue {
  Store,     // out = x @ W + b
  Gelu,      // out = gelu_tanh(x @ W + b)
  Residual,  // out += x @ W + b   (the residual stream update)
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::kernels
