// SPDX-License-Identifier: Apache-2.0
#pragma once
// How much memory this machine can still give, and byte counts as people read them.
//   host_memory_available()  /proc/meminfo's MemAvailable (what the kernel could hand out
//                            without swapping), else the free physical pages
//   bytes_text(n)            "1.5 GiB", "640 KiB", "12 B"
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <string>

#include <unistd.h>

namespace servekit {

inline std::size_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * page : 0;
}

inline std::string bytes_text(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) n /= 1024, u++;
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", n, units[u]);
  return s;
}

}  // namespace servekit
