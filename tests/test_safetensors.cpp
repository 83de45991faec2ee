// SPDX-License-Identifier: Apache-2.0
// SafetensorsFile: round trips of every dtype, and every way a file can be malformed, each
// checked for an error that names the file and the tensor or field at fault.
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "servekit/io/safetensors.hpp"
#include "support/safetensors_writer.hpp"

using namespace servekit;
using Catch::Contains;
using io::SafetensorsFile;
using testing::SafetensorsWriter;
using testing::TempDir;

namespace {

std::vector<float> random_floats(std::size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// A small valid file's writer: two F32 tensors.
SafetensorsWriter two_tensors() {
  SafetensorsWriter w;
  const auto a = random_floats(6, 1), b = random_floats(4, 2);
  w.add("a", {2, 3}, a);
  w.add("b", {4}, b);
  return w;
}

}  // namespace

TEST_CASE("F32, F16 and BF16 tensors read back as floats", "[safetensors]") {
  TempDir tmp;
  const auto v = random_floats(7 * 5, 3);
  SafetensorsWriter w;
  w.add("f32", {7, 5}, v, DType::F32);
  w.add("f16", {7, 5}, v, DType::F16);
  w.add("bf16", {5, 7}, v, DType::BF16);
  w.metadata("format", "pt");
  w.write(tmp / "m.safetensors");

  const auto f = SafetensorsFile::open(tmp / "m.safetensors");
  CHECK(f.names() == std::vector<std::string>{"f32", "f16", "bf16"});  // data order
  CHECK(f.metadata().at("format") == "pt");
  const auto& e32 = f.at("f32");
  CHECK(e32.dtype == DType::F32);
  CHECK(e32.shape == std::vector<int64_t>{7, 5});
  CHECK(f.at("bf16").shape == std::vector<int64_t>{5, 7});
  CHECK(f.find("nope") == nullptr);

  const auto r32 = io::read_as_f32(e32), r16 = io::read_as_f32(f.at("f16")),
             rbf = io::read_as_f32(f.at("bf16"));
  for (std::size_t i = 0; i < v.size(); ++i) {
    CHECK(r32[i] == v[i]);
    CHECK(r16[i] == half_to_float(float_to_half(v[i])));
    CHECK(rbf[i] == bf16_to_float(float_to_bf16(v[i])));
  }
}

TEST_CASE("every dtype round-trips its bytes", "[safetensors]") {
  TempDir tmp;
  SafetensorsWriter w;
  std::mt19937 g(4);
  std::vector<std::vector<std::byte>> payloads;
  for (DType t : all_dtypes) {
    std::vector<std::byte> bytes(3 * size(t));
    for (auto& b : bytes) b = std::byte(g() & 0xff);
    w.add(std::string("t_") + std::string(name(t)), std::string(name(t)), {3}, bytes);
    payloads.push_back(bytes);
  }
  w.add("empty", "F32", {0, 4}, {});
  w.add("scalar", {}, std::vector<float>{2.5f});
  w.write(tmp / "all.safetensors");

  const auto f = SafetensorsFile::open(tmp / "all.safetensors");
  std::size_t k = 0;
  for (DType t : all_dtypes) {
    const auto& e = f.at(std::string("t_") + std::string(name(t)));
    INFO(name(t));
    CHECK(e.dtype == t);
    const std::vector<std::byte> got = io::read_bytes(e);
    REQUIRE(got.size() == payloads[k].size());
    CHECK(std::memcmp(got.data(), payloads[k].data(), got.size()) == 0);
    if (!is_float_storage(t))
      REQUIRE_THROWS_WITH(io::read_as_f32(e), Contains("all.safetensors") &&
                                                  Contains("'t_" + std::string(name(t))) &&
                                                  Contains(std::string(name(t))));
    ++k;
  }
  CHECK(io::read_as_f32(f.at("empty")).empty());
  CHECK(f.at("scalar").shape.empty());
  CHECK(io::read_as_f32(f.at("scalar")) == std::vector<float>{2.5f});
}

TEST_CASE("read_as_f32 checks the output size", "[safetensors]") {
  TempDir tmp;
  two_tensors().write(tmp / "m.safetensors");
  const auto f = SafetensorsFile::open(tmp / "m.safetensors");
  std::vector<float> out(5);
  REQUIRE_THROWS_WITH(io::read_as_f32(f.at("a"), out),
                      Contains("'a'") && Contains("(2, 3)") && Contains("holds 5"));
  REQUIRE_THROWS_WITH(f.at("missing"), Contains("'missing'") && Contains("m.safetensors"));
}

TEST_CASE("files that are not safetensors are refused with the path", "[safetensors][bad]") {
  TempDir tmp;
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(SafetensorsFile::open(tmp / "absent.safetensors"),
                        Contains("absent.safetensors") && Contains("No such file"));
  }
  SECTION("empty file") {
    testing::write_text(tmp / "e.safetensors", "");
    REQUIRE_THROWS_WITH(SafetensorsFile::open(tmp / "e.safetensors"),
                        Contains("e.safetensors") && Contains("shorter than the 8-byte"));
  }
  SECTION("shorter than 8 bytes") {
    testing::write_text(tmp / "s.safetensors", "abc");
    REQUIRE_THROWS_WITH(SafetensorsFile::open(tmp / "s.safetensors"),
                        Contains("s.safetensors") && Contains("3 bytes"));
  }
  SECTION("header length beyond the file") {
    auto w = two_tensors();
    w.write(tmp / "t.safetensors");
    const auto full = std::filesystem::file_size(tmp / "t.safetensors");
    std::filesystem::resize_file(tmp / "t.safetensors", 20);  // truncated inside the header
    REQUIRE_THROWS_WITH(
        SafetensorsFile::open(tmp / "t.safetensors"),
        Contains("t.safetensors") && Contains("runs past the end") && Contains("(20 bytes)"));
    CHECK(full > 20);
  }
  SECTION("absurd header length") {
    std::vector<std::byte> b(16, std::byte{0xff});
    testing::write_bytes(tmp / "h.safetensors", b);
    REQUIRE_THROWS_WITH(
        SafetensorsFile::open(tmp / "h.safetensors"),
        Contains("h.safetensors") && Contains("18446744073709551615") && Contains("limit"));
  }
  SECTION("malformed JSON") {
    SafetensorsWriter::write_raw(tmp / "j.safetensors", "{\"a\": {\"dtype\": ", {});
    REQUIRE_THROWS_WITH(SafetensorsFile::open(tmp / "j.safetensors"),
                        Contains("j.safetensors") && Contains("not valid JSON"));
  }
  SECTION("JSON that is not an object") {
    SafetensorsWriter::write_raw(tmp / "k.safetensors", "[1, 2]", {});
    REQUIRE_THROWS_WITH(
        SafetensorsFile::open(tmp / "k.safetensors"),
        Contains("k.safetensors") && Contains("array") && Contains("not an object"));
  }
}

