// SPDX-License-Identifier: Apache-2.0
// `servekit serve` for the sanitizer build of the CLI (tests/sanitize.cmake), whose tests drive
// tokenize, generate and batch only: compiling the HTTP server a second time, instrumented,
// would add minutes to every CI run and no test would run it. The plain build's server has its
// own tests (tests/server/).
#include <cstdio>

#include "../../apps/serve.hpp"

namespace servekit::cli {

int run_serve(const ServeArgs&) {
  std::fprintf(stderr, "servekit: error: this sanitizer build has no `serve` subcommand\n");
  return 2;
}

}  // namespace servekit::cli
