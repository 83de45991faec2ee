// SPDX-License-Identifier: Apache-2.0
#pragma once
// ApiError: a request the HTTP server refuses, with the status and error type its clients
// expect (text-generation-inference / LoRAX spell the type; OpenAI routes wrap it).
#include <stdexcept>
#include <string>

#include "servekit/core/error.hpp"

namespace servekit::serve::http {

struct ApiError : std::runtime_error {
  int status;
  std::string type;  // validation | generation | overloaded | not_found | unavailable
  ApiError(int s, std::string t, const std::string& msg)
      : std::runtime_error(msg), status(s), type(std::move(t)) {}
};

template <class... A>
[[noreturn]] void invalid(const A&... a) {  // 422: the request is wrong
  throw ApiError(422, "validation", detail::cat(a...));
}

}  // namespace servekit::serve::http
