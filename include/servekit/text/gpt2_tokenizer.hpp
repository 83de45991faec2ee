// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2's byte-level BPE tokenizer: encode gives the ids Hugging Face's GPT2TokenizerFast gives
// (special token "<|endoftext|>" included), decode gives the raw bytes back.
//
//   text --split on "<|endoftext|>"--> segments --pretoken_end--> words --bytes--> BPE --> ids
//
// Loads OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json + merges.txt (the same
// content under other names). Words already merged are cached; encode is const and may be
// called from several threads at once.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>
#include <unicode/utf8.h>

#include "servekit/core/error.hpp"
#include "servekit/core/regular_file.hpp"
#include "servekit/core/json_brief.hpp"
#include "servekit/text/bpe.hpp"
#include "servekit/text/byte_unicode.hpp"
#include "servekit/text/pretokenize.hpp"
#include "servekit/text/vocab_dir.hpp"

namespace servekit::text {

namespace detail {

inline std::string read_file(const std::filesystem::path& path, const char* what) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(what, " ", path.string(), ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A vocabulary key written with GPT-2's byte <-> unicode table, back to raw bytes. A character
// outside the table (not produced by GPT-2 itself) stands for its own UTF-8 bytes.
inline std::string unmap_bytes(std::string_view key) {
  static constexpr auto kToByte = unicode_to_byte();
  std::string bytes;
  bytes.reserve(key.size());
  const auto* p = reinterpret_cast<const uint8_t*>(key.data());
  for (int32_t i = 0, n = int32_t(key.size()); i < n;) {
    const int32_t start = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c >= 0 && c < 512 && kToByte[c] >= 0)
      bytes.push_back(char(kToByte[c]));
    else
      bytes.append(key.substr(size_t(start), size_t(i - start)));
  }
  return bytes;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Word bytes -> ids. Bounded: once full, new words are merged every time (as HF's cache does).
class WordCache {
 public:
  static constexpr size_t kMaxEntries = 1 << 18;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are rare and costly to keep

  bool get(std::string_view word, std::vector<int32_t>& out) const {
    std::shared_lock lock(mu_);
    auto it = map_.find(word);
    if (it == map_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view word, const int32_t* ids, size_t n) {
    if (word.size() > kMaxWordBytes) return;
    std::unique_lock lock(mu_);
    if (map_.size() >= kMaxEntries) return;
    map_.try_emplace(std::string(word), ids, ids + n);
  }
  size_t size() const {
    std::shared_lock lock(mu_);
    return map_.size();
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map_;
};

// Per-call buffers of encode.
struct BpeWork {
  std::vector<int32_t> byte_ids;  // (word bytes,)
  BpeScratch scratch;
};

}  // namespace detail

class Gpt2Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // GPT-2's vocabulary as it ships with servekit (default_vocab_dir(): $SERVEKIT_VOCAB, the
  // installed share/servekit/gpt2, or the source tree's data/gpt2).
  static Gpt2Tokenizer gpt2() { return from_dir(default_vocab_dir()); }

  // dir holds encoder.json + vocab.bpe (OpenAI) or vocab.json + merges.txt (Hugging Face).
  static Gpt2Tokenizer from_dir(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    const char* pairs[2][2] = {{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}};
    for (auto& p : pairs)
      if (fs::is_regular_file(dir / p[0]) && fs::is_regular_file(dir / p[1]))
        return from_files(dir / p[0], dir / p[1]);
    std::string found;
    for (auto& p : pairs)
      for (const char* f : p)
        if (fs::exists(dir / f)) found += std::string(found.empty() ? "" : ", ") + f;
    fail("tokenizer directory ", dir.string(),
         ": looked for encoder.json + vocab.bpe or vocab.json + merges.txt, found ",
         found.empty() ? std::string("none of them") : found);
  }

  static Gpt2Tokenizer from_files(const std::filesystem::path& vocab_json,
                                  const std::filesystem::path& merges) {
    Gpt2Tokenizer t;
    auto tables = std::make_shared<Tables>();
    load_vocab(vocab_json, *tables);
    load_merges(merges, vocab_json, *tables);
    tables->vocab_file = vocab_json;
    t.tables_ = std::move(tables);
    t.cache_ = std::make_shared<detail::WordCache>();
    return t;
  }

  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    detail::BpeWork work;
    // The special token is cut out first and never merged with its neighbours, as HF's added
    // vocabulary does; each piece between is pre-split on its own.
    while (!text.empty()) {
      const size_t at = tables_->eos >= 0 ? text.find(kEndOfText) : std::string_view::npos;
      encode_segment(text.substr(0, at), ids, work);
      if (at == std::string_view::npos) break;
      ids.push_back(tables_->eos);
      text.remove_prefix(at + kEndOfText.size());
    }
    return ids;
  }

  // Raw bytes of the tokens, concatenated; a multi-byte character split across tokens comes out
  // whole once all its tokens are there, invalid UTF-8 is passed through as is.
  std::string decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_view(id);
    return out;
  }

  std::string token_bytes(int32_t id) const { return std::string(token_view(id)); }

  std::string_view token_view(int32_t id) const {
    const Tables& t = *tables_;
    if (id < 0 || id >= vocab_size())
      fail("token id ", id, " is out of range: vocab size is ", vocab_size());
    return std::string_view(t.bytes).substr(t.offset[id], t.offset[id + 1] - t.offset[id]);
  }

  int32_t eos_id() const { return tables_->eos; }
  int32_t vocab_size() const { return int32_t(tables_->offset.size()) - 1; }
  // The vocab.json (or encoder.json) it was read from, for messages.
  const std::filesystem::path& vocab_file() const { return tables_->vocab_file; }
  size_t merge_count() const { return tables_->merges.size(); }
  size_t cached_words() const { return cache_->size(); }

 private:
  struct Tables {
    std::string bytes;             // all tokens' raw bytes back to back
    std::vector<uint32_t> offset;  // (V + 1,) token id -> start in bytes
    std::unordered_map<std::string, int32_t, detail::StringHash, std::equal_to<>> id_of;
    int32_t byte_id[256];  // token of each single byte: where every word starts
    MergeTable merges;
    int32_t eos = -1;
    std::filesystem::path vocab_file;
  };

  Gpt2Tokenizer() = default;

  void encode_segment(std::string_view segment, std::vector<int32_t>& ids,
                      detail::BpeWork& work) const {
    for_each_pretoken(segment, [&](std::string_view word) {
      if (cache_->get(word, ids)) return;
      const size_t before = ids.size();
      work.byte_ids.clear();
      for (unsigned char b : word) work.byte_ids.push_back(tables_->byte_id[b]);
      bpe_merge(tables_->merges, work.byte_ids.data(), int32_t(work.byte_ids.size()), work.scratch,
                ids);
      cache_->put(word, ids.data() + before, ids.size() - before);
    });
  }

  static void load_vocab(const std::filesystem::path& path, Tables& t) {
    const std::string text = detail::read_file(path, "tokenizer vocab");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("tokenizer vocab ", path.string(), ": malformed JSON: ", e.what());
    }
    if (!j.is_object() || j.empty())
      fail("tokenizer vocab ", path.string(), ": expected a JSON object {token: id}, got ",
           j.type_name());
    const int64_t n = int64_t(j.size());
    std::vector<std::string> by_id(static_cast<size_t>(n));
    std::vector<bool> seen(static_cast<size_t>(n), false);
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string token = string_brief(it.key());
      if (!it.value().is_number_integer())
        fail("tokenizer vocab ", path.string(), ": token ", token, " has a non-integer id ",
             json_brief(it.value()));
      // An id past int64 (2^63) is unsigned in the JSON library: compare before converting,
      // and print it as written.
      const bool in_range = it.value().is_number_unsigned()
                                ? it.value().get<uint64_t>() < uint64_t(n)
                                : it.value().get<int64_t>() >= 0 && it.value().get<int64_t>() < n;
      if (!in_range)
        fail("tokenizer vocab ", path.string(), ": token ", token, " has id ",
             json_brief(it.value()), ", outside 0..", n - 1, " (ids must be dense)");
      const int64_t id = it.value().get<int64_t>();
      if (seen[size_t(id)])
        fail("tokenizer vocab ", path.string(), ": id ", id, " is used twice (again by ", token,
             ")");
      seen[size_t(id)] = true;
      by_id[size_t(id)] = detail::unmap_bytes(it.key());
      if (it.key() == kEndOfText) t.eos = int32_t(id);
    }
    t.offset.resize(size_t(n) + 1);
    t.offset[0] = 0;
    for (int64_t id = 0; id < n; ++id) {
      t.bytes += by_id[size_t(id)];
      t.offset[size_t(id) + 1] = uint32_t(t.bytes.size());
      t.id_of.try_emplace(by_id[size_t(id)], int32_t(id));
    }
    for (int b = 0; b < 256; ++b) {
      auto it = t.id_of.find(std::string_view(std::string(1, char(b))));
      if (it == t.id_of.end())
        fail("tokenizer vocab ", path.string(), ": no token for byte ", b,
             " (a byte-level BPE vocabulary has one for each of the 256 bytes)");
      t.byte_id[b] = it->second;
    }
  }

