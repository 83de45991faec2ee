// SPDX-License-Identifier: Apache-2.0
#pragma once
// One compiled composition running a subcommand: the dims come from the checkpoint's
// config.json (model/dispatch.hpp), then generate / batch / serve / bench run with
// C::Config<D> and C::Scheduler. Included by each composition's translation unit only.
#include <filesystem>
#include <type_traits>

#include "batch.hpp"
#include "bench.hpp"
#include "device_name.hpp"
#include "generate.hpp"
#include "job.hpp"
#if !defined(SERVEKIT_CLI_NO_SERVE)
#include "serve.hpp"
#endif
#include "servekit/model/dispatch.hpp"
#include "servekit/model/hf_config.hpp"
#include "servekit/serve/compiled.hpp"

namespace servekit::cli {

template <class C, class D>
int run_as(const Job& job) {
  if (job.generate) return generate_as<C, D>(job);
  if (job.batch) return batch_as<C, D>(job);
#if defined(SERVEKIT_CLI_NO_SERVE)
  // The sanitizer build of the CLI (tests/sanitize.cmake): its tests drive tokenize, generate,
  // batch and bench; the server, instrumented, would add minutes to every CI run and no test
  // would run it (the plain build's server has its own tests, tests/server/).
  if (job.serve) fail("this sanitizer build has no `serve` subcommand");
#else
  if (job.serve) return serve_as<C, D>(job);
#endif
  return bench_as<C, D>(job);
}

template <class C>
int run_composition(const Job& job) {
  check_device<typename C::Backend>();
  const std::string& dir = job.generate ? job.generate->model
                           : job.batch  ? job.batch->model
                           : job.serve  ? job.serve->model
                                        : job.bench->model;
  if (dir.empty()) return run_as<C, dims::Gpt2Small>(job);  // the seeded random GPT-2 124M
  const auto cfg = model::read_gpt2_config(std::filesystem::path(dir) / "config.json");
  return dispatch_dims(cfg, [&]<class D>(std::type_identity<D>) { return run_as<C, D>(job); });
}

}  // namespace servekit::cli
