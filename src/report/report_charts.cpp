// The report card's training charts: the stages' metrics.jsonl files -> SVG charts beside
// report.md -> markdown image links. What each chart plots is the table kCharts: a point for
// every line of metrics.jsonl that has both the x key and the y key as numbers.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "nanochat/checkpoint.h"
#include "nanochat/common.h"
#include "nanochat/report.h"
#include "nanochat/report/svg_chart.h"

namespace nanochat {

namespace {

struct ChartSpec {
  const char* stage;  // base, sft, rl
  const char* name;   // the file is chart-<stage>-<name>.svg
  const char* title;
  const char* x_key;
  const char* x_label;
  const char* y_label;
  std::vector<const char*> y_keys;  // a series each (per run); "pass@*": every key with that prefix
  double y_scale;                   // data_wait is a fraction, drawn in %
};

const std::vector<ChartSpec> kCharts = {
    {"base", "train-loss-vs-step", "Base training: train loss", "step", "step", "train loss (smoothed)", {"loss"}, 1},
    {"base", "val-bpb-vs-step", "Base training: validation bpb", "step", "step", "val bpb", {"val_bpb"}, 1},
    {"base",
     "train-loss-vs-flops",
     "Base training: train loss against compute",
     "total_training_flops",
     "training FLOPs",
     "train loss (smoothed)",
     {"loss"},
     1},
    {"base",
     "val-bpb-vs-flops",
     "Base training: validation bpb against compute",
     "total_training_flops",
     "training FLOPs",
     "val bpb",
     {"val_bpb"},
     1},
    {"base", "lrm", "Base training: learning-rate multiplier", "step", "step", "lr multiplier", {"lrm"}, 1},
    {"base", "tok-per-sec", "Base training: throughput", "step", "step", "tokens / s", {"tok_per_sec"}, 1},
    {"base", "mfu", "Base training: model FLOPs utilization", "step", "step", "MFU %", {"mfu"}, 1},
    {"base",
     "data-wait",
     "Base training: time waiting for data",
     "step",
     "step",
     "data wait % of step",
     {"data_wait"},
     100},
    {"base", "core", "Base training: CORE metric", "step", "step", "CORE", {"core_metric"}, 1},
    {"sft", "train-loss-vs-step", "SFT: train loss", "step", "step", "train loss (smoothed)", {"loss"}, 1},
    {"sft", "val-bpb-vs-step", "SFT: validation bpb", "step", "step", "val bpb", {"val_bpb"}, 1},
    {"sft", "lrm", "SFT: learning-rate multiplier", "step", "step", "lr multiplier", {"lrm"}, 1},
    {"sft", "tok-per-sec", "SFT: throughput", "step", "step", "tokens / s", {"tok_per_sec"}, 1},
    {"sft", "mfu", "SFT: model FLOPs utilization", "step", "step", "MFU %", {"mfu"}, 1},
    {"sft", "chatcore", "SFT: ChatCORE", "step", "step", "ChatCORE", {"chatcore", "chatcore_cat"}, 1},
    {"rl", "reward", "RL: mean reward", "step", "step", "reward", {"reward"}, 1},
    {"rl", "sequence-length", "RL: mean sequence length", "step", "step", "tokens", {"sequence_length"}, 1},
    {"rl", "lrm", "RL: learning-rate multiplier", "step", "step", "lr multiplier", {"lrm"}, 1},
    {"rl", "pass-at-k", "RL: pass@k on the validation problems", "step", "step", "pass@k", {"pass@*"}, 1},
};

// the report section each stage's charts follow
const char* section_file_of(const std::string& stage) {
  return stage == "base" ? "base-model-training.md" : stage == "sft" ? "chat-sft.md" : "chat-rl.md";
}
const char* section_title_of(const std::string& stage) {
  return stage == "base" ? "Base model training" : stage == "sft" ? "Chat SFT" : "Chat RL";
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// modification time in nanoseconds since 1970; -1 when the file is missing
int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

// the lines of a metrics.jsonl that parse (a torn last line does not)
std::vector<nlohmann::json> read_metrics_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) lines.push_back(std::move(j));
  }
  return lines;
}

}  // namespace

