// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/weights/formats.hpp"
#include "servekit/weights/transposed.hpp"

namespace servekit::test {

// How much larger the magnitudes the zero-point kernels round are than the weights (as in
// test_weights_hf.cpp): they sum scale * sum x q and min * sum x, whose roundings scale with
// |q scale| + |min| instead of |w'|, so the fp32 reordering tolerance grows by the ratio of
// their means, over every matrix in the format (lm_head included). 1 for the other
// formats.
template <class F>
double rounding_ratio(const model::Gpt2Tensors& t, int C) {
  if constexpr (!requires(weights::Matrix<F> m) { m.zero; }) {
    return 1.0;
  } else {
    double worst = 1.0;
    auto one = [&](const std::vector<float>& v, int K, int N) {
      auto m = weights::Matrix<F>::from_f32(v, K, N);
      double mag = 0, wmag = 0;
      for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
          const std::size_t s = m.state_index(k, n);
          mag +=
              std::abs(m.q[static_cast<std::size_t>(k) * N + n] * m.scale[s]) + std::abs(m.zero[s]);
          wmag += std::abs(m.dequant(k, n));
        }
      worst = std::max(worst, mag / wmag);
    };
    for (auto& l : t.layers) {
      one(l.attn_w, C, 3 * C), one(l.attn_proj_w, C, C), one(l.fc_w, C, 4 * C);
      one(l.mlp_proj_w, 4 * C, C);
    }
    const int V = t.config.vocab_size;  // the head: a (C, V) linear in the format too
    one(weights::transposed(t.head(), V, C), C, V);
    return worst;
  }
}

}  // namespace servekit::test
