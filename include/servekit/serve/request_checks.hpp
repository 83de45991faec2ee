// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the engine refuses before a request is queued, on the submitting thread: options that
// cannot work, and requests that could never run. Each error names the field and value.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "servekit/core/error.hpp"
#include "servekit/serve/request.hpp"
#include "servekit/serve/sched/core.hpp"

namespace servekit::serve {

inline EngineOptions check_options(EngineOptions o) {
  if (o.max_batch < 1) fail("engine: max_batch must be >= 1, got ", o.max_batch);
  if (o.max_batched_tokens < 1)
    fail("engine: max_batched_tokens must be >= 1, got ", o.max_batched_tokens);
  if (!(o.watermark >= 0 && o.watermark < 1))
    fail("engine: watermark must be in [0, 1), got ", o.watermark);
  if (o.kv_blocks < 0) fail("engine: kv_blocks must be >= 0, got ", o.kv_blocks);
  if (o.prefix_cache_blocks < -1)
    fail("engine: prefix_cache_blocks must be >= 0 (-1: the pool's), got ", o.prefix_cache_blocks);
  if (o.max_active_adapters < 0)
    fail("engine: max_active_adapters must be >= 0 (0: no bound), got ", o.max_active_adapters);
  if (o.adapter_slice_steps < 1)
    fail("engine: adapter_slice_steps must be >= 1, got ", o.adapter_slice_steps);
  o.speculative.validate();
  return o;
}

// The prompt, stop rules, logprobs and sampling of r against a model of dims D.
template <class D>
void check_request(const Request& r, const std::vector<int32_t>& prompt) {
  constexpr int P = D::n_positions, V = D::vocab;
  if (prompt.empty())
    fail("request: the prompt is empty", r.prompt_ids.empty() ? " (no text)" : "");
  if (static_cast<int>(prompt.size()) > P)
    fail("request: the prompt has ", prompt.size(), " tokens, more than n_positions = ", P, " of ",
         D::name);
  for (std::size_t i = 0; i < prompt.size(); i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      fail("request: prompt token ", i, " has id ", prompt[i], ", outside the vocabulary [0, ", V,
           ")");
  if (r.stop.max_new_tokens < 0)
    fail("request: max_new_tokens must be >= 0, got ", r.stop.max_new_tokens);
  // As vLLM and TGI do: a request that could run past the context is refused, not cut.
  if (static_cast<long>(prompt.size()) + r.stop.max_new_tokens > P)
    fail("request: the prompt's ", prompt.size(), " tokens + max_new_tokens ",
         r.stop.max_new_tokens, " = ", prompt.size() + r.stop.max_new_tokens,
         " is more than n_positions = ", P, " of ", D::name);
  if (r.stop.eos_id >= V) fail("request: eos_id ", r.stop.eos_id, " is outside [0, ", V, ")");
  if (r.top_logprobs < 0 || r.top_logprobs > V)
    fail("request: top_logprobs must be in [0, ", V, "], got ", r.top_logprobs);
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > V)
    fail("request: prompt_logprobs must be in [0, ", V, "] (or -1: off), got ", r.prompt_logprobs);
  r.sampling.validate();
}

// Paged cache: the request's whole life (prompt + max_new_tokens - 1 rows) fits an empty pool of
// n_blocks blocks of B rows.
inline void check_fits_pool(const std::vector<int32_t>& prompt, const Request& r, int B,
                            int n_blocks) {
  const int rows = static_cast<int>(prompt.size()) + std::max(0, r.stop.max_new_tokens - 1);
  if ((rows + B - 1) / B > n_blocks)
    fail("request: needs up to ", rows, " cache rows (", (rows + B - 1) / B,
         " blocks), more than the whole pool of ", n_blocks, " blocks of ", B);
}

}  // namespace servekit::serve
