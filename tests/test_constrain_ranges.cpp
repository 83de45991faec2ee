// SPDX-License-Identifier: Apache-2.0
// Integer and number ranges (minimum, maximum, exclusive bounds, multipleOf): the matcher
// against an exact reference on random schemas and texts, and no text it starts is stranded.
#include <catch2/catch.hpp>

#include <cstdint>
#include <optional>
#include <random>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain_helpers.hpp"
#include "servekit/constrain/matcher.hpp"

using namespace servekit;
using namespace servekit::constrain;
using json = nlohmann::json;
using namespace constrain_test;

namespace {

// The reference works in millionths, which every value below is a whole number of: texts have
// at most 6 fraction digits, bounds 2 and steps 3.
constexpr int64_t kMicro = 1'000'000;

// A text's value in millionths if it is a plain JSON number the matcher may write for a
// bounded node: -?(0|[1-9][0-9]*)(.[0-9]+)?, no exponent; integers without a fraction.
std::optional<int64_t> micros(const std::string& t, bool integer) {
  std::size_t i = t[0] == '-';
  const std::size_t int_begin = i;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) i++;
  const std::size_t int_digits = i - int_begin;
  if (int_digits == 0 || (int_digits > 1 && t[int_begin] == '0')) return std::nullopt;
  int64_t v = std::stoll(t.substr(int_begin, int_digits)) * kMicro;
  if (i < t.size()) {
    if (integer || t[i] != '.' || i + 1 == t.size()) return std::nullopt;
    int64_t scale = kMicro;
    for (i++; i < t.size(); i++) {
      if (!std::isdigit(static_cast<unsigned char>(t[i]))) return std::nullopt;
      scale /= 10;
      v += (t[i] - '0') * scale;
    }
  }
  return t[0] == '-' ? -v : v;
}

struct Limits {
  std::optional<int64_t> lo, hi, xlo, xhi, step;  // millionths
  bool ok(int64_t v) const {
    return (!lo || v >= *lo) && (!hi || v <= *hi) && (!xlo || v > *xlo) && (!xhi || v < *xhi) &&
           (!step || v % *step == 0);
  }
};

std::string decimal(int64_t micros) {  // millionths as the shortest decimal text
  std::string s = std::to_string(std::llabs(micros) / kMicro);
  int64_t frac = std::llabs(micros) % kMicro;
  if (frac) {
    std::string f = std::to_string(frac);
    f = std::string(6 - f.size(), '0') + f;
    while (f.back() == '0') f.pop_back();
    s += "." + f;
  }
  return micros < 0 ? "-" + s : s;
}

}  // namespace

TEST_CASE("number and integer ranges: the matcher takes exactly the values in range") {
  std::mt19937 rng(7);
  auto one_of = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + rng() % xs.size());
  };
  int schemas = 0, empty = 0, accepted = 0;
  for (int round = 0; round < 400; round++) {
    const bool integer = rng() % 3 == 0;
    Limits lim;
    std::string text = integer ? R"({"type": "integer")" : R"({"type": "number")";
    auto bound = [&](const char* kw, std::optional<int64_t>& slot) {
      if (rng() % 3 != 0) return;
      slot = (static_cast<int64_t>(rng() % 4001) - 2000) * (kMicro / 100);  // 2 decimals
      text += std::string(", \"") + kw + "\": " + decimal(*slot);
    };
    bound("minimum", lim.lo);
    bound("maximum", lim.hi);
    bound("exclusiveMinimum", lim.xlo);
    bound("exclusiveMaximum", lim.xhi);
    if (rng() % 2 == 0) {
      lim.step = one_of({1000, 10'000, 50'000, 250'000, 500'000, kMicro, 2'500'000, 3 * kMicro,
                         7 * kMicro, 10 * kMicro, 40 * kMicro});
      text += ", \"multipleOf\": " + decimal(*lim.step);
    }
    if (!lim.lo && !lim.hi && !lim.xlo && !lim.xhi && !lim.step) {
      lim.lo = 0;
      text += ", \"minimum\": 0";
    }
    text += "}";
    INFO(text);
    std::shared_ptr<const Grammar> g;
    try {
      g = compile_json_schema(std::string_view(text));
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains("range is empty"));
      // Empty indeed: no multiple of the step (or integer) in range among the plain values.
      const int64_t unit = integer ? kMicro : (lim.step ? *lim.step : 1000);
      bool some = false;
      for (int64_t v = -4000 * kMicro / unit * unit; v <= 4000 * kMicro && !some; v += unit)
        some = lim.ok(v);
      CHECK_FALSE(some);
      empty++;
      continue;
    }
    schemas++;
    for (int k = 0; k < 150; k++) {
      // Around the bounds and steps: small magnitudes, up to 6 fraction digits.
      const int64_t whole = static_cast<int64_t>(rng() % 2100);
      std::string t = rng() % 3 == 0 ? "-" : "";
      t += std::to_string(rng() % 5 == 0 ? rng() % 30 : whole);
      if (rng() % 2 == 0) {
        t += ".";
        for (int d = 1 + rng() % 6; d > 0; d--) t += char('0' + rng() % 10);
        if (rng() % 4 == 0) t.back() = '0';
      }
      if (rng() % 20 == 0) t = one_of({0, 1}) ? t + "e1" : "0" + t;  // never for bounded ones
      const auto v = micros(t, integer);
      if (v && *v == 0 && t[0] == '-') continue;  // "-0": written only where negatives are
      const bool want = v && lim.ok(*v);
      INFO(t);
      CHECK(fits(*g, t) == want);
      accepted += want;
      if (v && lim.ok(*v)) CHECK(fits(*g, decimal(*v)));  // the shortest form too
    }
  }
  CHECK(schemas > 250);
  CHECK(empty > 0);
  CHECK(accepted > 5000);
}

