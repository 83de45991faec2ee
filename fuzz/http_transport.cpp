// SPDX-License-Identifier: Apache-2.0
// Any bytes as what a client sends on one connection, arriving in pieces: the transport's
// request reader (serve/http/request_reader.hpp) must take every whole request, in order, and
// refuse anything else with a 400, 413 or 431, never crash, loop or read out of bounds. The
// first byte picks where the input is cut into the pieces the socket would give.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "servekit/serve/http/request_reader.hpp"
#include "servekit/serve/http/response_writer.hpp"

namespace http = servekit::serve::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const char* p = reinterpret_cast<const char*>(data + 1);
  std::size_t left = size - 1;
  http::RequestReader r(/*max_body=*/4096, /*max_header=*/2048);
  int requests = 0;
  while (true) {
    const std::size_t n = left < piece ? left : piece;
    http::RequestReader::State s = r.feed(p, n);
    p += n;
    left -= n;
    while (s == http::RequestReader::done) {
      const http::HttpRequest q = r.take();
      if (q.method.empty() || q.body.size() > 4096) std::abort();
      for (const auto& [k, v] : q.headers)
        if (k != http::lower_case(k)) std::abort();
      if (++requests > static_cast<int>(size)) std::abort();  // a request takes >= 1 byte
      s = r.next();
    }
    if (s == http::RequestReader::failed) {
      const int st = r.error_status();
      if (st != 400 && st != 413 && st != 431) std::abort();
      if (http::error_response(st, r.error()).rfind("HTTP/1.1 ", 0) != 0) std::abort();
      return 0;
    }
    if (r.wants_continue() && r.held() == 0) std::abort();  // a header was read
    if (left == 0) return 0;
  }
}
