// The fits of the scaling analysis (IsoFLOP parabolas, power laws) as plain least squares.
#include <algorithm>
#include <cmath>
#include <map>

#include "nanochat/common.h"
#include "nanochat/scaling.h"

namespace nanochat {

// Least squares on x centred and scaled to t = (x - m) / s (the normal equations are then well
// conditioned), solved by Gaussian elimination, then expanded back into powers of x:
// q_k t^k = q_k / s^k * sum_j C(k, j) x^j (-m)^(k-j).
std::vector<double> scaling_polyfit(const std::vector<double>& x, const std::vector<double>& y, int degree) {
  const size_t n = x.size(), k = (size_t)degree + 1;
  if (degree < 0 || y.size() != n || n < k)
    fail("scaling fit: %zu points for a degree-%d polynomial (needs at least %zu)", n, degree, k);
  double m = 0, s = 0;
  for (double v : x) m += v / (double)n;
  for (double v : x) s = std::max(s, std::fabs(v - m));
  if (s == 0) s = 1;
  // A = [t^0 .. t^degree]; normal equations (A^T A) q = A^T y in an augmented k x (k+1) matrix
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < n; i++) {
    const double t = (x[i] - m) / s;
    std::vector<double> pow_t(2 * k, 1.0);
    for (size_t p = 1; p < 2 * k; p++) pow_t[p] = pow_t[p - 1] * t;
    for (size_t r = 0; r < k; r++) {
      for (size_t c = 0; c < k; c++) a[r][c] += pow_t[r + c];
      a[r][k] += pow_t[r] * y[i];
    }
  }
  for (size_t col = 0; col < k; col++) {
    size_t pivot = col;
    for (size_t r = col + 1; r < k; r++)
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    if (std::fabs(a[pivot][col]) < 1e-300)
      fail("scaling fit: the points do not determine a degree-%d polynomial", degree);
    std::swap(a[col], a[pivot]);
    for (size_t r = 0; r < k; r++) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c <= k; c++) a[r][c] -= f * a[col][c];
    }
  }
  std::vector<double> in_x(k, 0.0);  // coefficient of x^j, lowest power first
  for (size_t p = 0; p < k; p++) {
    const double q = a[p][k] / a[p][p] / std::pow(s, (double)p);
    double binom = 1;  // C(p, j)
    for (size_t j = 0; j <= p; j++) {
      in_x[j] += q * binom * std::pow(-m, (double)(p - j));
      binom = binom * (double)(p - j) / (double)(j + 1);
    }
  }
  return std::vector<double>(in_x.rbegin(), in_x.rend());
}

double ScalingLine::at(double x) const { return std::pow(10.0, intercept + slope * std::log10(x)); }

ScalingLine scaling_line_fit(const std::vector<double>& x, const std::vector<double>& y) {
  ScalingLine line;
  if (x.size() < 2) return line;
  std::vector<double> lx, ly;
  for (size_t i = 0; i < x.size(); i++) {
    lx.push_back(std::log10(x[i]));
    ly.push_back(std::log10(y[i]));
  }
  if (*std::max_element(lx.begin(), lx.end()) == *std::min_element(lx.begin(), lx.end())) return line;
  std::vector<double> p = scaling_polyfit(lx, ly, 1);
  line.slope = p[0];
  line.intercept = p[1];
  line.points = (int)x.size();
  return line;
}

namespace {

// numpy.interp: piecewise linear through (xs, ys), xs ascending, clamped to the end values
double interp(double x, const std::vector<double>& xs, const std::vector<double>& ys) {
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  size_t i = 1;
  while (xs[i] < x) i++;
  const double w = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[i - 1] + w * (ys[i] - ys[i - 1]);
}

bool by_budget_then_size(const ScalingRun& a, const ScalingRun& b) {
  return a.flops_budget != b.flops_budget ? a.flops_budget < b.flops_budget : a.params < b.params;
}

}  // namespace

