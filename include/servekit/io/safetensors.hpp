// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading .safetensors files: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}), then the
// data region that the offsets index. Only the header is read on open; a tensor's bytes are
// read when it is converted (read_as_f32, read_bytes).
//
// Everything in the header is validated on open, so a TensorEntry can be trusted afterwards:
// its bytes lie inside the file (as it was when opened), match shape x dtype size, and overlap
// no other tensor.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "servekit/core/dtype.hpp"
#include "servekit/core/error.hpp"
#include "servekit/core/json_brief.hpp"
#include "servekit/io/read_file.hpp"

namespace servekit::io {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of its first byte in the file
  uint64_t nbytes = 0;
  std::shared_ptr<const ReadOnlyFile> source;
  std::string file;  // the file it lives in, for error messages

  // The parser has checked that the product of the non-zero dims fits int64.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      if (d == 0) return 0;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// "(768, 2304)"
inline std::string shape_str(std::span<const int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

class SafetensorsFile {
 public:
  // The format's own reader refuses headers above 100 MB; a larger length is a corrupt file.
  static constexpr uint64_t max_header_bytes = 100'000'000;

  static SafetensorsFile open(const std::filesystem::path& path) {
    SafetensorsFile f;
    f.file_ = ReadOnlyFile::open(path);
    f.parse();
    return f;
  }

  const TensorEntry* find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &entries_[it->second];
  }

  const TensorEntry& at(std::string_view name) const {
    if (const TensorEntry* e = find(name)) return *e;
    fail(path_str(), ": no tensor named '", name, "'");
  }

  // Tensors in the order their data appears in the file.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const TensorEntry& e : entries_) out.push_back(e.name);
    return out;
  }
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return file_->path(); }

 private:
  std::string path_str() const { return file_->path().string(); }

  void parse() {
    const std::string p = path_str();
    const uint64_t file_size = file_->size();
    if (file_size < 8)
      fail(p, ": file is ", file_size, " bytes, shorter than the 8-byte header length");
    std::byte len[8];
    file_->read_at(0, len, "header length");
    uint64_t n = 0;  // little-endian on disk
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(len[i]);
    if (n > max_header_bytes)
      fail(p, ": header length ", n, " is over the ", max_header_bytes, "-byte limit");
    if (n > file_size - 8)
      fail(p, ": header length ", n, " runs past the end of the file (", file_size, " bytes)");
    std::string text(std::size_t(n), '\0');
    file_->read_at(8, std::as_writable_bytes(std::span(text)), "header");
    const uint64_t data_begin = 8 + n, data_size = file_size - data_begin;

    nlohmann::json header;
    // A name given twice would otherwise be read as its last definition, silently.
    std::string twice;
    std::unordered_set<std::string> names;
    const auto dup_check = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& k) {
      if (depth == 1 && ev == nlohmann::json::parse_event_t::key && twice.empty() &&
          !names.insert(k.get<std::string>()).second)
        twice = k.get<std::string>();
      return true;
    };
    try {
      header = nlohmann::json::parse(text.begin(), text.end(), dup_check);
    } catch (const nlohmann::json::exception& e) {
      fail(p, ": header is not valid JSON: ", e.what());
    }
    if (!twice.empty())
      fail(p, ": tensor ", json_brief(nlohmann::json(twice)), " is defined twice in the header");
    if (!header.is_object()) fail(p, ": header is a JSON ", header.type_name(), ", not an object");

    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") {
        parse_metadata(it.value());
        continue;
      }
      entries_.push_back(parse_entry(it.key(), it.value(), data_begin, data_size));
    }

    // Overlap check: sorted by start, each tensor must begin at or after the previous one's end.
    // The sort also gives names() the file's own order.
    std::vector<std::pair<uint64_t, uint64_t>> offs(entries_.size());
    std::vector<std::size_t> order(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      order[i] = i;
      offs[i] = {entries_[i].offset - data_begin,
                 entries_[i].offset - data_begin + entries_[i].nbytes};
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return offs[a] != offs[b] ? offs[a] < offs[b] : entries_[a].name < entries_[b].name;
    });
    for (std::size_t k = 1; k < order.size(); ++k) {
      const std::size_t a = order[k - 1], b = order[k];
      // Empty tensors occupy no bytes and cannot overlap anything.
      if (offs[b].first < offs[a].second && offs[b].first < offs[b].second)
        fail(p, ": tensors '", entries_[a].name, "' [", offs[a].first, ", ", offs[a].second,
             ") and '", entries_[b].name, "' [", offs[b].first, ", ", offs[b].second, ") overlap");
    }
    std::vector<TensorEntry> sorted;
    sorted.reserve(entries_.size());
    for (std::size_t i : order) sorted.push_back(std::move(entries_[i]));
    entries_ = std::move(sorted);
    for (std::size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
  }

  void parse_metadata(const nlohmann::json& m) {
    const std::string p = path_str();
    if (!m.is_object()) fail(p, ": __metadata__ is a JSON ", m.type_name(), ", not an object");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string())
        fail(p, ": __metadata__ entry '", it.key(), "' is a JSON ", it.value().type_name(),
             ", not a string");
      metadata_[it.key()] = it.value().get<std::string>();
    }
  }

  TensorEntry parse_entry(const std::string& name, const nlohmann::json& j, uint64_t data_begin,
                          uint64_t data_size) const {
    const std::string p = path_str();
    auto where = [&] { return p + ": tensor '" + name + "'"; };
    if (!j.is_object()) fail(where(), ": entry is a JSON ", j.type_name(), ", not an object");

    TensorEntry e;
    e.name = name;
    e.file = p;

    auto dt = j.find("dtype");
    if (dt == j.end()) fail(where(), ": missing field 'dtype'");
    if (!dt->is_string()) fail(where(), ": field 'dtype' is ", json_brief(*dt), ", not a string");
    const std::string dts = dt->get<std::string>();
    const auto parsed = dtype_from_name(dts);
    if (!parsed) fail(where(), ": unknown dtype '", dts, "'");
    e.dtype = *parsed;

    auto sh = j.find("shape");
    if (sh == j.end()) fail(where(), ": missing field 'shape'");
    if (!sh->is_array()) fail(where(), ": field 'shape' is ", json_brief(*sh), ", not an array");
    // Elements, and (nonzero) the product of the non-zero dims, which must fit int64 even
    // when a zero dim makes the tensor empty: [3, 2^62, 0] is refused, not left to overflow.
    int64_t nonzero = 1;
    bool empty = false;
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        fail(where(), ": field 'shape' ", json_brief(*sh), " holds ", json_brief(d),
             ", not a non-negative integer");
      e.shape.push_back(d.get<int64_t>());
      if (e.shape.back() == 0)
        empty = true;
      else if (__builtin_mul_overflow(nonzero, e.shape.back(), &nonzero))
        fail(where(), ": shape ", json_brief(*sh), " overflows 64 bits (more than 2^63 elements)");
    }
    const uint64_t numel = empty ? 0 : uint64_t(nonzero);

    auto of = j.find("data_offsets");
    if (of == j.end()) fail(where(), ": missing field 'data_offsets'");
    if (!of->is_array() || of->size() != 2 || !(*of)[0].is_number_unsigned() ||
        !(*of)[1].is_number_unsigned())
      fail(where(), ": field 'data_offsets' is ", json_brief(*of),
           ", not [begin, end] with non-negative integers");
    const uint64_t begin = (*of)[0].get<uint64_t>(), end = (*of)[1].get<uint64_t>();
    if (begin > end) fail(where(), ": data_offsets ", json_brief(*of), " has begin > end");
    if (end > data_size)
      fail(where(), ": data_offsets ", json_brief(*of), " end past the data region (", data_size,
           " bytes)");
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t(size(e.dtype)), &nbytes) || nbytes != end - begin)
      fail(where(), ": shape ", shape_str(e.shape), " of ", e.dtype, " needs ", nbytes,
           " bytes but data_offsets ", json_brief(*of), " span ", end - begin);
    e.offset = data_begin + begin;
    e.nbytes = end - begin;
    e.source = file_;
    return e;
  }

  std::shared_ptr<const ReadOnlyFile> file_;
  std::vector<TensorEntry> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor's raw bytes, as stored (little-endian).