TEST_CASE("malformed headers name the tensor and field", "[safetensors][bad]") {
  TempDir tmp;
  const auto path = tmp / "bad.safetensors";
  auto w = two_tensors();
  auto& h = w.header();
  auto open = [&] {
    w.write(path);
    return SafetensorsFile::open(path);
  };

  SECTION("__metadata__ not string to string") {
    h["__metadata__"] = {{"format", 3}};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") &&
                                    Contains("__metadata__ entry 'format'") && Contains("number"));
  }
  SECTION("__metadata__ not an object") {
    h["__metadata__"] = "pt";
    REQUIRE_THROWS_WITH(open(),
                        Contains("bad.safetensors") && Contains("__metadata__ is a JSON string"));
  }
  SECTION("entry not an object") {
    h["b"] = 7;
    REQUIRE_THROWS_WITH(
        open(), Contains("bad.safetensors") && Contains("tensor 'b'") && Contains("not an object"));
  }
  SECTION("unknown dtype") {
    h["b"]["dtype"] = "F12";
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("unknown dtype 'F12'"));
  }
  SECTION("dtype not a string") {
    h["b"]["dtype"] = 4;
    REQUIRE_THROWS_WITH(
        open(), Contains("bad.safetensors") && Contains("tensor 'b'") && Contains("'dtype' is 4"));
  }
  SECTION("missing dtype") {
    h["a"].erase("dtype");
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'a'") &&
                                    Contains("missing field 'dtype'"));
  }
  SECTION("missing shape") {
    h["a"].erase("shape");
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'a'") &&
                                    Contains("missing field 'shape'"));
  }
  SECTION("negative dimension") {
    h["b"]["shape"] = {-4};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("[-4]") && Contains("non-negative integer"));
  }
  SECTION("fractional dimension") {
    h["b"]["shape"] = {4.5};
    REQUIRE_THROWS_WITH(open(),
                        Contains("bad.safetensors") && Contains("tensor 'b'") && Contains("4.5"));
  }
  SECTION("missing data_offsets") {
    h["b"].erase("data_offsets");
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("missing field 'data_offsets'"));
  }
  SECTION("data_offsets not a pair") {
    h["b"]["data_offsets"] = {24};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("'data_offsets' is [24]"));
  }
  SECTION("data_offsets with begin > end") {
    h["b"]["data_offsets"] = {40, 24};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("[40,24]") && Contains("begin > end"));
  }
  SECTION("data_offsets out of range") {
    h["b"]["data_offsets"] = {24, 44};  // the data region is 40 bytes
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("[24,44]") &&
                                    Contains("past the data region (40 bytes)"));
  }
  SECTION("truncated data") {
    w.data().resize(30);
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("[24,40]") && Contains("(30 bytes)"));
  }
  SECTION("shape disagrees with the byte size") {
    h["a"]["shape"] = {2, 2};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'a'") &&
                                    Contains("(2, 2)") && Contains("needs 16 bytes") &&
                                    Contains("span 24"));
  }
  SECTION("dtype disagrees with the byte size") {
    h["b"]["dtype"] = "F64";
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("tensor 'b'") &&
                                    Contains("of F64 needs 32 bytes"));
  }
  SECTION("overlapping tensors") {
    h["b"]["data_offsets"] = {16, 32};
    REQUIRE_THROWS_WITH(open(), Contains("bad.safetensors") && Contains("'a' [0, 24)") &&
                                    Contains("'b' [16, 32)") && Contains("overlap"));
  }
  SECTION("shape whose element count overflows") {
    h["b"]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
    REQUIRE_THROWS_WITH(
        open(), Contains("bad.safetensors") && Contains("tensor 'b'") && Contains("overflows"));
  }
}

