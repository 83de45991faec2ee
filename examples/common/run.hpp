// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every lesson's main() does after parsing its options: find the tokenizer, pick the
// compiled dims for the model folder (or GPT-2 124M with random weights when there is none),
// run the lesson, and turn an error into a message and exit code 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <type_traits>

#include "servekit/model/dispatch.hpp"
#include "servekit/model/hf_config.hpp"
#include "servekit/text/tokenizer.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace servekit::examples {

// --model and --vocab, the options every lesson takes.
inline void add_model_options(CLI::App& app, std::string& model, std::string& vocab) {
  app.add_option("--model", model, "Hugging Face GPT-2 folder (default: random GPT-2 124M)");
  app.add_option("--vocab", vocab,
                 "tokenizer folder (default: the model folder or the GPT-2 vocabulary)");
}

// lesson: a generic lambda [&]<class D>(std::type_identity<D>, const text::Gpt2Tokenizer&) -> int.
template <class F>
int run_lesson(const char* name, const std::string& model, const std::string& vocab, F&& lesson) {
  try {
    auto tok = text::Gpt2Tokenizer::from_dir(text::vocab_dir_for(vocab, model));
    if (model.empty()) return lesson(std::type_identity<dims::Gpt2Small>{}, tok);
    auto cfg = model::read_gpt2_config(std::filesystem::path(model) / "config.json");
    return dispatch_dims(cfg, [&]<class D>(std::type_identity<D> d) { return lesson(d, tok); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 2;
  }
}

}  // namespace servekit::examples