  static void load_merges(const std::filesystem::path& path, const std::filesystem::path& vocab,
                          Tables& t) {
    const std::string text = detail::read_file(path, "tokenizer merges");
    std::istringstream in(text);
    std::string line;
    int32_t rank = 0;
    t.merges.reserve(t.offset.size());
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.starts_with("#version")) continue;
      const size_t sp = line.find(' ');
      if (line.empty() || sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
          line.find(' ', sp + 1) != std::string::npos)
        fail("tokenizer merges ", path.string(), " line ", line_no,
             ": expected two tokens separated by one space, got ", string_brief(line));
      const std::string left = detail::unmap_bytes(std::string_view(line).substr(0, sp));
      const std::string right = detail::unmap_bytes(std::string_view(line).substr(sp + 1));
      auto id = [&](const std::string& bytes, std::string_view written) {
        auto it = t.id_of.find(bytes);
        if (it == t.id_of.end())
          fail("tokenizer merges ", path.string(), " line ", line_no, ": ", string_brief(written),
               " is not in the vocabulary ", vocab.string());
        return it->second;
      };
      const int32_t a = id(left, std::string_view(line).substr(0, sp));
      const int32_t b = id(right, std::string_view(line).substr(sp + 1));
      const int32_t merged = id(left + right, line.substr(0, sp) + line.substr(sp + 1));
      t.merges.add(a, b, {rank++, merged});
    }
  }

  std::shared_ptr<const Tables> tables_;
  std::shared_ptr<detail::WordCache> cache_;  // shared by copies: they hold the same tables
};

}  // namespace servekit::text