ScalingOptimum scaling_isoflop_optimum(const std::vector<ScalingRun>& budget_runs) {
  std::vector<ScalingRun> runs = budget_runs;
  std::sort(runs.begin(), runs.end(), by_budget_then_size);
  ScalingOptimum o;
  o.runs = (int)runs.size();
  if (runs.empty()) return o;
  o.flops_budget = runs.front().flops_budget;
  std::vector<double> log_n, bpb, tokens, ratio;
  for (const ScalingRun& r : runs) {
    log_n.push_back(std::log10((double)r.params));
    bpb.push_back(r.val_bpb);
    tokens.push_back((double)r.tokens);
    ratio.push_back((double)r.tokens / (double)r.params);
  }
  const bool distinct_sizes = runs.front().params != runs.back().params;
  if (runs.size() >= 3 && distinct_sizes) {
    std::vector<double> p = scaling_polyfit(log_n, bpb, 2);
    o.a = p[0], o.b = p[1], o.c = p[2];
    if (o.a > 0) {  // opens upward: the vertex is the minimum
      const double x = -o.b / (2 * o.a);
      o.from_parabola = true;
      o.params = std::pow(10.0, x);
      o.val_bpb = o.a * x * x + o.b * x + o.c;
      o.tokens = interp(x, log_n, tokens);
      o.ratio = interp(x, log_n, ratio);
      return o;
    }
  }
  size_t best = 0;
  for (size_t i = 1; i < runs.size(); i++)
    if (bpb[i] < bpb[best]) best = i;
  o.params = (double)runs[best].params;
  o.tokens = tokens[best];
  o.ratio = ratio[best];
  o.val_bpb = bpb[best];
  return o;
}

ScalingLaws scaling_fit_laws(const std::vector<ScalingRun>& all_runs) {
  ScalingLaws laws;
  for (const ScalingRun& r : all_runs)
    if (r.finished && r.val_bpb > 0) laws.runs.push_back(r);
  std::sort(laws.runs.begin(), laws.runs.end(), by_budget_then_size);

  std::map<double, std::vector<ScalingRun>> by_budget;
  std::vector<ScalingRun> no_budget;
  for (const ScalingRun& r : laws.runs) {
    if (r.flops_budget > 0) by_budget[r.flops_budget].push_back(r);
    else no_budget.push_back(r);
  }
  for (const auto& [budget, runs] : by_budget) laws.optima.push_back(scaling_isoflop_optimum(runs));

  std::vector<double> c, n, d, bpb;
  for (const ScalingOptimum& o : laws.optima) {
    c.push_back(o.flops_budget);
    n.push_back(o.params);
    d.push_back(o.tokens);
    bpb.push_back(o.val_bpb);
  }
  laws.params_vs_flops = scaling_line_fit(c, n);
  laws.tokens_vs_flops = scaling_line_fit(c, d);
  if (laws.params_vs_flops.points > 0 && laws.tokens_vs_flops.points > 0) {
    laws.ratio_flops = std::sqrt(c.front() * c.back());  // budgets ascending
    laws.ratio = laws.tokens_vs_flops.at(laws.ratio_flops) / laws.params_vs_flops.at(laws.ratio_flops);
  }
  if (laws.optima.empty()) {  // a miniseries: the runs themselves
    for (const ScalingRun& r : no_budget) {
      c.push_back(r.flops);
      n.push_back((double)r.params);
      bpb.push_back(r.val_bpb);
    }
  }
  laws.loss_vs_flops = scaling_line_fit(c, bpb);
  laws.loss_vs_params = scaling_line_fit(n, bpb);
  return laws;
}

std::string scaling_runs_table(const std::vector<ScalingRun>& runs) {
  std::string t =
      "| run | depth | FLOP budget | params (N) | all params | tokens (D) | D/N | FLOPs | val bpb | CORE |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ScalingRun& r : runs)
    t += strprintf("| %s | %lld | %s | %s | %s | %s | %.2f | %.3e | %.6f | %s |\n", r.tag.c_str(), (long long)r.depth,
                   r.flops_budget > 0 ? strprintf("%.3g", r.flops_budget).c_str() : "-",
                   format_thousands(r.params).c_str(), format_thousands(r.params_total).c_str(),
                   format_thousands(r.tokens).c_str(), (double)r.tokens / (double)r.params, r.flops, r.val_bpb,
                   r.core >= 0 ? strprintf("%.4f", r.core).c_str() : "-");
  return t;
}

