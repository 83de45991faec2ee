// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a route sees of HTTP: a whole request (its body already read) and the response it
// fills, either a body or a stream of chunks written by a provider (server-sent events). The
// transport (transport.hpp) reads the one and writes the other.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace servekit::serve::http {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;  // HTTP/1.1's default, unless the client said close

  // The first value of a header, "" if absent. name: lower case.
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return "";
  }
};

// Where a streamed response writes: write() sends one chunk and says whether the client is
// still there; done() ends the stream.
struct Sink {
  std::function<bool(const char* data, std::size_t n)> write;
  std::function<void()> done;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // beside Content-Type / -Length
  std::string content_type, body;
  // Streamed: called with the sink once the head is written; returns false if the client is
  // gone. The releaser runs last, in any case: ran = whether the provider was called at all.
  std::function<bool(std::size_t offset, Sink& sink)> provider;
  std::function<void(bool ran)> releaser;

  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
  void set_chunked_content_provider(std::string type, std::function<bool(std::size_t, Sink&)> p,
                                    std::function<void(bool)> release = {}) {
    content_type = std::move(type);
    provider = std::move(p);
    releaser = std::move(release);
  }
};

inline std::string lower_case(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

inline const char* status_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 422:
      return "Unprocessable Entity";
    case 424:
      return "Failed Dependency";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace servekit::serve::http
