// SPDX-License-Identifier: Apache-2.0
#pragma once
// An HttpResponse onto a connected socket, HTTP/1.1: a head, then either the body with its
// Content-Length or the provider's chunks (Transfer-Encoding: chunked) as it writes them. The
// socket blocks with a send timeout (SO_SNDTIMEO, set by the transport), so a client that
// stops reading fails the write instead of holding the thread.
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <string>

#include "servekit/serve/http/json_fields.hpp"
#include "servekit/serve/http/message.hpp"

namespace servekit::serve::http {

// Every byte, or false (the client is gone or stopped reading).
inline bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

inline std::string response_head(const HttpResponse& res, bool keep_alive) {
  std::string h =
      "HTTP/1.1 " + std::to_string(res.status) + " " + status_reason(res.status) + "\r\n";
  for (const auto& [k, v] : res.headers) h += k + ": " + v + "\r\n";
  if (!res.content_type.empty()) h += "Content-Type: " + res.content_type + "\r\n";
  if (res.provider)
    h += "Transfer-Encoding: chunked\r\n";
  else
    h += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return h;
}

// The whole response; false if the connection can no longer be used.
inline bool write_response(int fd, HttpResponse& res, bool keep_alive) {
  std::string head = response_head(res, keep_alive);
  if (!res.provider) {
    head += res.body;
    return send_all(fd, head.data(), head.size());
  }
  if (!send_all(fd, head.data(), head.size())) {
    if (res.releaser) res.releaser(false);
    return false;
  }
  bool ended = false, ok = true;
  Sink sink;
  sink.write = [&](const char* d, std::size_t n) {
    if (n == 0) return ok;  // a chunk of 0 bytes would end the stream
    char size[24];
    const int k = std::snprintf(size, sizeof size, "%zx\r\n", n);
    std::string chunk(size, static_cast<std::size_t>(k));
    chunk.append(d, n);
    chunk += "\r\n";
    ok = ok && send_all(fd, chunk.data(), chunk.size());
    return ok;
  };
  sink.done = [&] {
    if (ended) return;
    ended = true;
    ok = ok && send_all(fd, "0\r\n\r\n", 5);
  };
  if (!res.provider(0, sink)) ok = false;
  if (ok) sink.done();  // a provider that returned true without ending the stream
  if (res.releaser) res.releaser(true);
  return ok;
}

// A refusal the transport writes itself (400, 408, 413, 431, 503), in the routes' error shape,
// after which it closes the connection.
inline std::string error_response(int status, const std::string& why) {
  HttpResponse res;
  res.status = status;
  const char* type = status == 503 ? "unavailable" : "validation";
  res.set_content(dump_json({{"error", why}, {"error_type", type}}), "application/json");
  std::string s = response_head(res, false);
  return s + res.body;
}

}  // namespace servekit::serve::http
