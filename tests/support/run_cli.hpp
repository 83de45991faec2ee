// SPDX-License-Identifier: Apache-2.0
#pragma once
// Runs the `servekit` command (SERVEKIT_CLI) as a script would: stdout and stderr together, and
// the exit code.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace servekit::test {

struct Run {
  int code;
  std::string out;  // stdout and stderr together
};

// The folder this process's temp files live in (servekit_test_PID: test_cli and test_cli_asan
// run the same cases, and ctest -j runs them at once), removed with everything in it when the
// process exits, a failed check included (Catch2 returns from main).
inline const std::filesystem::path& temp_folder() {
  struct Folder {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("servekit_test_" + std::to_string(::getpid()));
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ec;  // nothing to report from a destructor at exit
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder f;
  return f.path;
}

// name (a file or a folder the test makes) in this process's temp folder.
inline std::filesystem::path temp_file(const std::string& name) {
  return temp_folder() / name;
}

// env: "NAME=value" set for the program only (empty: the test's environment as it is).
inline Run run_env(const std::string& env, const std::string& args,
                   const std::string& stdin_text = "") {
  const std::filesystem::path in = temp_file("servekit_cli_stdin.txt");
  std::ofstream(in) << stdin_text;
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(SERVEKIT_CLI) +
                          " " + args + " < " + in.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

inline Run run(const std::string& args, const std::string& stdin_text = "") {
  return run_env("", args, stdin_text);
}

// "1,2,3"
inline std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

}  // namespace servekit::test
