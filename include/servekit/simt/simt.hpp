// SPDX-License-Identifier: Apache-2.0
#pragma once
// simt: the CUDA programming model for both compilers. Under nvcc these headers are CUDA itself
// plus thin wrappers (launch, memory, streams, inline-PTX tensor-core fragments). Under a host
// compiler they are an emulator that runs the same kernel source on the CPU: blocks on OS
// threads, CUDA threads as fibers, barriers and warp ops as fiber rendezvous.
//
//   __global__ void scale(float* x, int n) { ... threadIdx.x ... __syncthreads() ... }
//   simt::launch(simt::kernel<scale>, grid, block, smem_bytes, stream, x, n);
#include "servekit/simt/platform.hpp"
#include "servekit/simt/dim.hpp"
#include "servekit/simt/error.hpp"
#include "servekit/simt/math.hpp"
#include "servekit/simt/barrier.hpp"
#include "servekit/simt/warp.hpp"
#include "servekit/simt/atomic.hpp"
#include "servekit/simt/shared.hpp"
#include "servekit/simt/mma.hpp"
#include "servekit/simt/async_copy.hpp"
#include "servekit/simt/counters.hpp"
#include "servekit/simt/schedule.hpp"
#include "servekit/simt/stream.hpp"
#include "servekit/simt/memory.hpp"
#include "servekit/simt/launch.hpp"
#include "servekit/simt/graph.hpp"
#include "servekit/simt/staging.hpp"
