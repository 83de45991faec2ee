// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Prometheus text format (version 0.0.4): counters, gauges and histograms written by hand,
// as the format is a few lines per family. Families use vLLM's metric names under the
// servekit: prefix, so dashboards made for one read the other with a prefix swap.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace servekit::serve::http {

inline std::string prom_number(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// A label value escaped as the format says (backslash, quote, newline).
inline std::string prom_label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"')
      o += '\\', o += c;
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

inline void prom_family(std::string& out, const std::string& name, const char* type,
                        const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

inline void prom_sample(std::string& out, const std::string& name, double v,
                        const std::string& labels = "") {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + prom_number(v) + "\n";
}

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : le_(std::move(bounds)), n_(le_.size() + 1) {}
  void observe(double v) {
    std::size_t i = 0;
    while (i < le_.size() && v > le_[i]) i++;
    n_[i]++;
    sum_ += v;
    count_++;
  }
  uint64_t count() const { return count_; }
  void render(std::string& out, const std::string& name, const char* help) const {
    prom_family(out, name, "histogram", help);
    uint64_t acc = 0;
    for (std::size_t i = 0; i < le_.size(); i++) {
      acc += n_[i];
      prom_sample(out, name + "_bucket", static_cast<double>(acc),
                  "le=\"" + prom_number(le_[i]) + "\"");
    }
    prom_sample(out, name + "_bucket", static_cast<double>(count_), "le=\"+Inf\"");
    prom_sample(out, name + "_sum", sum_);
    prom_sample(out, name + "_count", static_cast<double>(count_));
  }

 private:
  std::vector<double> le_;
  std::vector<uint64_t> n_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// A counter family with one label: name{label="value"}.
class LabeledCounter {
 public:
  explicit LabeledCounter(std::string label) : label_(std::move(label)) {}
  void add(const std::string& value, double d = 1) { v_[value] += d; }
  void render(std::string& out, const std::string& name, const char* help) const {
    prom_family(out, name, "counter", help);
    for (const auto& [k, v] : v_) prom_sample(out, name, v, label_ + "=\"" + prom_label(k) + "\"");
  }

 private:
  std::string label_;
  std::map<std::string, double> v_;
};

}  // namespace servekit::serve::http
