// SPDX-License-Identifier: Apache-2.0
#pragma once
// The CPU this process runs on, for reports (/info, the server's startup line, benchmarks): its
// model name and the vector ISA the host kernels can use on it.
#include <fstream>
#include <string>

namespace servekit {

inline std::string cpu_name() {
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      if (auto colon = line.find(':'); colon != std::string::npos)
        model = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  std::string isa;
#if defined(__x86_64__) && defined(__GNUC__)
  auto has = [&](bool on, const char* name) {
    if (on) isa += (isa.empty() ? "" : " ") + std::string(name);
  };
  __builtin_cpu_init();
  has(__builtin_cpu_supports("avx512f"), "avx512f");
  has(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  has(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  has(__builtin_cpu_supports("avx2"), "avx2");
  has(__builtin_cpu_supports("fma"), "fma");
  has(__builtin_cpu_supports("f16c"), "f16c");
#endif
  return isa.empty() ? model : model + " (" + isa + ")";
}

}  // namespace servekit
