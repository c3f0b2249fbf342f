// Scaling laws from finished base-train runs (runs/scaling_laws.sh, runs/miniseries.sh), the
// analysis of upstream's dev/scaling_analysis.ipynb done by the binary:
// - the runs: effective parameters N = transformer matrices + lm_head (the count base-train's
//   horizon and the upstream analysis use), tokens D = total batch x steps, FLOPs C = the
//   model's FLOPs per token x D, and the final val bpb, read from each run's checkpoint dir;
// - per FLOP budget (--target-flops), the IsoFLOP parabola bpb = a (log10 N)^2 + b log10 N + c;
//   its vertex is the compute-optimal N*, with D* and D*/N* interpolated in log10 N between
//   the runs (as the notebook: not C = 6ND); a parabola that opens downward, or fewer than
//   three runs, falls back to the best run;
// - across budgets, straight lines in log-log space: N* = 10^k C^a, D* = 10^k C^b, and the
//   ratio D*/N* they predict at the geometric mean of the budgets;
// - the loss fit, bpb = 10^k C^alpha: over the budgets' optima, or over the runs when none
//   has a budget (a miniseries at one tokens:params ratio).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat {

struct ScalingRun {
  std::string dir, tag;  // the checkpoint dir and its last path component
  int64_t depth = 0;
  int64_t params = 0;         // effective N: transformer matrices + lm_head
  int64_t params_total = 0;   // every parameter (embeddings and scalars too)
  int64_t step = 0;           // the last saved step
  int64_t planned_steps = 0;  // the horizon base-train computed from its flags
  int64_t tokens = 0;         // total batch x step
  double flops = 0;           // FLOPs per token x tokens
  double flops_budget = 0;    // --target-flops, 0 when the horizon came from elsewhere
  double val_bpb = -1;        // the val bpb logged at the last step, -1 when none was
  double core = -1;           // the CORE metric logged at the last step, -1 when none was
  bool finished = false;      // the last checkpoint is the planned horizon and has its val bpb
};
// reads <dir>/meta_<last complete step>.json and <dir>/metrics.jsonl; Error naming the file
// when the dir has no complete checkpoint or a file is malformed
ScalingRun scaling_run_load(const std::string& dir);

// least-squares polynomial through (x, y), highest power first (numpy.polyfit's order); Error
// when there are fewer points than coefficients
std::vector<double> scaling_polyfit(const std::vector<double>& x, const std::vector<double>& y, int degree);

// log10(y) = slope * log10(x) + intercept: y = 10^intercept x^slope
struct ScalingLine {
  double slope = 0, intercept = 0;
  int points = 0;             // 0: not fitted (fewer than 2 points)
  double at(double x) const;  // 10^intercept x^slope
};
ScalingLine scaling_line_fit(const std::vector<double>& x, const std::vector<double>& y);

struct ScalingOptimum {
  double flops_budget = 0;
  double a = 0, b = 0, c = 0;  // the parabola in log10 N (zeros when not fitted)
  bool from_parabola = false;  // false: the best run stands in
  double params = 0, tokens = 0, ratio = 0, val_bpb = 0;
  int runs = 0;
};
// one budget's runs (all with that flops_budget and a val bpb)
ScalingOptimum scaling_isoflop_optimum(const std::vector<ScalingRun>& runs);

struct ScalingLaws {
  std::vector<ScalingRun> runs;                  // finished runs with a val bpb, by budget then size
  std::vector<ScalingOptimum> optima;            // one per budget, budgets ascending
  ScalingLine params_vs_flops, tokens_vs_flops;  // N* and D* against C over the optima
  double ratio_flops = 0, ratio = 0;             // D*/N* predicted at the budgets' geometric mean
  ScalingLine loss_vs_flops;                     // bpb against C: optima, or runs when no budgets
  ScalingLine loss_vs_params;                    // bpb against N over the same points
};
// the runs that are not finished or have no val bpb are left out (the caller says so)
ScalingLaws scaling_fit_laws(const std::vector<ScalingRun>& runs);

// markdown tables for the report and the terminal
std::string scaling_runs_table(const std::vector<ScalingRun>& runs);
std::string scaling_laws_table(const ScalingLaws& laws);
// every run and fitted number, for scripts and tests
nlohmann::json scaling_laws_json(const ScalingLaws& laws);
// the fits drawn as SVG charts (svg_chart: the runs as points, the fits as curves) into
// dir/<prefix>-*.svg: the IsoFLOP parabolas with their vertices, N* and D* against compute
// (with budgets), the loss against compute and against N; returns the markdown image links
std::string scaling_write_charts(const ScalingLaws& laws, const std::string& dir, const std::string& prefix);

}  // namespace nanochat