TEST_CASE("a bounded number's every prefix can end in range, and min_finish says how soon") {
  // Random walks over the bytes a number is made of: whatever the walk writes, the state stays
  // completable; where no byte goes on, it accepts; and min_finish is exact on short horizons
  // (checked by breadth-first search over the same bytes, three deep).
  const char* schemas[] = {
      R"({"type": "number", "minimum": 1.5, "maximum": 2.25})",
      R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001})",
      R"({"type": "number", "minimum": -12.5, "maximum": -3, "multipleOf": 0.25})",
      R"({"type": "number", "minimum": 1000, "multipleOf": 7})",
      R"({"type": "number", "maximum": -99.99, "multipleOf": 0.03})",
      R"({"type": "integer", "minimum": 120, "maximum": 160, "multipleOf": 13})",
      R"({"type": "integer", "exclusiveMaximum": -1000, "multipleOf": 999})",
      R"({"type": "number", "minimum": 0.1, "maximum": 0.1})",
  };
  const std::string bytes = "-.0123456789";
  std::mt19937 rng(11);
  for (const char* text : schemas) {
    INFO(text);
    const auto g = compile_json_schema(std::string_view(text));
    const json schema = json::parse(text);
    Matcher m(*g);
    // Shortest completion by search: texts of length 0..3 appended (99: none).
    auto shortest = [&](const State& s) {
      std::vector<State> level(1);
      level[0].copy_from(s);
      for (int len = 0; len <= 3; len++) {
        std::vector<State> next;
        for (const State& x : level) {
          if (m.accepts(x)) return len;
          for (char c : bytes) {
            State y;
            m.feed(x, static_cast<uint8_t>(c), y);
            if (!y.dead()) next.push_back(std::move(y));
          }
        }
        level = std::move(next);
      }
      return 99;
    };
    for (int walk = 0; walk < 25; walk++) {
      State s, n;
      m.start(s);
      std::string written;
      for (;;) {
        const int mf = m.min_finish(s);
        const int bfs = shortest(s);
        INFO(written);
        REQUIRE(mf < kInf);
        if (bfs <= 3) CHECK(mf == bfs);
        if (bfs > 3) CHECK(mf > 3);
        std::vector<char> alive;
        for (char c : bytes) {
          m.feed(s, static_cast<uint8_t>(c), n);
          if (!n.dead()) alive.push_back(c);
        }
        if (alive.empty() || (m.accepts(s) && rng() % 4 == 0)) {
          CHECK(m.accepts(s));
          break;
        }
        const char c = alive[rng() % alive.size()];
        written += c;
        m.feed(s, static_cast<uint8_t>(c), n);
        std::swap(s, n);
      }
      const bool integer = schema["type"] == "integer";
      CHECK(std::regex_match(
          written, std::regex(integer ? "-?(0|[1-9][0-9]*)" : "-?(0|[1-9][0-9]*)(\\.[0-9]+)?")));
    }
  }
}