std::vector<ReportRun> report_chart_runs(const std::string& stage, int64_t since_ns) {
  const std::string root = checkpoint_root(stage);
  std::vector<std::pair<int64_t, ReportRun>> found;  // (mtime, run)
  for (const std::string& tag : dir_entries(root)) {
    const std::string path = root + "/" + tag + "/metrics.jsonl";
    const int64_t t = mtime_ns(path);
    if (t >= 0 && t >= since_ns) found.push_back({t, {tag, path}});
  }
  // the newest first; then by tag, so a chart's series keep one order
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  found.resize(std::min(found.size(), since_ns < 0 ? (size_t)1 : kReportMaxChartRuns));
  std::vector<ReportRun> runs;
  for (auto& [t, run] : found) runs.push_back(run);
  std::sort(runs.begin(), runs.end(), [](const ReportRun& a, const ReportRun& b) { return a.label < b.label; });
  return runs;
}

std::string report_write_charts(const std::string& dir, const std::string& stage, const std::vector<ReportRun>& runs) {
  std::vector<std::vector<nlohmann::json>> lines;
  for (const ReportRun& run : runs) lines.push_back(read_metrics_lines(run.metrics_path));
  std::string md;
  for (const ChartSpec& spec : kCharts) {
    if (stage != spec.stage) continue;
    Chart chart;
    chart.title = spec.title;
    chart.x_label = spec.x_label;
    chart.y_label = spec.y_label;
    bool any = false;
    for (size_t r = 0; r < runs.size(); r++) {
      std::vector<std::string> keys;  // the y keys, a "prefix*" one expanded over the run's lines
      for (const std::string key : spec.y_keys) {
        if (key.back() != '*') {
          keys.push_back(key);
          continue;
        }
        std::set<std::string> matched;
        for (const nlohmann::json& j : lines[r])
          for (const auto& [k, v] : j.items())
            if (k.rfind(key.substr(0, key.size() - 1), 0) == 0) matched.insert(k);
        keys.insert(keys.end(), matched.begin(), matched.end());
      }
      for (const std::string& key : keys) {
        std::vector<double> x, y;
        for (const nlohmann::json& j : lines[r]) {
          auto xi = j.find(spec.x_key), yi = j.find(key);
          if (xi == j.end() || yi == j.end() || !xi->is_number() || !yi->is_number()) continue;
          x.push_back(xi->get<double>());
          y.push_back(yi->get<double>() * spec.y_scale);
        }
        if (x.empty()) continue;
        any = true;
        // the series' name: the run, the key when the chart has several, both when both vary
        std::string name = runs.size() > 1 ? runs[r].label : "";
        if (keys.size() > 1) name += (name.empty() ? "" : " ") + key;
        if (name.empty()) name = runs[r].label;
        chart.series.push_back(chart_line(name, std::move(x), std::move(y)));
      }
    }
    if (!any) continue;
    const std::string file = std::string("chart-") + spec.stage + "-" + spec.name + ".svg";
    atomic_write_file(dir + "/" + file, chart_render_svg(chart));
    md += "![" + std::string(spec.title) + "](" + file + ")\n";
  }
  if (md.empty()) return "";
  std::string runs_text;
  for (const ReportRun& run : runs) runs_text += (runs_text.empty() ? "" : ", ") + run.metrics_path;
  return "### Training charts\n\nFrom " + runs_text + "\n\n" + md;
}

void report_remove_charts(const std::string& dir) {
  for (const std::string& name : dir_entries(dir))
    if (name.rfind("chart-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".svg")
      std::remove((dir + "/" + name).c_str());
}

std::map<std::string, std::string> report_stage_charts(const std::string& dir) {
  const int64_t since_ns = mtime_ns(dir + "/header.md");
  std::map<std::string, std::string> out;
  for (const char* stage : {"base", "sft", "rl"}) {
    std::string md;
    try {
      md = report_write_charts(dir, stage, report_chart_runs(stage, since_ns));
    } catch (const std::exception& e) {
      log_warn("report: no %s charts: %s", stage, e.what());
    }
    if (!md.empty()) out[section_file_of(stage)] = md;
  }
  return out;
}

std::string report_section_heading_for_charts(const std::string& section_file) {
  for (const char* stage : {"base", "sft", "rl"})
    if (section_file == section_file_of(stage)) return std::string("## ") + section_title_of(stage) + "\n\n";
  return "";
}

}  // namespace nanochat
