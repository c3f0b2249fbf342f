// The report card (upstream's nanochat/report.py): every stage writes one markdown
// section into $NANOCHAT_BASE_DIR/report/<slug>.md (rank 0 only); `nanochat report reset`
// starts a run with header.md (git, hardware, software, code size, start time) and
// `nanochat report generate` joins the header and the sections into report.md with a summary
// table of the headline metrics (CORE, the chat tasks, ChatCORE) and the wall-clock time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat {

// a string is written verbatim; an object as "- key: value" lines (floats with 4 decimals,
// integers >= 10000 with thousands separators); null, "", {} are skipped
using ReportItem = nlohmann::ordered_json;

std::string report_dir();                             // $NANOCHAT_BASE_DIR/report
std::string report_slug(const std::string& section);  // lower case, spaces -> '-'
// "## <section>\ntimestamp: <now>\n\n" then each item followed by a blank line
std::string report_render_section(const std::string& section, const std::vector<ReportItem>& items,
                                  const std::string& timestamp);
// writes <slug>.md atomically (callers log on rank 0 only); a failure is a warning, never
// the end of a run
void report_log(const std::string& section, const std::vector<ReportItem>& items);
// removes the sections and report.md, writes header.md
void report_reset();
// report.md from the header and the sections found, in the stages' order; returns its path
// and copies it to ./report.md
std::string report_generate();

// the summary: "## Summary", the code-size lines, the | Metric | BASE | SFT | RL | table
// from the given sections' text, the total wall-clock time (header's "Run started:" to the
// last non-RL section's timestamp). Sections are keyed by file name (e.g. "chat-sft.md").
std::string report_format_summary(const std::string& header,
                                  const std::vector<std::pair<std::string, std::string>>& sections);

// ---- training charts (report_charts.cpp) ----------------------------------------------------
// SVG charts (svg_chart.h) of the stages' metrics.jsonl, written beside report.md as
// chart-<stage>-<name>.svg and embedded after the stage's section: train loss and val bpb
// against steps and FLOPs, lr multiplier, tok/s, MFU, data-wait %, CORE (base); loss, val bpb,
// lr multiplier, tok/s, MFU, ChatCORE (sft); reward, sequence length, lr multiplier, pass@k
// (rl). A chart's series has a point for every line that has its x and y keys as numbers.

struct ReportRun {
  std::string label;         // the checkpoint tag, e.g. d12
  std::string metrics_path;  // <checkpoint root>/<tag>/metrics.jsonl
};
constexpr size_t kReportMaxChartRuns = 10;
// the runs of a stage (base, sft, rl) whose metrics.jsonl was modified at or after since_ns
// (ns since 1970: header.md's time, so the runs of this report), the newest
// kReportMaxChartRuns, by tag; since_ns < 0: the newest run only
std::vector<ReportRun> report_chart_runs(const std::string& stage, int64_t since_ns);
// writes the stage's charts that have data into dir; returns the markdown embedding them under
// "### Training charts" ("" when there is none). Error when a chart cannot be written.
std::string report_write_charts(const std::string& dir, const std::string& stage, const std::vector<ReportRun>& runs);
void report_remove_charts(const std::string& dir);  // every chart-*.svg in dir
// the charts of all stages, of the runs since dir/header.md was written (no header: the newest
// run of each stage): section file (base-model-training.md, chat-sft.md, chat-rl.md) ->
// markdown; a stage that fails is a warning
std::map<std::string, std::string> report_stage_charts(const std::string& dir);
// "## <stage title>\n\n" for a stage's charts whose section is missing
std::string report_section_heading_for_charts(const std::string& section_file);

}  // namespace nanochat