namespace {

std::string line_text(const ScalingLine& l, const char* y, const char* x) {
  if (l.points == 0) return strprintf("%s vs %s: not fitted (needs 2 distinct points)", y, x);
  return strprintf("%s = 10^%.4f x %s^%.4f (%d points)", y, l.intercept, x, l.slope, l.points);
}

nlohmann::json line_json(const ScalingLine& l) {
  if (l.points == 0) return nullptr;
  return {{"slope", l.slope}, {"intercept", l.intercept}, {"points", l.points}};
}

}  // namespace

std::string scaling_laws_table(const ScalingLaws& laws) {
  std::string t;
  if (!laws.optima.empty()) {
    t += "| FLOP budget | runs | fit | bpb = a x^2 + b x + c, x = log10 N | N* | D* | D*/N* | bpb at N* |\n"
         "|---|---|---|---|---|---|---|---|\n";
    for (const ScalingOptimum& o : laws.optima) {
      // a vertex beyond the budget's smallest or largest model is an extrapolation: say so
      double lo = INFINITY, hi = 0;
      for (const ScalingRun& r : laws.runs)
        if (r.flops_budget == o.flops_budget) lo = std::min(lo, (double)r.params), hi = std::max(hi, (double)r.params);
      const bool outside = o.from_parabola && (o.params < lo || o.params > hi);
      t += strprintf("| %.3g | %d | %s | %s | %s | %s | %.2f | %.6f |\n", o.flops_budget, o.runs,
                     o.from_parabola ? (outside ? "parabola (vertex outside the runs)" : "parabola") : "best run",
                     o.a != 0 ? strprintf("a %.5g, b %.5g, c %.5g", o.a, o.b, o.c).c_str() : "-",
                     format_thousands((int64_t)std::llround(o.params)).c_str(),
                     format_thousands((int64_t)std::llround(o.tokens)).c_str(), o.ratio, o.val_bpb);
    }
    t += "\n";
    t += "- " + line_text(laws.params_vs_flops, "N*", "C") + "\n";
    t += "- " + line_text(laws.tokens_vs_flops, "D*", "C") + "\n";
    if (laws.ratio > 0)
      t += strprintf("- optimal D/N at C = %.3g: %.2f tokens per parameter\n", laws.ratio_flops, laws.ratio);
  }
  const char* over = laws.optima.empty() ? "over the runs" : "over the optima";
  t += "- loss fit " + std::string(over) + ": " + line_text(laws.loss_vs_flops, "bpb", "C") + "\n";
  t += "- loss fit " + std::string(over) + ": " + line_text(laws.loss_vs_params, "bpb", "N") + "\n";
  return t;
}

nlohmann::json scaling_laws_json(const ScalingLaws& laws) {
  nlohmann::json runs = nlohmann::json::array(), optima = nlohmann::json::array();
  for (const ScalingRun& r : laws.runs)
    runs.push_back({{"tag", r.tag},
                    {"depth", r.depth},
                    {"flops_budget", r.flops_budget},
                    {"params", r.params},
                    {"params_total", r.params_total},
                    {"tokens", r.tokens},
                    {"flops", r.flops},
                    {"val_bpb", r.val_bpb},
                    {"core", r.core >= 0 ? nlohmann::json(r.core) : nlohmann::json()}});
  for (const ScalingOptimum& o : laws.optima)
    optima.push_back({{"flops_budget", o.flops_budget},
                      {"runs", o.runs},
                      {"from_parabola", o.from_parabola},
                      {"a", o.a},
                      {"b", o.b},
                      {"c", o.c},
                      {"params", o.params},
                      {"tokens", o.tokens},
                      {"ratio", o.ratio},
                      {"val_bpb", o.val_bpb}});
  return {{"runs", runs},
          {"optima", optima},
          {"params_vs_flops", line_json(laws.params_vs_flops)},
          {"tokens_vs_flops", line_json(laws.tokens_vs_flops)},
          {"ratio_flops", laws.ratio_flops},
          {"ratio", laws.ratio},
          {"loss_vs_flops", line_json(laws.loss_vs_flops)},
          {"loss_vs_params", line_json(laws.loss_vs_params)}};
}

}  // namespace nanochat
