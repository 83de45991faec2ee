// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reads the HF reference fixtures written by tools/make_reference.py (see
// tests/fixtures/README.md for the layout).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "servekit/io/safetensors.hpp"

namespace servekit::test {

// tests/fixtures/<dims name>: the HF checkpoint and reference of a test model.
template <class D>
std::filesystem::path fixture_dir() {
  return std::filesystem::path(SERVEKIT_FIXTURES) / std::string(D::name);
}

struct RefCase {
  std::string name;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;    // (n_steps + 1)
  std::vector<float> prefill_logits;  // (T, V)
  std::vector<float> step_logits;     // (n_steps, V)
};

struct RefBatch {
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::vector<int32_t>> greedy_ids;  // (B, n_steps + 1)
  std::vector<int64_t> attention_mask;           // (B, Tpad)
  std::vector<float> logits;                     // (B, Tpad, V)
  std::vector<float> step_logits;                // (B, n_steps, V)
  int n_steps = 0, t_pad = 0;
};

struct Reference {
  std::vector<RefCase> cases;
  RefBatch batch;
  int n_steps = 0;
};

inline Reference load_reference(const std::filesystem::path& dir) {
  std::ifstream in(dir / "reference.json");
  auto j = nlohmann::json::parse(in);
  auto st = io::SafetensorsFile::open(dir / "reference.safetensors");
  Reference r;
  r.n_steps = j["n_steps"];
  int i = 0;
  for (auto& c : j["cases"]) {
    RefCase rc;
    rc.name = c["name"];
    rc.prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
    rc.greedy_ids = c["greedy_ids"].get<std::vector<int32_t>>();
    rc.prefill_logits = io::read_as_f32(st.at("case" + std::to_string(i) + ".prefill_logits"));
    rc.step_logits = io::read_as_f32(st.at("case" + std::to_string(i) + ".step_logits"));
    r.cases.push_back(std::move(rc));
    i++;
  }
  if (!j.contains("batch")) return r;  // adapter references have no batch
  auto& b = j["batch"];
  r.batch.prompt_ids = b["prompt_ids"].get<std::vector<std::vector<int32_t>>>();
  r.batch.greedy_ids = b["greedy_ids"].get<std::vector<std::vector<int32_t>>>();
  r.batch.n_steps = b["n_steps"];
  r.batch.logits = io::read_as_f32(st.at("batch.logits"));
  r.batch.step_logits = io::read_as_f32(st.at("batch.step_logits"));
  const auto& mask = st.at("batch.attention_mask");
  r.batch.t_pad = static_cast<int>(mask.shape.at(1));
  r.batch.attention_mask.resize(mask.numel());
  io::read_bytes(mask, std::as_writable_bytes(std::span(r.batch.attention_mask)));
  return r;
}

inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace servekit::test
