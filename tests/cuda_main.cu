// SPDX-License-Identifier: Apache-2.0
// Catch2's main for the tests built by nvcc for a GPU. Listing the tests needs no device (the
// bundle check compares the lists without one); running them does: without a device the
// program says so in one line and exits with backend::kNoCudaDeviceExit, not with a page of
// failed CUDA calls.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "servekit/backend/cuda_device.hpp"

int main(int argc, char* argv[]) {
  // Line by line, so that what a crashing test printed reaches the log.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& cfg = session.configData();
  const bool listing =
      cfg.listTests || cfg.listTestNamesOnly || cfg.listTags || cfg.listReporters || cfg.showHelp;
  if (!listing) {
    const std::string me = std::filesystem::path(argv[0]).filename().string();
    if (const std::string why = servekit::backend::cuda_device_missing(); !why.empty()) {
      std::fprintf(stderr, "%s: no CUDA device (%s); nothing run\n", me.c_str(), why.c_str());
      return servekit::backend::kNoCudaDeviceExit;
    }
    std::printf("%s: on %s\n", me.c_str(), servekit::backend::cuda_device_summary().c_str());
  }
  return session.run();
}