inline void read_bytes(const TensorEntry& e, std::span<std::byte> out) {
  if (out.size() != e.nbytes)
    fail(e.file, ": tensor '", e.name, "' has ", e.nbytes, " bytes but the output holds ",
         out.size());
  e.source->read_at(e.offset, out, "tensor '" + e.name + "'");
}

inline std::vector<std::byte> read_bytes(const TensorEntry& e) {
  std::vector<std::byte> out(std::size_t(e.nbytes));
  read_bytes(e, out);
  return out;
}

// Converts a F32/F16/BF16 tensor to fp32. 16-bit tensors are read a chunk at a time, so the
// staging costs 2 MB whatever the tensor's size.
inline void read_as_f32(const TensorEntry& e, std::span<float> out) {
  const std::size_t n = std::size_t(e.numel());
  if (out.size() != n)
    fail(e.file, ": tensor '", e.name, "' has ", n, " elements ", shape_str(e.shape),
         " but the output holds ", out.size());
  const std::string what = "tensor '" + e.name + "'";
  switch (e.dtype) {
    case DType::F32:
      e.source->read_at(e.offset, std::as_writable_bytes(out), what);
      return;
    case DType::F16:
    case DType::BF16: {
      constexpr std::size_t chunk = std::size_t(1) << 20;
      std::vector<uint16_t> bits(std::min(n, chunk));
      for (std::size_t at = 0; at < n; at += chunk) {
        const std::size_t len = std::min(chunk, n - at);
        const std::span<uint16_t> c(bits.data(), len);
        e.source->read_at(e.offset + 2 * at, std::as_writable_bytes(c), what);
        const std::ptrdiff_t count = std::ptrdiff_t(len);
        float* dst = out.data() + at;
        if (e.dtype == DType::F16) {
#pragma omp parallel for schedule(static) if (count > (1 << 16))
          for (std::ptrdiff_t i = 0; i < count; ++i) dst[i] = half_to_float(half_t{c[i]});
        } else {
#pragma omp parallel for schedule(static) if (count > (1 << 16))
          for (std::ptrdiff_t i = 0; i < count; ++i) dst[i] = bf16_to_float(bf16_t{c[i]});
        }
      }
      return;
    }
    default:
      fail(e.file, ": tensor '", e.name, "' has dtype ", e.dtype,
           "; only F32, F16 and BF16 can be read as floats");
  }
}

inline std::vector<float> read_as_f32(const TensorEntry& e) {
  std::vector<float> out(std::size_t(e.numel()));
  read_as_f32(e, out);
  return out;
}

}  // namespace servekit::io
