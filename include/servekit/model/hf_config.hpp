// SPDX-License-Identifier: Apache-2.0
#pragma once
// The part of a Hugging Face GPT-2 config.json that decides the computation. Options that would
// change the maths servekit implements (another activation, a different MLP width, other
// attention scaling) are refused here rather than silently ignored.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "servekit/core/error.hpp"
#include "servekit/core/regular_file.hpp"
#include "servekit/core/json_brief.hpp"
#include "servekit/core/json_file.hpp"
#include "servekit/core/dims.hpp"

namespace servekit::model {

struct Gpt2HfConfig {
  int n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0, n_positions = 0;
  float layer_norm_epsilon = 1e-5f;
  std::string activation_function = "gelu_new";
};

namespace detail {

inline int config_int(const nlohmann::json& j, const char* field, const std::string& file) {
  auto it = j.find(field);
  if (it == j.end()) fail(file, ": missing required field '", field, "'");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 30))
    fail(file, ": field '", field, "' is ", json_brief(*it), ", not a positive integer");
  return int(it->get<int64_t>());
}

// A boolean option that servekit supports only at one value; absent means HF's default.
inline void config_flag(const nlohmann::json& j, const char* field, bool supported,
                        const std::string& file) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return;
  if (!it->is_boolean())
    fail(file, ": field '", field, "' is ", json_brief(*it), ", not a boolean");
  if (it->get<bool>() != supported)
    fail(file, ": field '", field, "' is ", json_brief(*it), "; servekit supports only ",
         supported ? "true" : "false");
}

}  // namespace detail

inline Gpt2HfConfig read_gpt2_config(const std::filesystem::path& config_json) {
  const std::string file = config_json.string();
  const nlohmann::json j = read_json_file(config_json);
  if (!j.is_object()) fail(file, ": config is a JSON ", j.type_name(), ", not an object");

  if (auto mt = j.find("model_type"); mt != j.end() && *mt != "gpt2")
    fail(file, ": field 'model_type' is ", json_brief(*mt), ", not \"gpt2\"");

  Gpt2HfConfig c;
  c.n_layer = detail::config_int(j, "n_layer", file);
  c.n_head = detail::config_int(j, "n_head", file);
  c.n_embd = detail::config_int(j, "n_embd", file);
  c.vocab_size = detail::config_int(j, "vocab_size", file);
  c.n_positions = detail::config_int(j, "n_positions", file);
  if (c.n_embd % c.n_head != 0)
    fail(file, ": n_embd ", c.n_embd, " is not a multiple of n_head ", c.n_head);

  if (auto eps = j.find("layer_norm_epsilon"); eps != j.end()) {
    if (!eps->is_number() || eps->get<double>() <= 0)
      fail(file, ": field 'layer_norm_epsilon' is ", json_brief(*eps), ", not a positive number");
    // Kept as a float: 1e-50 would become 0 and 1e300 infinity.
    c.layer_norm_epsilon = eps->get<float>();
    if (!(c.layer_norm_epsilon > 0) || !std::isfinite(c.layer_norm_epsilon))
      fail(file, ": field 'layer_norm_epsilon' is ", json_brief(*eps),
           ", outside the positive range of a float (about 1.2e-38 to 3.4e38)");
  }
  // Both names denote the tanh approximation of GELU that GPT-2 was trained with.
  if (auto act = j.find("activation_function"); act != j.end()) {
    if (!act->is_string() || (*act != "gelu_new" && *act != "gelu_pytorch_tanh"))
      fail(file, ": field 'activation_function' is ", json_brief(*act),
           "; servekit supports \"gelu_new\" and \"gelu_pytorch_tanh\"");
    c.activation_function = act->get<std::string>();
  }
  // n_inner null (the default) means 4 * n_embd, the width servekit's MLP is built for.
  if (auto inner = j.find("n_inner"); inner != j.end() && !inner->is_null()) {
    if (!inner->is_number_integer() || inner->get<int64_t>() != 4 * int64_t(c.n_embd))
      fail(file, ": field 'n_inner' is ", json_brief(*inner),
           "; servekit supports only null or 4 * ", "n_embd = ", 4 * c.n_embd);
  }
  detail::config_flag(j, "scale_attn_weights", true, file);
  detail::config_flag(j, "scale_attn_by_inverse_layer_idx", false, file);
  detail::config_flag(j, "add_cross_attention", false, file);
  return c;
}

// Checks a checkpoint's config against the dims servekit was compiled for.
template <dims::ModelDims D>
void check_config_matches(const Gpt2HfConfig& c, const std::filesystem::path& config_json) {
  auto check = [&](const char* field, int file_value, int compiled) {
    if (file_value != compiled)
      fail(config_json.string(), ": ", field, " is ", file_value, " but dims ", D::name,
           " was compiled with ", compiled);
  };
  check("n_layer", c.n_layer, D::n_layer);
  check("n_head", c.n_head, D::n_head);
  check("n_embd", c.n_embd, D::n_embd);
  check("vocab_size", c.vocab_size, D::vocab);
  check("n_positions", c.n_positions, D::n_positions);
}

// The config a dims policy stands for (for random weights and for writing checkpoints).
template <dims::ModelDims D>
Gpt2HfConfig config_of() {
  Gpt2HfConfig c;
  c.n_layer = D::n_layer;
  c.n_head = D::n_head;
  c.n_embd = D::n_embd;
  c.vocab_size = D::vocab;
  c.n_positions = D::n_positions;
  return c;
}

}  // namespace servekit::model