TEST_CASE("range keywords the matcher cannot honour are errors naming them") {
  CHECK_THAT(error_of(R"({"type": "number", "multipleOf": 0})"), Catch::Contains("'multipleOf' 0"));
  CHECK_THAT(error_of(R"({"type": "number", "multipleOf": -2})"),
             Catch::Contains("'multipleOf' -2"));
  CHECK_THAT(error_of(R"({"type": "number", "multipleOf": 1e-30})"),
             Catch::Contains("at most 18 fraction digits"));
  CHECK_THAT(error_of(R"({"type": "number", "minimum": 1e300})"),
             Catch::Contains("range is empty"));
  CHECK_THAT(error_of(R"({"type": "integer", "minimum": 0.5, "maximum": 0.9})"),
             Catch::Contains("range is empty"));
  CHECK_THAT(error_of(R"({"type": "integer", "minimum": 1, "maximum": 6, "multipleOf": 7})"),
             Catch::Contains("range is empty"));
  CHECK_THAT(error_of(R"({"type": "number", "maximum": "3"})"),
             Catch::Contains("'maximum' must be a number"));
  CHECK_THAT(error_of(R"({"type": "string", "multipleOf": 3})"),
             Catch::Contains("'multipleOf' is not supported on type 'string'"));
  // Exact decimals, not doubles: 0.3 is a multiple of 0.1, 0.30000000000000004 is not.
  const auto tenth =
      compile_json_schema(std::string_view(R"({"type": "number", "multipleOf": 0.1})"));
  CHECK(fits(*tenth, "0.3"));
  CHECK(fits(*tenth, "-1234.5"));
  CHECK_FALSE(fits(*tenth, "0.35"));
  CHECK_FALSE(fits(*tenth, "3e1"));  // a bounded number has no exponent
  // An integer multiple of 2.5 is a multiple of 5; beyond 2^53 the bound is still exact.
  const auto five =
      compile_json_schema(std::string_view(R"({"type": "integer", "multipleOf": 2.5})"));
  CHECK(fits(*five, "15"));
  CHECK_FALSE(fits(*five, "12"));
  const auto big =
      compile_json_schema(std::string_view(R"({"type": "integer", "minimum": 9007199254740993})"));
  CHECK(fits(*big, "9007199254740993"));
  CHECK_FALSE(fits(*big, "9007199254740992"));
}

TEST_CASE("number_feasible agrees with num_more_bytes on random ranges and prefixes") {
  // number_feasible tries the finest grid alone; num_more_bytes tries every fraction length.
  using range::i128;
  std::mt19937_64 rng(23);
  auto pow10 = [](int e) {
    i128 p = 1;
    while (e-- > 0) p *= 10;
    return p;
  };
  auto digits_of = [&](int n) {  // n digits, the first not 0
    i128 v = 1 + rng() % 9;
    for (int i = 1; i < n; i++) v = v * 10 + rng() % 10;
    return v;
  };
  long feasible = 0, checked = 0;
  for (int round = 0; round < 4000; round++) {
    DecimalRange r;
    const int scale = static_cast<int>(rng() % 20);  // bounds near 10^(scale - 9)
    auto value = [&] {
      const i128 v = static_cast<i128>(rng() % 2000) * pow10(scale);
      return rng() % 2 ? v : -v;
    };
    if (rng() % 3) r.lo = value();
    if (rng() % 3) r.hi = value();
    if (rng() % 2) r.step = static_cast<i128>(1 + rng() % 30) * pow10(static_cast<int>(rng() % 21));
    for (int t = 0; t < 16; t++) {
      Frame f{0, phase::N_MINUS, static_cast<uint8_t>(rng() % 2), 0, 0, 0, 0, 0};
      const int kind = static_cast<int>(rng() % 4), ints = 1 + static_cast<int>(rng() % 15);
      if (kind == 1) {
        f.phase = phase::N_ZERO, f.count = 1;
      } else if (kind == 2) {
        f.phase = phase::N_INT, f.count = ints, f.bits = static_cast<uint64_t>(digits_of(ints));
      } else if (kind == 3) {
        const int d = static_cast<int>(rng() % (range::frac_max(ints) + 1));
        const i128 whole = rng() % 2 ? 0 : digits_of(ints);
        f.phase = d == 0 ? phase::N_DOT : phase::N_FRAC;
        f.b = static_cast<uint8_t>(whole == 0 ? 1 : ints);
        f.count = d;
        f.bits = static_cast<uint64_t>(whole * pow10(d) + static_cast<i128>(rng() % pow10(d)));
      }
      INFO("round " << round << " phase " << int(f.phase) << " count " << f.count << " bits "
                    << f.bits);
      const bool slow = range::num_more_bytes(r, f) < kInf;
      CHECK(range::number_feasible(r, f) == slow);
      feasible += slow, checked++;
    }
  }
  // Both answers occur often enough for the agreement to mean something.
  CHECK(feasible > checked / 10);
  CHECK(feasible < checked * 9 / 10);
}
