// scaling-fit: the least squares against numpy.polyfit, the IsoFLOP vertices, power laws and loss
// fits on synthetic points built so the answers are known by hand (points exactly on a parabola
// per budget, optima exactly on power laws), everything else against the notebook's algorithm
// restated with NumPy (fixtures/scaling_fit_reference.py); then the binary on synthetic
// checkpoint dirs: finished and unfinished runs, --finished, the report section, the CSV, the
// charts (their points and fitted curves counted in the SVG).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint.h"
#include "nanochat/common/files.h"
#include "nanochat/gpt.h"
#include "nanochat/scaling.h"
#include "test_util.h"

using namespace nanochat;
using nlohmann::json;

namespace {

const std::string kPython = NANOCHAT_PYTHON;
const std::string kFixtures = NANOCHAT_FIXTURES;
const std::string kBin = NANOCHAT_BIN;

json run_python(const std::string& code_or_script, const json& input, bool script) {
  std::string dir = temp_dir();
  std::ofstream(dir + "/in.json") << input.dump();
  CommandResult r = script ? run_shell(kPython + " " + code_or_script + " " + dir + "/in.json")
                           : run_shell(kPython + " -c '" + code_or_script + "' " + dir + "/in.json");
  EXPECT_EQ(r.rc, 0) << r.err;
  return json::parse(r.out);
}

json numpy_reference(const std::vector<ScalingRun>& runs) {
  json in = {{"runs", json::array()}};
  for (const ScalingRun& r : runs)
    in["runs"].push_back({{"flops_budget", r.flops_budget},
                          {"params", r.params},
                          {"tokens", r.tokens},
                          {"flops", r.flops},
                          {"val_bpb", r.val_bpb}});
  return run_python(kFixtures + "/scaling_fit_reference.py", in, true);
}

void expect_rel(double got, double want, double tol, const std::string& what) {
  EXPECT_NEAR(got, want, tol * std::max(1.0, std::fabs(want))) << what;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

ScalingRun point(double budget, int64_t params, int64_t tokens, double bpb) {
  ScalingRun r;
  r.tag = "r" + std::to_string(params);
  r.flops_budget = budget;
  r.params = params;
  r.params_total = params;
  r.tokens = tokens;
  r.flops = budget > 0 ? budget : 6.0 * (double)params * (double)tokens;
  r.val_bpb = bpb;
  r.finished = true;
  return r;
}

// three budgets; the runs of budget C lie exactly on bpb = 2 (log10 N - x*)^2 + L*, with the
// vertex x* = 0.5 log10 C - 1 and the loss at it L* = 10^1.2 C^-0.05
std::vector<ScalingRun> isoflop_points() {
  std::vector<ScalingRun> runs;
  for (double c : {1e18, 1e19, 1e20}) {
    const double x_star = 0.5 * std::log10(c) - 1, loss_star = std::pow(10.0, 1.2 - 0.05 * std::log10(c));
    for (double dx : {-0.6, -0.3, 0.1, 0.4}) {
      const int64_t n = std::llround(std::pow(10.0, x_star + dx));
      const double x = std::log10((double)n);
      runs.push_back(point(c, n, std::llround(c / (6.0 * (double)n)), 2 * (x - x_star) * (x - x_star) + loss_star));
    }
  }
  return runs;
}

}  // namespace

TEST(ScalingFit, PolyfitMatchesNumpy) {
  const std::vector<double> x = {7.1, 7.45, 7.9, 8.3, 8.35, 9.0}, y = {1.31, 1.12, 1.05, 1.07, 1.02, 1.25};
  json ref = run_python(
      "import json,sys,numpy as np; d=json.load(open(sys.argv[1]));"
      " print(json.dumps([list(np.polyfit(d[\"x\"], d[\"y\"], k)) for k in (1, 2, 3)]))",
      {{"x", x}, {"y", y}}, false);
  for (int degree = 1; degree <= 3; degree++) {
    std::vector<double> p = scaling_polyfit(x, y, degree);
    ASSERT_EQ(p.size(), (size_t)degree + 1);
    for (int k = 0; k <= degree; k++)
      expect_rel(p[k], ref[degree - 1][k].get<double>(), 1e-8,
                 "degree " + std::to_string(degree) + " coefficient " + std::to_string(k));
  }
  // a line through two points, by hand: y = 3x - 2
  std::vector<double> line = scaling_polyfit({1, 2}, {1, 4}, 1);
  EXPECT_NEAR(line[0], 3, 1e-12);
  EXPECT_NEAR(line[1], -2, 1e-12);
  EXPECT_THROW(scaling_polyfit({1, 2}, {1, 4}, 2), std::exception);  // too few points
}

TEST(ScalingFit, IsoflopVerticesAndPowerLawsByHandAndAgainstNumpy) {
  std::vector<ScalingRun> runs = isoflop_points();
  ScalingLaws laws = scaling_fit_laws(runs);
  ASSERT_EQ(laws.optima.size(), 3u);
  ASSERT_EQ(laws.runs.size(), 12u);
  // by hand: the vertices, the losses there, and the straight lines through them
  for (const ScalingOptimum& o : laws.optima) {
    const double x_star = 0.5 * std::log10(o.flops_budget) - 1;
    EXPECT_TRUE(o.from_parabola);
    EXPECT_EQ(o.runs, 4);
    EXPECT_NEAR(o.a, 2.0, 1e-8);
    expect_rel(o.params, std::pow(10.0, x_star), 1e-8, "N*");
    expect_rel(o.val_bpb, std::pow(10.0, 1.2 - 0.05 * std::log10(o.flops_budget)), 1e-9, "bpb*");
  }
  EXPECT_NEAR(laws.params_vs_flops.slope, 0.5, 1e-9);
  EXPECT_NEAR(laws.params_vs_flops.intercept, -1.0, 1e-8);
  EXPECT_EQ(laws.params_vs_flops.points, 3);
  EXPECT_NEAR(laws.loss_vs_flops.slope, -0.05, 1e-9);
  EXPECT_NEAR(laws.loss_vs_flops.intercept, 1.2, 1e-8);
  EXPECT_NEAR(laws.ratio_flops, 1e19, 1e19 * 1e-12);  // the geometric mean of 1e18 and 1e20
  // everything against the notebook's algorithm in NumPy
  json ref = numpy_reference(runs);
  for (size_t i = 0; i < laws.optima.size(); i++) {
    const ScalingOptimum& o = laws.optima[i];
    const json& r = ref["optima"][i];
    const std::string what = "budget " + std::to_string(o.flops_budget) + " ";
    EXPECT_EQ(o.from_parabola, r["from_parabola"].get<bool>()) << what;
    expect_rel(o.a, r["a"], 1e-7, what + "a");
    expect_rel(o.b, r["b"], 1e-7, what + "b");
    expect_rel(o.c, r["c"], 1e-7, what + "c");
    expect_rel(o.params, r["params"], 1e-8, what + "N*");
    expect_rel(o.tokens, r["tokens"], 1e-8, what + "D*");
    expect_rel(o.ratio, r["ratio"], 1e-8, what + "D*/N*");
    expect_rel(o.val_bpb, r["val_bpb"], 1e-9, what + "bpb*");
  }
  expect_rel(laws.tokens_vs_flops.slope, ref["tokens_vs_flops"]["slope"], 1e-8, "D* slope");
  expect_rel(laws.tokens_vs_flops.intercept, ref["tokens_vs_flops"]["intercept"], 1e-8, "D* intercept");
  expect_rel(laws.ratio, ref["ratio"], 1e-8, "optimal ratio");
  expect_rel(laws.loss_vs_params.slope, ref["loss_vs_params"]["slope"], 1e-8, "loss vs N slope");
  expect_rel(laws.loss_vs_params.intercept, ref["loss_vs_params"]["intercept"], 1e-8, "loss vs N intercept");
  // the tables name every budget and the fitted exponents
  const std::string table = scaling_laws_table(laws);
  EXPECT_NE(table.find("| 1e+19 | 4 | parabola |"), std::string::npos) << table;  // the vertex lies among the runs
  EXPECT_NE(table.find("N* = 10^-1.0000 x C^0.5000 (3 points)"), std::string::npos) << table;
  EXPECT_NE(table.find("bpb = 10^1.2000 x C^-0.0500"), std::string::npos) << table;
}

TEST(ScalingFit, IsoflopFallsBackToTheBestRun) {
  // opens downward: the lowest bpb among the runs stands in (here the smallest model)
  std::vector<ScalingRun> down = {point(1e18, 1000, 10, 1.0), point(1e18, 10000, 20, 3.0),
                                  point(1e18, 100000, 30, 2.0)};
  ScalingOptimum o = scaling_isoflop_optimum(down);
  EXPECT_FALSE(o.from_parabola);
  EXPECT_LT(o.a, 0);
  EXPECT_EQ(o.params, 1000);
  EXPECT_EQ(o.tokens, 10);
  EXPECT_EQ(o.val_bpb, 1.0);
  // two runs: no parabola at all
  ScalingOptimum two = scaling_isoflop_optimum({point(1e18, 1000, 10, 2.0), point(1e18, 5000, 40, 1.5)});
  EXPECT_FALSE(two.from_parabola);
  EXPECT_EQ(two.a, 0);
  EXPECT_EQ(two.params, 5000);
  EXPECT_DOUBLE_EQ(two.ratio, 40.0 / 5000.0);
  // upward, but the vertex (N = 10^2) below the smallest run: kept, and called an extrapolation
  std::vector<ScalingRun> beyond;
  for (int64_t n : {1000, 10000, 100000}) {
    const double x = std::log10((double)n);
    beyond.push_back(point(1e18, n, 10, (x - 2) * (x - 2) + 1));
  }
  ScalingLaws laws = scaling_fit_laws(beyond);
  ASSERT_EQ(laws.optima.size(), 1u);
  EXPECT_TRUE(laws.optima[0].from_parabola);
  EXPECT_NEAR(laws.optima[0].params, 100, 1e-6);
  EXPECT_EQ(laws.optima[0].tokens, 10);  // interpolation clamps to the end run, as numpy.interp
  EXPECT_NE(scaling_laws_table(laws).find("| 1e+18 | 3 | parabola (vertex outside the runs) |"), std::string::npos)
      << scaling_laws_table(laws);
  json ref = numpy_reference(down);
  EXPECT_FALSE(ref["optima"][0]["from_parabola"].get<bool>());
  EXPECT_EQ(ref["optima"][0]["params"].get<double>(), 1000);
}

TEST(ScalingFit, MiniseriesLossFitByHand) {
  // a miniseries at 20 tokens per parameter, bpb = 10^0.3 C^-0.05 exactly; since C = 6 N (20 N)
  // = 120 N^2, bpb = 10^(0.3 - 0.05 log10 120) N^-0.1
  std::vector<ScalingRun> runs;
  for (int64_t n : {1000000, 3000000, 10000000, 40000000}) {
    ScalingRun r = point(0, n, 20 * n, 0);
    r.val_bpb = std::pow(10.0, 0.3) * std::pow(r.flops, -0.05);
    runs.push_back(r);
  }
  ScalingRun unfinished = runs[0];
  unfinished.finished = false;
  unfinished.val_bpb = 9;  // would spoil the line if it were used
  runs.push_back(unfinished);
  ScalingLaws laws = scaling_fit_laws(runs);
  EXPECT_TRUE(laws.optima.empty());
  EXPECT_EQ(laws.runs.size(), 4u);
  EXPECT_EQ(laws.params_vs_flops.points, 0);
  EXPECT_NEAR(laws.loss_vs_flops.slope, -0.05, 1e-10);
  EXPECT_NEAR(laws.loss_vs_flops.intercept, 0.3, 1e-9);
  EXPECT_NEAR(laws.loss_vs_params.slope, -0.1, 1e-10);
  EXPECT_NEAR(laws.loss_vs_params.intercept, 0.3 - 0.05 * std::log10(120.0), 1e-9);
  EXPECT_NEAR(laws.loss_vs_flops.at(1e15), std::pow(10.0, 0.3 - 0.05 * 15), 1e-12);
  const std::string table = scaling_laws_table(laws);
  EXPECT_NE(table.find("loss fit over the runs: bpb = 10^0.3000 x C^-0.0500 (4 points)"), std::string::npos) << table;
  // the miniseries' charts: the 4 runs and the fitted line, against C and against N; no IsoFLOP
  const std::string dir = temp_dir();
  const std::string md = scaling_write_charts(laws, dir, "miniseries");
  EXPECT_EQ(md,
            "![Val bpb against compute](miniseries-loss-vs-flops.svg)\n\n"
            "![Val bpb against parameters](miniseries-loss-vs-params.svg)\n\n");
  for (const char* name : {"/miniseries-loss-vs-flops.svg", "/miniseries-loss-vs-params.svg"}) {
    const std::string svg = read_file(dir + name);
    EXPECT_NE(svg.find("data-name=\"runs\" data-kind=\"points\" data-n=\"4\""), std::string::npos) << svg;
    EXPECT_EQ(count(svg, "data-kind=\"fit\""), 1) << name;
  }
  EXPECT_FALSE(path_exists(dir + "/miniseries-isoflop.svg"));
}

// The binary on checkpoint dirs as base-train leaves them (meta, done marker, metrics.jsonl):
// two budgets x three depths, one run stopped early and one never started
TEST(ScalingFit, BinaryFitsFinishedRunDirs) {
  const std::string base = temp_dir();
  const std::string nc = "NANOCHAT_BASE_DIR=" + base + " " + kBin;
  const int64_t batch = 2048;
  std::vector<ScalingRun> expected;
  std::vector<std::string> tags;
  auto write_run = [&](const std::string& tag, int64_t depth, double budget, double bpb, bool stop_early) {
    const GPTConfig config = gpt_config_from_depth(depth, 512, 128, "L", 32, 32);
    const ScalingParams counts = gpt_num_scaling_params(config);
    const double fpt = (double)gpt_estimate_flops(config);
    const int64_t planned = (int64_t)std::nearbyint(budget / (fpt * (double)batch));
    const int64_t step = stop_early ? planned / 2 : planned;
    const std::string dir = base + "/base_checkpoints/" + tag;
    make_dirs(dir);
    json meta = {
        {"step", step},
        {"val_bpb", bpb},
        {"model_config", gpt_config_to_json(config)},
        {"user_config",
         {{"depth", depth}, {"target_flops", budget}, {"target_param_data_ratio", -1.0}, {"num_iterations", -1}}},
        {"total_batch_size", batch}};
    std::ofstream(checkpoint_meta_path(dir, step)) << meta.dump(2);
    std::ofstream(checkpoint_model_path(dir, step)) << "weights";
    json done = {{"step", step},
                 {"files",
                  {checkpoint_model_path(dir, step).substr(dir.size() + 1),
                   checkpoint_meta_path(dir, step).substr(dir.size() + 1)}}};
    std::ofstream(checkpoint_done_path(dir, step)) << done.dump();
    std::ofstream metrics(dir + "/metrics.jsonl");
    metrics << json({{"step", 0}, {"val_bpb", 3.5}}).dump() << "\n";
    metrics << json({{"step", step}, {"loss", 2.0}}).dump() << "\n";
    if (!stop_early) metrics << json({{"step", step}, {"val_bpb", bpb}, {"total_training_flops", 1.0}}).dump() << "\n";
    tags.push_back(tag);
    if (!stop_early) {
      ScalingRun r = point(budget, counts.transformer_matrices + counts.lm_head, batch * step, bpb);
      r.flops = budget;
      expected.push_back(r);
    }
  };
  const double bpbs[2][3] = {{1.9, 1.7, 1.8}, {1.6, 1.45, 1.5}};
  for (int b = 0; b < 2; b++)
    for (int d = 0; d < 3; d++) {
      const double budget = b == 0 ? 3e12 : 1e13;
      write_run("scaling_" + std::to_string(b) + "_d" + std::to_string(d + 2), d + 2, budget, bpbs[b][d], false);
    }
  write_run("scaling_0_d6", 6, 3e12, 1.2, true);

  CommandResult finished = run_shell(nc + " scaling-fit --finished scaling_0_d2 scaling_1_d4");
  EXPECT_EQ(finished.rc, 0) << finished.out << finished.err;
  CommandResult not_finished = run_shell(nc + " scaling-fit --finished scaling_0_d2 scaling_0_d6 " + base + "/nothing");
  EXPECT_EQ(not_finished.rc, 1) << not_finished.out << not_finished.err;
  EXPECT_NE(not_finished.out.find("scaling_0_d6: not finished"), std::string::npos) << not_finished.out;
  EXPECT_NE(not_finished.out.find("nothing: not finished"), std::string::npos) << not_finished.out;

  std::string args;
  for (const std::string& t : tags) args += " " + t;
  CommandResult fit = run_shell(nc + " scaling-fit --report scaling-laws --csv " + base + "/results.csv" + args);
  ASSERT_EQ(fit.rc, 0) << fit.out << fit.err;
  EXPECT_NE(fit.err.find("scaling_0_d6: left out, not finished"), std::string::npos) << fit.err;
  const std::string last_line = fit.out.substr(fit.out.rfind('\n', fit.out.size() - 2) + 1);
  json got = json::parse(last_line);
  ASSERT_EQ(got["runs"].size(), 6u);
  for (size_t i = 0; i < 6; i++) {
    EXPECT_EQ(got["runs"][i]["params"].get<int64_t>(), expected[i].params) << i;
    EXPECT_EQ(got["runs"][i]["tokens"].get<int64_t>(), expected[i].tokens) << i;
    EXPECT_EQ(got["runs"][i]["val_bpb"].get<double>(), expected[i].val_bpb) << i;
  }
  json ref = numpy_reference(expected);
  ASSERT_EQ(got["optima"].size(), 2u);
  for (size_t i = 0; i < 2; i++)
    for (const char* key : {"a", "b", "c", "params", "tokens", "ratio", "val_bpb"})
      expect_rel(got["optima"][i][key].get<double>(), ref["optima"][i][key].get<double>(), 1e-7,
                 "optimum " + std::to_string(i) + " " + key);
  for (const char* fit_name : {"params_vs_flops", "tokens_vs_flops", "loss_vs_flops", "loss_vs_params"})
    for (const char* key : {"slope", "intercept"})
      expect_rel(got[fit_name][key].get<double>(), ref[fit_name][key].get<double>(), 1e-7,
                 std::string(fit_name) + " " + key);
  expect_rel(got["ratio"].get<double>(), ref["ratio"].get<double>(), 1e-7, "ratio");

  const std::string section = read_file(base + "/report/scaling-laws.md");
  EXPECT_NE(section.find("## Scaling laws"), std::string::npos) << section;
  EXPECT_NE(section.find("| scaling_1_d3 | 3 | 1e+13 |"), std::string::npos) << section;
  EXPECT_NE(section.find("N* = 10^"), std::string::npos) << section;
  EXPECT_EQ(count_lines(read_file(base + "/results.csv")), 7);  // header + 6 runs
  // the charts: each budget's 3 runs as points with its parabola, the optima; N* and D*
  const std::string iso = read_file(base + "/report/scaling-laws-isoflop.svg");
  EXPECT_NE(section.find("![IsoFLOP curves: val bpb against parameters](scaling-laws-isoflop.svg)"), std::string::npos);
  EXPECT_NE(iso.find("data-name=\"C = 3e+12\" data-kind=\"points\" data-n=\"3\""), std::string::npos) << iso;
  EXPECT_NE(iso.find("data-name=\"C = 1e+13\" data-kind=\"points\" data-n=\"3\""), std::string::npos) << iso;
  EXPECT_EQ(count(iso, "data-kind=\"fit\""), 2);
  EXPECT_NE(iso.find("data-name=\"optimum of each budget\" data-kind=\"points\" data-n=\"2\""), std::string::npos);
  const std::string opt = read_file(base + "/report/scaling-laws-optimal-n-d.svg");
  EXPECT_NE(opt.find("data-name=\"N*\" data-kind=\"points\" data-n=\"2\""), std::string::npos) << opt;
  EXPECT_NE(opt.find("data-name=\"D*\" data-kind=\"points\" data-n=\"2\""), std::string::npos) << opt;
  EXPECT_EQ(count(opt, "data-kind=\"fit\""), 2);
  EXPECT_TRUE(path_exists(base + "/report/scaling-laws-loss-vs-flops.svg"));

  CommandResult none = run_shell(nc + " scaling-fit scaling_0_d6");
  EXPECT_EQ(none.rc, 1);
  EXPECT_NE(none.err.find("none of the 1 runs is finished"), std::string::npos) << none.err;
  CommandResult missing = run_shell(nc + " scaling-fit " + base + "/nothing");
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("no checkpoint directory"), std::string::npos) << missing.err;
}

