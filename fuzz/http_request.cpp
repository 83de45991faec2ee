// SPDX-License-Identifier: Apache-2.0
// Any bytes as the body of a POST to /generate (TGI / LoRAX) and to /v1/completions (OpenAI):
// a 4xx ApiError that the server turns into its error answer, or a request whose fields are
// in range. Anything else escaping (a JSON type_error, std::out_of_range...) would be a 500.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "servekit/serve/http/openai.hpp"
#include "servekit/serve/http/tgi.hpp"

namespace http = servekit::serve::http;

namespace {
void check(const servekit::serve::Request& r, const http::ApiLimits& lim) {
  const auto& s = r.sampling;
  if (!(s.temperature >= 0) || std::isinf(s.temperature)) std::abort();
  if (s.top_k < 0 || !(s.top_p > 0 && s.top_p <= 1)) std::abort();
  if (r.stop.max_new_tokens < 0 || r.stop.max_new_tokens > lim.max_new_tokens) std::abort();
  if (r.stop.stop_strings.size() > lim.max_stop) std::abort();
  for (const auto& x : r.stop.stop_strings)
    if (x.size() > lim.max_stop_bytes) std::abort();
  if (r.top_logprobs < 0 || r.top_logprobs > lim.max_alternatives) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const http::ApiLimits lim;
  try {
    const auto j = http::parse_body(body);
    try {
      check(http::parse_generate(j, lim).req, lim);
    } catch (const http::ApiError& e) {
      if (e.status < 400 || e.status > 499) std::abort();
    }
    check(http::parse_completion(j, lim).req, lim);
  } catch (const http::ApiError& e) {
    if (e.status < 400 || e.status > 499) std::abort();
  }
  return 0;
}
