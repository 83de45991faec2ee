// SPDX-License-Identifier: Apache-2.0
#pragma once
// Test-only: writes .safetensors files, well-formed or deliberately broken, and GPT-2 checkpoint
// directories, into a temporary directory that is removed afterwards.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/dtype.hpp"
#include "servekit/core/error.hpp"
#include "servekit/model/gpt2_tensors.hpp"

namespace servekit::testing {

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto base = std::filesystem::temp_directory_path();
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = base / ("servekit-test-" + std::to_string(rd()));
      if (std::filesystem::create_directory(path_)) return;
    }
    fail("cannot create a temporary directory under ", base.string());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) fail(p.string(), ": write failed");
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  write_bytes(p, std::as_bytes(std::span(text.data(), text.size())));
}

// Encodes fp32 values as F32 / F16 / BF16 little-endian bytes.
inline std::vector<std::byte> encode(std::span<const float> v, DType dt) {
  std::vector<std::byte> out(v.size() * size(dt));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else if (dt == DType::F16) {
      const uint16_t b = float_to_half(v[i]).bits;
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else if (dt == DType::BF16) {
      const uint16_t b = float_to_bf16(v[i]).bits;
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {
      fail("encode: unsupported dtype ", dt);
    }
  }
  return out;
}

// Builds a file tensor by tensor. header() gives the JSON it would write, so a test can edit it
// (wrong offsets, bad dtype, ...) and write it with write_raw().
class SafetensorsWriter {
 public:
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           std::span<const std::byte> bytes) {
    nlohmann::json e;
    e["dtype"] = dtype;
    e["shape"] = shape;
    e["data_offsets"] = {data_.size(), data_.size() + bytes.size()};
    header_[name] = e;
    data_.insert(data_.end(), bytes.begin(), bytes.end());
  }
  void add(const std::string& name, std::vector<int64_t> shape, std::span<const float> values,
           DType dt = DType::F32) {
    add(name, std::string(servekit::name(dt)), std::move(shape), encode(values, dt));
  }
  void metadata(const std::string& key, const std::string& value) {
    header_["__metadata__"][key] = value;
  }

  nlohmann::json& header() { return header_; }
  std::vector<std::byte>& data() { return data_; }

  void write(const std::filesystem::path& p) const { write_raw(p, header_.dump(), data_); }

  // 8-byte little-endian length, the header padded with spaces to a multiple of 8 (as the
  // reference writer does), then the data.
  static void write_raw(const std::filesystem::path& p, std::string header,
                        std::span<const std::byte> data, bool pad = true) {
    if (pad)
      while (header.size() % 8) header += ' ';
    std::vector<std::byte> out(8);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[std::size_t(i)] = std::byte((n >> (8 * i)) & 0xff);
    for (char c : header) out.push_back(std::byte(c));
    out.insert(out.end(), data.begin(), data.end());
    write_bytes(p, out);
  }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::vector<std::byte> data_;
};

// How a synthetic GPT-2 checkpoint is spelled on disk.
struct Gpt2Layout {
  bool prefix = true;         // "transformer." names, as GPT2LMHeadModel writes
  bool lm_head = false;       // also write a (tied) lm_head.weight
  bool mask_buffers = false;  // also write attn.bias / attn.masked_bias
  DType dtype = DType::F32;
};

inline nlohmann::json gpt2_config_json(const model::Gpt2HfConfig& c) {
  return {{"model_type", "gpt2"},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_embd", c.n_embd},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.n_positions},
          {"n_ctx", c.n_positions},
          {"n_inner", nullptr},
          {"layer_norm_epsilon", c.layer_norm_epsilon},
          {"activation_function", c.activation_function},
          {"initializer_range", 0.02}};
}

// Every weight of `t` under its HF name (with or without the prefix) and shape.
inline std::vector<
    std::pair<std::string, std::pair<std::vector<int64_t>, const std::vector<float>*>>>
gpt2_named_tensors(const model::Gpt2Tensors& t, bool prefix) {
  const int64_t C = t.config.n_embd;
  const std::string p = prefix ? "transformer." : "";
  std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, const std::vector<float>*>>>
      out = {{p + "wte.weight", {{t.config.vocab_size, C}, &t.wte}},
             {p + "wpe.weight", {{t.config.n_positions, C}, &t.wpe}},
             {p + "ln_f.weight", {{C}, &t.ln_f_w}},
             {p + "ln_f.bias", {{C}, &t.ln_f_b}}};
  for (std::size_t i = 0; i < t.layers.size(); ++i) {
    const auto& l = t.layers[i];
    const std::string h = p + "h." + std::to_string(i) + ".";
    out.push_back({h + "ln_1.weight", {{C}, &l.ln_1_w}});
    out.push_back({h + "ln_1.bias", {{C}, &l.ln_1_b}});
    out.push_back({h + "attn.c_attn.weight", {{C, 3 * C}, &l.attn_w}});
    out.push_back({h + "attn.c_attn.bias", {{3 * C}, &l.attn_b}});
    out.push_back({h + "attn.c_proj.weight", {{C, C}, &l.attn_proj_w}});
    out.push_back({h + "attn.c_proj.bias", {{C}, &l.attn_proj_b}});
    out.push_back({h + "ln_2.weight", {{C}, &l.ln_2_w}});
    out.push_back({h + "ln_2.bias", {{C}, &l.ln_2_b}});
    out.push_back({h + "mlp.c_fc.weight", {{C, 4 * C}, &l.fc_w}});
    out.push_back({h + "mlp.c_fc.bias", {{4 * C}, &l.fc_b}});
    out.push_back({h + "mlp.c_proj.weight", {{4 * C, C}, &l.mlp_proj_w}});
    out.push_back({h + "mlp.c_proj.bias", {{C}, &l.mlp_proj_b}});
  }
  return out;
}

// A writer holding all of `t` in the given layout; the caller may add or edit before writing.
inline SafetensorsWriter gpt2_writer(const model::Gpt2Tensors& t, const Gpt2Layout& layout) {
  SafetensorsWriter w;
  for (const auto& [name, st] : gpt2_named_tensors(t, layout.prefix))
    w.add(name, st.first, *st.second, layout.dtype);
  if (layout.lm_head)
    w.add("lm_head.weight", {t.config.vocab_size, t.config.n_embd}, t.wte, layout.dtype);
  if (layout.mask_buffers) {
    const int64_t P = t.config.n_positions;
    const std::string p = layout.prefix ? "transformer." : "";
    for (std::size_t i = 0; i < t.layers.size(); ++i) {
      std::vector<std::byte> mask(std::size_t(P * P), std::byte{0});
      for (int64_t r = 0; r < P; ++r)
        for (int64_t c = 0; c <= r; ++c) mask[std::size_t(r * P + c)] = std::byte{1};
      w.add(p + "h." + std::to_string(i) + ".attn.bias", "BOOL", {1, 1, P, P}, mask);
      const float masked = -1e4f;
      w.add(p + "h." + std::to_string(i) + ".attn.masked_bias", {}, std::span(&masked, 1),
            layout.dtype);
    }
  }
  return w;
}

inline void write_gpt2_checkpoint(const std::filesystem::path& dir, const model::Gpt2Tensors& t,
                                  const Gpt2Layout& layout) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.json", gpt2_config_json(t.config).dump(2));
  gpt2_writer(t, layout).write(dir / "model.safetensors");
}

}  // namespace servekit::testing