namespace {

// the runs of a fit's JSON line as scaling_fit_reference.py takes them
std::vector<ScalingRun> runs_of(const json& fit) {
  std::vector<ScalingRun> runs;
  for (const json& r : fit["runs"]) {
    ScalingRun s = point(r["flops_budget"].get<double>(), r["params"].get<int64_t>(), r["tokens"].get<int64_t>(),
                         r["val_bpb"].get<double>());
    s.flops = r["flops"].get<double>();
    runs.push_back(s);
  }
  return runs;
}

json last_json_line(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  return json::parse(text.substr(text.rfind('\n', end) + 1, end + 1 - (text.rfind('\n', end) + 1)));
}

}  // namespace

// Both scripts' toy setting end to end (smaller still: ratio 0.5, budgets 2e10 and 4e10; about a
// minute on 2 cores): real base-train runs on the offline local corpus, then their fits, which
// must equal NumPy's on the runs' own numbers; a rerun skips every finished run
TEST(ScalingScripts, ToyMiniseriesAndScalingLawsEndToEnd) {
  const std::string base = temp_dir();
  const std::string env = "NANOCHAT_BASE_DIR=" + base + " NANOCHAT_BIN=" + kBin + " TOY=1 SKIP_SETUP=1 ";
  const std::string runs = std::string(NANOCHAT_SOURCE_DIR) + "/runs/";
  CommandResult mini = run_shell(env + "RATIO=0.5 bash " + runs + "miniseries.sh ci");
  ASSERT_EQ(mini.rc, 0) << mini.out << mini.err;
  CommandResult scal = run_shell(env + "FLOPS_BUDGETS='2e10 4e10' bash " + runs + "scaling_laws.sh");
  ASSERT_EQ(scal.rc, 0) << scal.out << scal.err;

  json m = last_json_line(read_file(base + "/ci_miniseries_results/fit.txt"));
  ASSERT_EQ(m["runs"].size(), 3u);
  EXPECT_EQ(count_lines(read_file(base + "/ci_miniseries_results/results.csv")), 4);
  json m_ref = numpy_reference(runs_of(m));
  for (const char* fit_name : {"loss_vs_flops", "loss_vs_params"})
    for (const char* key : {"slope", "intercept"})
      expect_rel(m[fit_name][key].get<double>(), m_ref[fit_name][key].get<double>(), 1e-7,
                 std::string("miniseries ") + fit_name);

  json s = last_json_line(read_file(base + "/scaling_laws_results_jan26/fit.txt"));
  ASSERT_EQ(s["runs"].size(), 6u);
  ASSERT_EQ(s["optima"].size(), 2u);
  EXPECT_EQ(count_lines(read_file(base + "/scaling_laws_results_jan26/results.csv")), 7);
  json s_ref = numpy_reference(runs_of(s));
  for (size_t i = 0; i < 2; i++)
    for (const char* key : {"params", "tokens", "ratio", "val_bpb"})
      expect_rel(s["optima"][i][key].get<double>(), s_ref["optima"][i][key].get<double>(), 1e-7,
                 "optimum " + std::to_string(i) + " " + key);
  for (const char* fit_name : {"params_vs_flops", "tokens_vs_flops", "loss_vs_flops", "loss_vs_params"})
    for (const char* key : {"slope", "intercept"})
      expect_rel(s[fit_name][key].get<double>(), s_ref[fit_name][key].get<double>(), 1e-7, fit_name);

  // both studies in the report card, with their charts
  const std::string report = read_file(base + "/report/report.md");
  EXPECT_NE(report.find("## Miniseries"), std::string::npos);
  EXPECT_NE(report.find("## Scaling laws"), std::string::npos);
  EXPECT_NE(report.find("(scaling-laws-isoflop.svg)"), std::string::npos);
  EXPECT_TRUE(path_exists(base + "/report/miniseries-loss-vs-flops.svg"));
  EXPECT_TRUE(path_exists(base + "/scaling_laws_results_jan26/report.md"));  // the copy beside the results

  CommandResult again = run_shell(env + "RATIO=0.5 bash " + runs + "miniseries.sh ci");
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_EQ(count(again.out, "finished before, skipped"), 3) << again.out;
  EXPECT_EQ(last_json_line(read_file(base + "/ci_miniseries_results/fit.txt")), m);
}
