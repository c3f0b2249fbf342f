// `nanochat scaling-fit RUN...`: the scaling analysis of finished base-train runs (the end of
// runs/scaling_laws.sh and runs/miniseries.sh; upstream's dev/scaling_analysis.ipynb): the
// runs' table, the IsoFLOP optimum per FLOP budget, N* and D* against compute, the loss fit;
// printed, written into the report card with --report (tables and SVG charts), one JSON line last.
// `--finished` only answers whether every run is finished (exit 0) or not (exit 1), which is
// how the scripts skip the runs they already have.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "nanochat/checkpoint.h"
#include "nanochat/common.h"
#include "nanochat/report.h"
#include "nanochat/scaling.h"

namespace nanochat {

namespace {

struct ScalingFitFlags {
  std::vector<std::string> runs;
  bool finished_only = false;
  std::string report, csv;
};

// a dir as given, else a model tag under base_checkpoints/
std::string run_dir(const std::string& arg) {
  return is_directory(arg) || arg.find('/') != std::string::npos ? arg : checkpoint_dir("base", arg);
}

std::string runs_csv(const std::vector<ScalingRun>& runs) {
  std::string csv = "tag,depth,flops_budget,params,params_total,num_iterations,tokens,flops,val_bpb,core\n";
  for (const ScalingRun& r : runs)
    csv += strprintf("%s,%lld,%.6g,%lld,%lld,%lld,%lld,%.6e,%.6f,%s\n", r.tag.c_str(), (long long)r.depth,
                     r.flops_budget, (long long)r.params, (long long)r.params_total, (long long)r.step,
                     (long long)r.tokens, r.flops, r.val_bpb, r.core >= 0 ? strprintf("%.6f", r.core).c_str() : "");
  return csv;
}

int scaling_fit(const ScalingFitFlags& o) {
  std::vector<ScalingRun> runs;
  int unfinished = 0;
  for (const std::string& arg : o.runs) {
    const std::string dir = run_dir(arg);
    if (o.finished_only) {  // a run not started (no checkpoint) is simply not finished
      bool done = false;
      try {
        done = scaling_run_load(dir).finished;
      } catch (const std::exception&) {
      }
      std::printf("%s: %s\n", dir.c_str(), done ? "finished" : "not finished");
      unfinished += !done;
      continue;
    }
    ScalingRun r = scaling_run_load(dir);
    if (!r.finished) {
      log_warn("%s: left out, not finished (step %lld of %lld%s)", dir.c_str(), (long long)r.step,
               (long long)r.planned_steps, r.val_bpb > 0 ? "" : ", no val bpb at its last step");
      unfinished++;
      continue;
    }
    runs.push_back(r);
  }
  if (o.finished_only) return unfinished ? 1 : 0;
  if (runs.empty()) fail("scaling-fit: none of the %zu runs is finished", o.runs.size());

  ScalingLaws laws = scaling_fit_laws(runs);
  const std::string runs_table = scaling_runs_table(laws.runs), fit_table = scaling_laws_table(laws);
  std::printf("%s\n%s\n", runs_table.c_str(), fit_table.c_str());
  if (!o.csv.empty()) {
    atomic_write_file(o.csv, runs_csv(laws.runs));
    log_info("runs written to %s", o.csv.c_str());
  }
  if (!o.report.empty()) {
    const std::string section = o.report == "miniseries" ? "Miniseries" : "Scaling laws";
    ReportItem summary = {{"runs", (int64_t)laws.runs.size()}, {"runs left out (not finished)", unfinished}};
    make_dirs(report_dir());
    const std::string charts = scaling_write_charts(laws, report_dir(), o.report);  // <dir>/scaling-laws-*.svg
    report_log(section, {summary, ReportItem(runs_table), ReportItem(fit_table), ReportItem(charts)});
  }
  std::printf("%s\n", scaling_laws_json(laws).dump().c_str());
  return 0;
}

}  // namespace

void cli_register_scaling_fit(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("scaling-fit",
                                 "Scaling laws from finished base-train runs: IsoFLOP optima, N* and D* vs compute, "
                                 "the loss fit (runs/scaling_laws.sh, runs/miniseries.sh)");
  static ScalingFitFlags o;
  sub->add_option("runs", o.runs, "base-train checkpoint dirs, or model tags under base_checkpoints/")->required();
  sub->add_flag("--finished", o.finished_only,
                "only say whether each run is finished: exit 0 when all are, 1 otherwise");
  sub->add_option("--report", o.report, "write the tables into the report card as this section")
      ->check(CLI::IsMember({"scaling-laws", "miniseries"}));
  sub->add_option("--csv", o.csv, "also write the finished runs as CSV here");
  sub->callback([&exit_code] { exit_code = scaling_fit(o); });
}

}  // namespace nanochat
