// SPDX-License-Identifier: Apache-2.0
#pragma once
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. A draw is a pure function of (seed, counter), so a request's n-th
// token draws the same number whatever batch it runs in, whichever thread or backend computes
// it, and after a preemption. Shared by the host sampler and the device sampling kernel.
#include <cstdint>

#include "servekit/core/hd.hpp"

namespace servekit {

struct U32x4 {
  uint32_t x, y, z, w;
};

SERVEKIT_HD constexpr U32x4 philox4x32_10(U32x4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += kW0, k1 += kW1;
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.x, p1 = static_cast<uint64_t>(kM1) * c.z;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
  }
  return c;
}

// u in [0, 1) on a 2^-24 grid (every value exact in fp32) for stream `seed` at `counter`.
SERVEKIT_HD constexpr float sample_uniform(uint64_t seed, uint64_t counter) {
  const U32x4 r =
      philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.x >> 8) * 0x1p-24f;
}

}  // namespace servekit
