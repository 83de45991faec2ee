// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "servekit/core/hd.hpp"  // SERVEKIT_DEVICE_ABI
// The two ways a launch fails before or while running: a configuration CUDA would reject, and a
// barrier that not every thread of a block reaches (a hang on a GPU, an error here).
#include "servekit/core/error.hpp"

namespace servekit::simt {
inline namespace SERVEKIT_DEVICE_ABI {

// Grid/block/shared-memory configuration that CUDA would refuse (cudaErrorInvalidConfiguration,
// cudaErrorInvalidValue), or a launch the runtime reported as failed.
class LaunchError : public Error {
 public:
  using Error::Error;
};

// A block stopped with threads waiting at a barrier that can never complete.
class DeadlockError : public Error {
 public:
  using Error::Error;
};

}  // namespace SERVEKIT_DEVICE_ABI
}  // namespace servekit::simt