TEST_CASE("F8 tensors are known but cannot be read as floats", "[safetensors][bad]") {
  TempDir tmp;
  SafetensorsWriter w;
  const std::vector<std::byte> bytes(8, std::byte{0x38});
  w.add("scales", "F8_E4M3", {2, 4}, bytes);
  w.write(tmp / "f8.safetensors");
  const auto f = SafetensorsFile::open(tmp / "f8.safetensors");
  CHECK(f.at("scales").dtype == DType::F8_E4M3);
  REQUIRE_THROWS_WITH(io::read_as_f32(f.at("scales")), Contains("f8.safetensors") &&
                                                           Contains("'scales'") &&
                                                           Contains("dtype F8_E4M3"));
}

TEST_CASE("tensors are readable at unaligned offsets", "[safetensors]") {
  // A header whose length is not a multiple of 4 leaves F32 data at unaligned file offsets.
  TempDir tmp;
  auto w = two_tensors();
  std::string header = w.header().dump();
  while (header.size() % 4 != 1) header += ' ';
  SafetensorsWriter::write_raw(tmp / "u.safetensors", header, w.data(), /*pad=*/false);
  const auto f = SafetensorsFile::open(tmp / "u.safetensors");
  std::vector<float> a(6);
  std::memcpy(a.data(), w.data().data(), 24);
  CHECK(io::read_as_f32(f.at("a")) == a);
}

TEST_CASE("16-bit tensors larger than the read chunk convert whole", "[safetensors]") {
  TempDir tmp;
  const std::size_t n = (std::size_t(1) << 20) * 2 + 37;  // two chunks and a tail
  const auto v = random_floats(n, 9);
  SafetensorsWriter w;
  w.add("h", {int64_t(n)}, v, DType::F16);
  w.add("b", {int64_t(n)}, v, DType::BF16);
  w.write(tmp / "big.safetensors");
  const auto f = SafetensorsFile::open(tmp / "big.safetensors");
  const auto h = io::read_as_f32(f.at("h")), b = io::read_as_f32(f.at("b"));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad += h[i] != half_to_float(float_to_half(v[i])) || b[i] != bf16_to_float(float_to_bf16(v[i]));
  CHECK(bad == 0);
}

// A memory-mapped checkpoint cut short under the reader used to kill the process with SIGBUS.
TEST_CASE("a file truncated after opening gives an error naming the file and tensor",
          "[safetensors][bad]") {
  TempDir tmp;
  const auto v = random_floats(4096, 4);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    INFO(name(t));
    SafetensorsWriter w;
    w.add("first", {64}, random_floats(64, 5), t);
    w.add("last", {4096}, v, t);
    const auto path = tmp / (std::string("cut_") + std::string(name(t)) + ".safetensors");
    w.write(path);
    const auto f = SafetensorsFile::open(path);
    const uint64_t full = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, full - 1000);
    CHECK(io::read_as_f32(f.at("first")).size() == 64);  // still whole
    REQUIRE_THROWS_WITH(io::read_as_f32(f.at("last")),
                        Contains(path.string()) && Contains("tensor 'last'") &&
                            Contains("ends at byte " + std::to_string(full - 1000)) &&
                            Contains("truncated"));
    REQUIRE_THROWS_WITH(io::read_bytes(f.at("last")), Contains("tensor 'last'"));
    std::filesystem::resize_file(path, 0);
    REQUIRE_THROWS_WITH(io::read_as_f32(f.at("first")), Contains("tensor 'first'"));
  }
}
