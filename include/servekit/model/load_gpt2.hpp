// SPDX-License-Identifier: Apache-2.0
#pragma once
// Loading a Hugging Face GPT-2 checkpoint directory (config.json + model.safetensors, or a
// sharded model.safetensors.index.json) into fp32 host tensors.
//
// HF writes the same weights under two spellings: GPT2LMHeadModel prefixes them with
// "transformer." (and may add a tied "lm_head.weight"), GPT2Model does not. Both are accepted.
// The causal-mask buffers "attn.bias" / "attn.masked_bias" that older versions saved are not
// weights and are skipped; any other tensor servekit does not know is an error, because a
// silently ignored weight means a silently different model.
#include <cmath>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/core/json_file.hpp"
#include "servekit/core/regular_file.hpp"
#include "servekit/core/json_brief.hpp"
#include "servekit/io/safetensors.hpp"
#include "servekit/core/dims.hpp"
#include "servekit/model/gpt2_tensors.hpp"
#include "servekit/model/hf_config.hpp"
#include "servekit/model/random_gpt2.hpp"

namespace servekit::model {

namespace detail {

inline constexpr std::string_view hf_prefix = "transformer.";

// The tensors of one checkpoint directory, by name without the "transformer." prefix.
class CheckpointTensors {
 public:
  struct Found {
    const io::TensorEntry* entry;  // entry->name is the name as written in the file
  };

  static CheckpointTensors open(const std::filesystem::path& dir) {
    CheckpointTensors c;
    const auto single = dir / "model.safetensors";
    const auto index = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(single)) {
      c.where_ = single.string();
      c.files_.push_back(io::SafetensorsFile::open(single));
    } else if (std::filesystem::exists(index)) {
      c.where_ = index.string();
      c.open_shards(dir, index);
    } else {
      fail(dir.string(), ": no checkpoint: neither model.safetensors nor ",
           "model.safetensors.index.json exists");
    }
    for (const io::SafetensorsFile& f : c.files_)
      for (const io::TensorEntry& e : f.entries()) c.add(e);
    return c;
  }

  const io::TensorEntry* find(std::string_view canonical) const {
    auto it = by_name_.find(std::string(canonical));
    return it == by_name_.end() ? nullptr : it->second;
  }
  const std::map<std::string, const io::TensorEntry*>& all() const { return by_name_; }
  const std::string& where() const { return where_; }

 private:
  void open_shards(const std::filesystem::path& dir, const std::filesystem::path& index) {
    const std::string p = index.string();
    const nlohmann::json j = read_json_file(index);
    auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (wm == j.end() || !wm->is_object()) fail(p, ": missing object field 'weight_map'");
    std::map<std::string, std::size_t> file_index;
    std::vector<std::pair<std::string, std::string>> listed;  // (tensor, shard file)
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        fail(p, ": weight_map entry '", it.key(), "' is ", json_brief(it.value()),
             ", not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..")
        fail(p, ": weight_map entry '", it.key(), "' names '", shard, "', not a file in ",
             dir.string());
      listed.emplace_back(it.key(), shard);
      if (!file_index.count(shard)) {
        file_index[shard] = files_.size();
        files_.push_back(io::SafetensorsFile::open(dir / shard));
      }
    }
    for (const auto& [tensor, shard] : listed)
      if (!files_[file_index[shard]].find(tensor))
        fail(p, ": weight_map puts tensor '", tensor, "' in ", shard, ", which does not hold it");
  }

  void add(const io::TensorEntry& e) {
    std::string canonical = e.name;
    if (canonical.starts_with(hf_prefix)) canonical.erase(0, hf_prefix.size());
    auto [it, inserted] = by_name_.emplace(canonical, &e);
    if (!inserted)
      fail(where_, ": tensor '", canonical, "' appears twice, as '", it->second->name, "' (",
           it->second->file, ") and '", e.name, "' (", e.file, ")");
  }

  std::vector<io::SafetensorsFile> files_;
  std::map<std::string, const io::TensorEntry*> by_name_;
  std::string where_;
};

// "h.<i>.attn.bias" / "h.<i>.attn.masked_bias" with i < n_layer: HF's causal-mask buffers.
inline bool is_mask_buffer(std::string_view name, int n_layer) {
  if (!name.starts_with("h.")) return false;
  name.remove_prefix(2);
  int layer = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc{} || layer < 0 || layer >= n_layer) return false;
  const std::string_view rest(end, std::size_t(name.data() + name.size() - end));
  return rest == ".attn.bias" || rest == ".attn.masked_bias";
}

struct Wanted {
  std::string name;  // without the "transformer." prefix
  std::vector<int64_t> shape;
  std::vector<float>* dst;
};

