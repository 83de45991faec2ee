// SPDX-License-Identifier: Apache-2.0
#pragma once
// A seeded random GPT-2 with Hugging Face's initialisation, for demos and benchmarks that need
// the right shapes and plausible magnitudes but no checkpoint: weights ~ N(0, 0.02), biases 0,
// LayerNorm weights 1, and the two residual projections (attn.c_proj, mlp.c_proj) scaled to
// N(0, 0.02 / sqrt(2 n_layer)) so the residual stream's variance does not grow with depth.
//
// GPT-2 small is 124M floats, so filling is parallel: every tensor is cut into fixed chunks and
// each chunk has its own generator seeded from (seed, tensor, chunk). The result is the same
// whatever the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "servekit/core/dims.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/model/hf_config.hpp"

namespace servekit::model {

namespace detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xoshiro256** (Blackman & Vigna): fast, 256 bits of state, good enough for weight init.
struct Xoshiro256 {
  uint64_t s[4];
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& w : s) w = seed = splitmix64(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
};

// Marsaglia's polar form of Box-Muller: a point drawn uniformly in the unit disc gives two
// independent normals with one log and one sqrt, and no sin/cos (about 2x faster). One 64-bit
// draw gives the point's two 32-bit coordinates; 21% of points fall outside and are redrawn.
inline void fill_normal_chunk(std::span<float> out, float stddev, uint64_t seed) {
  Xoshiro256 g(seed);
  constexpr float inv_2_31 = 1.0f / 2147483648.0f;
  for (std::size_t i = 0; i < out.size(); i += 2) {
    float x, y, r2;
    do {
      const uint64_t r = g.next();
      x = float(int32_t(uint32_t(r >> 32))) * inv_2_31;  // [-1, 1)
      y = float(int32_t(uint32_t(r))) * inv_2_31;
      r2 = x * x + y * y;
    } while (r2 >= 1.0f || r2 == 0.0f);
    const float scale = stddev * std::sqrt(-2.0f * std::log(r2) / r2);
    out[i] = x * scale;
    if (i + 1 < out.size()) out[i + 1] = y * scale;
  }
}

struct FillJob {
  std::vector<float>* dst;
  float stddev;  // 0: constant `value`
  float value;
};

inline void run_fill_jobs(const std::vector<FillJob>& jobs, uint64_t seed) {
  constexpr std::size_t chunk = std::size_t(1) << 16;
  struct Piece {
    std::size_t job, begin, end;
  };
  std::vector<Piece> pieces;
  for (std::size_t j = 0; j < jobs.size(); ++j)
    for (std::size_t b = 0; b < jobs[j].dst->size(); b += chunk)
      pieces.push_back({j, b, std::min(b + chunk, jobs[j].dst->size())});
  const std::ptrdiff_t n = std::ptrdiff_t(pieces.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (std::ptrdiff_t k = 0; k < n; ++k) {
    const Piece& p = pieces[std::size_t(k)];
    const FillJob& job = jobs[p.job];
    std::span<float> out(job.dst->data() + p.begin, p.end - p.begin);
    if (job.stddev == 0.0f) {
      for (float& x : out) x = job.value;
    } else {
      const uint64_t s = splitmix64(splitmix64(splitmix64(seed) ^ p.job) ^ (p.begin / chunk));
      fill_normal_chunk(out, job.stddev, s);
    }
  }
}

}  // namespace detail

inline Gpt2Tensors random_gpt2_any(const Gpt2HfConfig& c, uint64_t seed) {
  const std::size_t C = std::size_t(c.n_embd), V = std::size_t(c.vocab_size),
                    P = std::size_t(c.n_positions);
  constexpr float std_w = 0.02f;  // HF GPT2Config.initializer_range
  const float std_res = std_w / std::sqrt(2.0f * float(c.n_layer));

  Gpt2Tensors t;
  t.config = c;
  t.wte.resize(V * C);
  t.wpe.resize(P * C);
  t.ln_f_w.resize(C);
  t.ln_f_b.resize(C);
  t.layers.resize(std::size_t(c.n_layer));
  std::vector<detail::FillJob> jobs = {
      {&t.wte, std_w, 0}, {&t.wpe, std_w, 0}, {&t.ln_f_w, 0, 1}, {&t.ln_f_b, 0, 0}};
  for (Gpt2LayerTensors& l : t.layers) {
    l.ln_1_w.resize(C), l.ln_1_b.resize(C), l.ln_2_w.resize(C), l.ln_2_b.resize(C);
    l.attn_w.resize(C * 3 * C), l.attn_b.resize(3 * C);
    l.attn_proj_w.resize(C * C), l.attn_proj_b.resize(C);
    l.fc_w.resize(C * 4 * C), l.fc_b.resize(4 * C);
    l.mlp_proj_w.resize(4 * C * C), l.mlp_proj_b.resize(C);
    jobs.insert(jobs.end(), {{&l.ln_1_w, 0, 1},
                             {&l.ln_1_b, 0, 0},
                             {&l.attn_w, std_w, 0},
                             {&l.attn_b, 0, 0},
                             {&l.attn_proj_w, std_res, 0},
                             {&l.attn_proj_b, 0, 0},
                             {&l.ln_2_w, 0, 1},
                             {&l.ln_2_b, 0, 0},
                             {&l.fc_w, std_w, 0},
                             {&l.fc_b, 0, 0},
                             {&l.mlp_proj_w, std_res, 0},
                             {&l.mlp_proj_b, 0, 0}});
  }
  detail::run_fill_jobs(jobs, seed);
  return t;
}

template <dims::ModelDims D>
Gpt2Tensors random_gpt2(uint64_t seed) {
  return random_gpt2_any(config_of<D>(), seed);
}

}  // namespace servekit::model
