// SPDX-License-Identifier: Apache-2.0
#pragma once
// n / d for 0 <= n < 2^31 by a divisor d >= 1 known only at run time but fixed for many
// divisions (a paged cache's rows per block, in every row's lookup): a multiply and a shift
// where a division took tens of cycles on the host and a long instruction sequence on a
// device. With l = ceil(log2 d) and m = ceil(2^(31 + l) / d), m < 2^32 and
// 2^(31 + l) <= m d < 2^(31 + l) + d <= 2^(31 + l) + 2^l, so floor(n m / 2^(31 + l)) =
// floor(n / d) for every n < 2^31 (Granlund and Montgomery, "Division by invariant integers
// using multiplication", PLDI 1994, theorem 4.2); n m < 2^63 fits a 64-bit product.
#include <cstdint>

#include "servekit/core/hd.hpp"

namespace servekit {

struct Divider {
  int32_t d = 1;
  uint32_t m = 1u << 31;
  int32_t shift = 31;

  Divider() = default;
  // Implicit, so that a view's aggregate takes its divisor as the int it is.
  SERVEKIT_HD constexpr Divider(int32_t divisor)
      : d(divisor) {  // NOLINT(google-explicit-constructor)
    int l = 0;
    while ((int64_t{1} << l) < divisor) l++;
    const uint64_t top = uint64_t{1} << (31 + l);
    m = static_cast<uint32_t>((top + static_cast<uint64_t>(divisor) - 1) / divisor);
    shift = 31 + l;
  }

  SERVEKIT_HD SERVEKIT_FORCE_INLINE int32_t quot(int32_t n) const {
    return static_cast<int32_t>((static_cast<uint64_t>(static_cast<uint32_t>(n)) * m) >> shift);
  }
};

}  // namespace servekit