// Loads every weight, checking shapes against `c` (which `expected_by` names in messages).
inline Gpt2Tensors load_gpt2_checked(const std::filesystem::path& dir, const Gpt2HfConfig& c,
                                     const std::string& expected_by) {
  const CheckpointTensors ck = CheckpointTensors::open(dir);
  const int64_t C = c.n_embd, V = c.vocab_size, P = c.n_positions;

  Gpt2Tensors t;
  t.config = c;
  t.layers.resize(std::size_t(c.n_layer));
  std::vector<Wanted> want = {
      {"wte.weight", {V, C}, &t.wte},
      {"wpe.weight", {P, C}, &t.wpe},
      {"ln_f.weight", {C}, &t.ln_f_w},
      {"ln_f.bias", {C}, &t.ln_f_b},
  };
  for (int i = 0; i < c.n_layer; ++i) {
    Gpt2LayerTensors& l = t.layers[std::size_t(i)];
    const std::string h = "h." + std::to_string(i) + ".";
    want.push_back({h + "ln_1.weight", {C}, &l.ln_1_w});
    want.push_back({h + "ln_1.bias", {C}, &l.ln_1_b});
    want.push_back({h + "attn.c_attn.weight", {C, 3 * C}, &l.attn_w});
    want.push_back({h + "attn.c_attn.bias", {3 * C}, &l.attn_b});
    want.push_back({h + "attn.c_proj.weight", {C, C}, &l.attn_proj_w});
    want.push_back({h + "attn.c_proj.bias", {C}, &l.attn_proj_b});
    want.push_back({h + "ln_2.weight", {C}, &l.ln_2_w});
    want.push_back({h + "ln_2.bias", {C}, &l.ln_2_b});
    want.push_back({h + "mlp.c_fc.weight", {C, 4 * C}, &l.fc_w});
    want.push_back({h + "mlp.c_fc.bias", {4 * C}, &l.fc_b});
    want.push_back({h + "mlp.c_proj.weight", {4 * C, C}, &l.mlp_proj_w});
    want.push_back({h + "mlp.c_proj.bias", {C}, &l.mlp_proj_b});
  }

  std::map<std::string_view, const Wanted*> by_name;
  for (const Wanted& w : want) by_name[w.name] = &w;
  for (const auto& [name, e] : ck.all())
    if (!by_name.count(name) && name != "lm_head.weight" && !is_mask_buffer(name, c.n_layer))
      fail(e->file, ": unexpected tensor '", e->name, "' (not a GPT-2 weight with n_layer ",
           c.n_layer, ")");

  auto check_shape = [&](const io::TensorEntry& e, const std::vector<int64_t>& shape) {
    if (e.shape != shape)
      fail(e.file, ": tensor '", e.name, "' has shape ", io::shape_str(e.shape), " but ",
           expected_by, " expects ", io::shape_str(shape));
  };
  for (const Wanted& w : want) {
    const io::TensorEntry* e = ck.find(w.name);
    if (!e)
      fail(ck.where(), ": missing tensor '", w.name, "' (looked for it with and without the '",
           hf_prefix, "' prefix)");
    check_shape(*e, w.shape);
    *w.dst = io::read_as_f32(*e);
    // One NaN or inf weight makes every logit NaN downstream: refuse it here, by name.
    const std::vector<float>& v = *w.dst;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) {
        const std::size_t cols = e->shape.size() == 2 ? std::size_t(e->shape[1]) : v.size();
        fail(e->file, ": tensor '", e->name, "' holds a non-finite value (", v[i], ") at ",
             e->shape.size() == 2 ? servekit::detail::cat("[", i / cols, ", ", i % cols, "]")
                                  : servekit::detail::cat("[", i, "]"),
             "; servekit refuses NaN and inf weights");
      }
  }

  // GPT-2 ties the output projection to the token embedding; servekit stores it once.
  if (const io::TensorEntry* lm = ck.find("lm_head.weight")) {
    check_shape(*lm, {V, C});
    const std::vector<float> head = io::read_as_f32(*lm);
    for (std::size_t i = 0; i < head.size(); ++i)
      if (std::memcmp(&head[i], &t.wte[i], sizeof(float)) != 0)
        fail(lm->file, ": tensor '", lm->name, "' differs from '", ck.find("wte.weight")->name,
             "' at [", i / std::size_t(C), ", ", i % std::size_t(C), "] (", head[i], " vs ",
             t.wte[i], "); servekit ties lm_head to wte as GPT-2 does");
  }
  return t;
}

}  // namespace detail

// Loads dir/config.json and the weights, checking both against the compiled dims D.
template <dims::ModelDims D>
Gpt2Tensors load_gpt2(const std::filesystem::path& dir) {
  const auto config_json = dir / "config.json";
  const Gpt2HfConfig c = read_gpt2_config(config_json);
  check_config_matches<D>(c, config_json);
  return detail::load_gpt2_checked(dir, c, "dims " + std::string(D::name));
}

// Loads whatever GPT-2 the directory holds, checking the weights against its own config.json.
inline Gpt2Tensors load_gpt2_any(const std::filesystem::path& dir) {
  const auto config_json = dir / "config.json";
  return detail::load_gpt2_checked(dir, read_gpt2_config(config_json), config_json.string());
}

}  // namespace servekit::model
