// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a step costs the engine, learnt from its own steps: seconds = a + b * rows, a least-squares
// line through recent decode steps (older ones weigh less, by kDecay a step). a is what a step
// costs whatever it holds (launches, reading every weight once on a GPU, the batch's
// bookkeeping), b what each row adds (its share of the matmuls, attention, sampling).
// Speculation reads it: a proposed token is a row that pays off only when it is accepted.
//
//   rows:    1   2   4   8  16          one sequence's d proposals add b * d to the step and
//   seconds: |   |   |   |   |          are worth rate * d tokens; the time per token falls
//            a + b * rows               iff rate * (a + b * R) > b * T   (R rows, T tokens)
#include <algorithm>

namespace servekit::serve {

class StepCost {
 public:
  static constexpr double kDecay = 0.97;     // a step's weight after 23 more steps: half
  static constexpr int kMinSteps = 8;        // observed before a first line is drawn
  static constexpr double kMinSpread = 0.5;  // rows' weighted variance a line needs

  // A decode step of `rows` rows (every row a token that brings its logits) took `seconds`.
  void observe(int rows, double seconds) {
    const double x = rows;
    w_ = kDecay * w_ + 1, sx_ = kDecay * sx_ + x, sy_ = kDecay * sy_ + seconds;
    sxx_ = kDecay * sxx_ + x * x, sxy_ = kDecay * sxy_ + x * seconds;
    n_++;
    const double mx = sx_ / w_, my = sy_ / w_, var = sxx_ / w_ - mx * mx;
    // Only rows that varied say what a row costs; until they do, the last line stands (a
    // batch that stops speculating would otherwise forget the line that told it to stop).
    if (n_ < kMinSteps || var < kMinSpread) return;
    b_ = std::max(0.0, (sxy_ / w_ - mx * my) / var);  // noise can tilt a flat line below 0
    a_ = std::max(0.0, my - b_ * mx);
    fitted_ = true;
  }

  bool fitted() const { return fitted_; }
  double a() const { return a_; }
  double b() const { return b_; }
  double seconds(double rows) const { return a_ + b_ * rows; }

  // Whether proposals accepted at `rate` (tokens per proposed token) lower the time per token
  // of a step that already holds `rows` rows yielding `tokens` tokens. True while no line is
  // known: the engine learns what rows cost only from steps that vary them.
  bool drafting_pays(double rate, double rows, double tokens) const {
    return !fitted_ || rate * seconds(rows) > b_ * tokens;
  }

 private:
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed sums
  long n_ = 0;
  bool fitted_ = false;
  double a_ = 0, b_ = 0;
};

}  // namespace servekit::serve
