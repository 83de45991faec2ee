// SPDX-License-Identifier: Apache-2.0
#pragma once
// Errors: one exception type whose message names the file, tensor, field or value at fault.
#include <sstream>
#include <stdexcept>
#include <string>

namespace servekit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// fail("tensor ", name, ": expected ", a, " got ", b) -> throws servekit::Error
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::cat(args...));
}

}  // namespace servekit
