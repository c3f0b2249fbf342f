// The report card (upstream's report.py): sections rendered and the summary table, wall-clock time and
// code-size lines worked out by hand from upstream's report.py rules.
#include <gtest/gtest.h>

#include <sstream>

#include "nanochat/report.h"

using namespace nanochat;

TEST(Report, SlugIsLowerCaseWithDashes) {
  EXPECT_EQ(report_slug("Chat evaluation sft"), "chat-evaluation-sft");
  EXPECT_EQ(report_slug("Base model training"), "base-model-training");
}

TEST(Report, SectionRendersItemsLikeUpstream) {
  std::vector<ReportItem> items = {
      ReportItem{{"lr", 1.5}, {"tokens", 12345678}, {"steps", 9999}, {"name", "d20"}, {"fp8", true}}, ReportItem(""),
      ReportItem(), ReportItem::object(), ReportItem("a table\n| x |\n")};
  EXPECT_EQ(report_render_section("Base model training", items, "2026-01-02 03:04:05"),
            "## Base model training\n"
            "timestamp: 2026-01-02 03:04:05\n"
            "\n"
            "- lr: 1.5000\n"
            "- tokens: 12,345,678\n"
            "- steps: 9999\n"
            "- name: d20\n"
            "- fp8: True\n"
            "\n"
            "a table\n| x |\n"
            "\n");
}

TEST(Report, SummaryTableAndWallClock) {
  const std::string header =
      "# nanochat training report\n\n### Bloat\n- Characters: 1,000\n- Lines: 10\n\nRun started: 2026-01-01 10:00:00\n\n---\n\n";
  std::vector<std::pair<std::string, std::string>> sections = {
      {"base-model-training.md", "## Base model training\ntimestamp: 2026-01-01 10:50:00\n\n- MFU %: 40.00%\n"},
      {"base-model-evaluation.md",
       "## Base model evaluation\ntimestamp: 2026-01-01 11:00:00\n\n- model: d20\n- CORE metric: 0.2219\n"},
      {"chat-evaluation-sft.md",
       "## Chat evaluation sft\ntimestamp: 2026-01-01 12:30:59\n\n- source: sft\n\n- ARC-Easy: 0.3876\n- GSM8K: 0.0455\n\n"
       "- ChatCORE metric: 0.0884\n"},
      {"chat-rl.md", "## Chat RL\ntimestamp: 2026-01-01 13:00:00\n"},
      {"chat-evaluation-rl.md", "## Chat evaluation rl\ntimestamp: 2026-01-01 14:00:00\n\n- GSM8K: 0.0758\n"}};
  // the RL sections do not move the end time: 10:00:00 -> 12:30:59 is 2h30m
  EXPECT_EQ(report_format_summary(header, sections),
            "## Summary\n\n"
            "- Characters: 1,000\n- Lines: 10\n\n"
            "| Metric          | BASE     | SFT      | RL       |\n"
            "|-----------------|----------|----------|----------|\n"
            "| CORE            | 0.2219   | -        | -        |\n"
            "| ARC-Easy        | -        | 0.3876   | -        |\n"
            "| GSM8K           | -        | 0.0455   | 0.0758   |\n"
            "| ChatCORE        | -        | 0.0884   | -        |\n"
            "\n"
            "Total wall clock time: 2h30m\n");
  // no header: no bloat lines and no time
  std::string bare = report_format_summary("", {});
  EXPECT_NE(bare.find("[bloat data missing]"), std::string::npos) << bare;
  EXPECT_NE(bare.find("Total wall clock time: unknown"), std::string::npos) << bare;
}

// ---- svg_chart: the SVG's counts and pixel positions, worked out by hand ------------------
#include <cmath>
#include <regex>

#include "nanochat/report/svg_chart.h"

namespace {

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) n++;
  return n;
}

// the "x,y" pairs of the first <polyline class="CLASS">
std::vector<std::pair<double, double>> polyline_points(const std::string& svg, const std::string& cls) {
  std::smatch m;
  std::vector<std::pair<double, double>> out;
  if (!std::regex_search(svg, m, std::regex("<polyline class=\"" + cls + "\" points=\"([^\"]*)\""))) return out;
  std::istringstream in(m[1].str());
  for (std::string pair; in >> pair;) {
    const size_t comma = pair.find(',');
    out.emplace_back(std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1)));
  }
  return out;
}

}  // namespace

TEST(SvgChart, LineSeriesPixelsAndTicks) {
  Chart c;
  c.title = "loss";
  c.x_label = "step";
  c.y_label = "loss";
  // x 0..100 -> nice step 20 (100/6 = 16.7 rounds up to 20), axis 0..100; y 1..3 with 3% room,
  // 0.94..3.06 -> step 0.5 (2.12/6 = 0.35 rounds up), axis 0.5..3.5
  c.series.push_back(chart_line("train", {0, 50, 100}, {3, 2, 1}));
  const std::string svg = chart_render_svg(c);
  EXPECT_NE(svg.find("data-kind=\"line\" data-n=\"3\""), std::string::npos) << svg;
  auto pts = polyline_points(svg, "line");
  ASSERT_EQ(pts.size(), 3u);
  // plot area: x 76..704 (720 - 16), y 370 (420 - 50) .. 34
  EXPECT_NEAR(pts[0].first, 76, 0.05);
  EXPECT_NEAR(pts[1].first, 390, 0.05);
  EXPECT_NEAR(pts[2].first, 704, 0.05);
  EXPECT_NEAR(pts[0].second, 370 - 2.5 / 3 * 336, 0.05);
  EXPECT_NEAR(pts[1].second, 370 - 1.5 / 3 * 336, 0.05);
  EXPECT_NEAR(pts[2].second, 370 - 0.5 / 3 * 336, 0.05);
  for (const char* label :
       {">0<", ">20<", ">40<", ">60<", ">80<", ">100<", ">0.5<", ">1.0<", ">1.5<", ">2.5<", ">3.5<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(count_of(svg, "class=\"mk\""), 3);  // few points: markers too
}

TEST(SvgChart, PointsSkipWhatALogAxisCannotShow) {
  Chart c;
  c.x_log = true;
  c.y_log = true;
  c.series.push_back(chart_points("runs", {1e15, 1e16, NAN, -1, 1e18, 1e17}, {1.2, 1.0, 0.9, 0.8, 0.0, 0.85}));
  Chart linear = c;
  linear.x_log = linear.y_log = false;
  EXPECT_EQ(chart_drawn_count(c, 0), 3);       // NaN, x = -1 and y = 0 are not drawn on log axes
  EXPECT_EQ(chart_drawn_count(linear, 0), 5);  // only the NaN
  const std::string svg = chart_render_svg(c);
  EXPECT_EQ(count_of(svg, "<circle class=\"pt\""), 3);
  EXPECT_NE(svg.find("data-n=\"3\""), std::string::npos);
  for (const char* label : {">1e15<", ">1e16<", ">1e17<"}) EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgChart, FitIsSampledOnTheCurveInThePointsColor) {
  Chart c;
  c.x_log = true;
  c.series.push_back(chart_points("runs", {10, 100, 1000}, {5, 4, 3.2}));
  c.series.back().color = "#123456";
  c.series.push_back(chart_fit(
      "fit", [](double x) { return 6.0 * std::pow(x, -0.1); }, 0, 0, 50));
  EXPECT_EQ(chart_drawn_count(c, 1), 50);
  const std::string svg = chart_render_svg(c);
  auto pts = polyline_points(svg, "fit");
  ASSERT_EQ(pts.size(), 50u);
  EXPECT_NE(svg.find("stroke=\"#123456\" stroke-width=\"1.5\" stroke-dasharray"), std::string::npos);
  // log x axis: 10..1000 with 5% of its two decades as room either side, 10^0.9..10^3.1, over
  // the plot's 76..704: the samples run from 76 + 0.1/2.2*628 to 704 - 0.1/2.2*628, evenly
  const double edge = 0.1 / 2.2 * 628;
  EXPECT_NEAR(pts.front().first, 76 + edge, 0.05);
  EXPECT_NEAR(pts.back().first, 704 - edge, 0.05);
  EXPECT_NEAR(pts[1].first - pts[0].first, (628 - 2 * edge) / 49, 0.1);
  // y: the curve is 6*10^-0.1 = 4.766 at x=10 and 6*10^-0.3 = 3.007 at x=1000, the points reach 5;
  // 3.007..5 with 3% room is 2.947..5.06, step 0.5 (2.11/6 = 0.35 rounds up), axis 2.5..5.5, so
  // pixels are 370 - (y-2.5)/3*336
  EXPECT_NEAR(pts.front().second, 370 - (6 * std::pow(10.0, -0.1) - 2.5) / 3 * 336, 0.06);
  EXPECT_NEAR(pts.back().second, 370 - (6 * std::pow(10.0, -0.3) - 2.5) / 3 * 336, 0.06);
}

TEST(SvgChart, EscapesTextAndSaysNoData) {
  Chart c;
  c.title = "a<b & \"c\"";
  c.series.push_back(chart_line("x<y", {}, {}));
  const std::string svg = chart_render_svg(c);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"x&lt;y\""), std::string::npos);
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_NE(svg.find("data-n=\"0\""), std::string::npos);
}

TEST(SvgChart, LargeNumbersGetCompactExponentLabels) {
  Chart c;
  c.series.push_back(chart_line("", {0, 2.4e18}, {1, 2}));  // step 5e17 (2.4e18/6 = 4e17 -> 5e17)
  const std::string svg = chart_render_svg(c);
  for (const char* label : {">0<", ">5e17<", ">1e18<", ">1.5e18<", ">2.5e18<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
}

// ---- the report's training charts: which runs, which charts, how many points, where embedded --
#include <sys/time.h>

#include <map>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/files.h"
#include "test_util.h"

namespace {

void write_lines(const std::string& path, const std::vector<nlohmann::json>& lines, const std::string& tail = "") {
  make_dirs(parent_dir(path));
  std::ofstream out(path);
  for (const auto& j : lines) out << j.dump() << "\n";
  out << tail;
}

// chart file -> (series name -> data-n), read from the SVGs in dir
std::map<std::string, std::map<std::string, int>> series_counts(const std::string& dir) {
  std::map<std::string, std::map<std::string, int>> out;
  const std::regex series("<g class=\"series\" data-name=\"([^\"]*)\" data-kind=\"line\" data-n=\"([0-9]+)\">");
  CommandResult ls = run_shell("ls " + dir);
  std::istringstream names(ls.out);
  for (std::string name; std::getline(names, name);) {
    if (name.rfind("chart-", 0) != 0) continue;
    const std::string svg = read_file(dir + "/" + name);
    auto& m = out[name];
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), series); it != std::sregex_iterator(); ++it)
      m[(*it)[1]] = std::stoi((*it)[2]);
  }
  return out;
}

}  // namespace

TEST(ReportCharts, GenerateDrawsThisRunsMetricsBesideTheReport) {
  const std::string base = temp_dir(), cwd = temp_dir();
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  // a run from before this report: its metrics must not be charted
  write_lines(base + "/base_checkpoints/old/metrics.jsonl", {{{"step", 0}, {"loss", 9.0}}});
  const std::string old_path = base + "/base_checkpoints/old/metrics.jsonl";
  struct timeval long_ago[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(utimes(old_path.c_str(), long_ago), 0);
  atomic_write_file(base + "/report/header.md", "# nanochat training report\n\nRun started: 2026-01-01 10:00:00\n\n");
  atomic_write_file(base + "/report/base-model-training.md",
                    "## Base model training\ntimestamp: 2026-01-01 11:00:00\n\n- x: 1\n");

  // d4: 30 training lines (one with mfu null), val bpb at 0, 10, 20, 30, CORE at 30, a torn line
  std::vector<nlohmann::json> d4;
  for (int s = 0; s < 30; s++) {
    nlohmann::json j = {{"step", s},
                        {"loss", 5.0 - 0.1 * s},
                        {"lrm", 1.0},
                        {"tok_per_sec", 1000 + s},
                        {"mfu", 1.5},
                        {"data_wait", 0.02},
                        {"total_training_flops", 1e12 * (s + 1)}};
    if (s == 7) j["mfu"] = nullptr;
    d4.push_back(j);
    if (s % 10 == 0) d4.push_back({{"step", s}, {"val_bpb", 2.0 - 0.01 * s}, {"total_training_flops", 1e12 * s}});
  }
  d4.push_back({{"step", 30}, {"val_bpb", 1.6}, {"total_training_flops", 3e13}});
  d4.push_back({{"step", 30}, {"core_metric", 0.12}, {"total_training_flops", 3e13}, {"core/x", 0.5}});
  write_lines(base + "/base_checkpoints/d4/metrics.jsonl", d4, "{\"step\": 31, \"lo");
  // d6: 5 training lines with loss and lrm only
  std::vector<nlohmann::json> d6;
  for (int s = 0; s < 5; s++) d6.push_back({{"step", s}, {"loss", 4.0}, {"lrm", 0.5}});
  write_lines(base + "/base_checkpoints/d6/metrics.jsonl", d6);
  // sft (no section in the report): 12 training lines, ChatCORE at 12
  std::vector<nlohmann::json> sft;
  for (int s = 0; s < 12; s++) sft.push_back({{"step", s}, {"loss", 1.0}, {"lrm", 1.0}});
  sft.push_back({{"step", 12}, {"chatcore", 0.2}, {"chatcore_cat", 0.3}, {"MMLU", 0.3}});
  write_lines(base + "/chatsft_checkpoints/d4/metrics.jsonl", sft);

  char here[4096];
  ASSERT_NE(getcwd(here, sizeof here), nullptr);
  ASSERT_EQ(chdir(cwd.c_str()), 0);
  const std::string path = report_generate();
  ASSERT_EQ(chdir(here), 0);
  unsetenv("NANOCHAT_BASE_DIR");

  using Counts = std::map<std::string, std::map<std::string, int>>;
  const Counts expected = {
      {"chart-base-train-loss-vs-step.svg", {{"d4", 30}, {"d6", 5}}},
      {"chart-base-val-bpb-vs-step.svg", {{"d4", 4}}},
      {"chart-base-train-loss-vs-flops.svg", {{"d4", 30}}},
      {"chart-base-val-bpb-vs-flops.svg", {{"d4", 4}}},
      {"chart-base-lrm.svg", {{"d4", 30}, {"d6", 5}}},
      {"chart-base-tok-per-sec.svg", {{"d4", 30}}},
      {"chart-base-mfu.svg", {{"d4", 29}}},
      {"chart-base-data-wait.svg", {{"d4", 30}}},
      {"chart-base-core.svg", {{"d4", 1}}},
      {"chart-sft-train-loss-vs-step.svg", {{"d4", 12}}},
      {"chart-sft-lrm.svg", {{"d4", 12}}},
      {"chart-sft-chatcore.svg", {{"chatcore", 1}, {"chatcore_cat", 1}}},
  };
  EXPECT_EQ(series_counts(base + "/report"), expected);

  // data wait is drawn in percent: 0.02 -> 2, one value, so the y axis is 1.8..2.2 (10% either
  // side, ticks every 0.1) and the line runs at its middle: 370 - 0.5*336 = 202
  const std::string wait = read_file(base + "/report/chart-base-data-wait.svg");
  EXPECT_NE(wait.find(">1.8<"), std::string::npos);
  EXPECT_NE(wait.find(">2.2<"), std::string::npos);
  EXPECT_NE(wait.find(",202.0 "), std::string::npos);

  // embedded after the base section; the sft charts under their own heading, before the summary
  const std::string md = read_file(path);
  const size_t section = md.find("## Base model training"),
               base_chart = md.find("](chart-base-train-loss-vs-step.svg)"),
               sft_heading = md.find("## Chat SFT\n\n### Training charts"), sft_chart = md.find("](chart-sft-lrm.svg)"),
               summary = md.find("## Summary");
  ASSERT_NE(section, std::string::npos) << md;
  EXPECT_LT(section, base_chart);
  EXPECT_LT(base_chart, sft_heading);
  EXPECT_LT(sft_heading, sft_chart);
  EXPECT_LT(sft_chart, summary);
  EXPECT_EQ(count_of(md, "!["), (int)expected.size());
  EXPECT_EQ(md.find("old/metrics.jsonl"), std::string::npos);
  // the copy in the working directory points into the report dir
  EXPECT_NE(read_file(cwd + "/report.md").find("](" + base + "/report/chart-base-mfu.svg)"), std::string::npos);

  // a second generate after the runs are gone leaves no stale chart behind
  remove_tree(base + "/chatsft_checkpoints");
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  ASSERT_EQ(chdir(cwd.c_str()), 0);
  report_generate();
  ASSERT_EQ(chdir(here), 0);
  unsetenv("NANOCHAT_BASE_DIR");
  EXPECT_EQ(series_counts(base + "/report").count("chart-sft-lrm.svg"), 0u);
  EXPECT_EQ(series_counts(base + "/report").size(), expected.size() - 3);
}

// ---- the charts of a generated report in Chromium (tests/browser/report_charts_test.py) --------
TEST(ReportCharts, RenderInChromiumWithTheirPointCounts) {
  if (run_shell(std::string(NANOCHAT_PYTHON) + " -c 'import playwright'").rc != 0 ||
      access("/usr/bin/chromium", X_OK) != 0)
    GTEST_SKIP() << "needs the playwright package and /usr/bin/chromium";
  const std::string work = temp_dir();
  const CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                                    "/tests/browser/report_charts_test.py " + NANOCHAT_BIN + " " + work);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string last = r.out.substr(r.out.rfind('{'));
  const nlohmann::json seen = nlohmann::json::parse(last);
  // 9 base charts (the real d2 run and the synthetic d3 with CORE), 6 SFT, 4 RL
  EXPECT_EQ(seen["charts"], 19);
  EXPECT_GT(seen["points"].get<int>(), 500);
}

// ---- `nanochat report generate` after a partial run: one line names what did not run ---------
TEST(ReportGenerate, StagesThatDidNotRunGetOneLine) {
  const std::string base = temp_dir(), cwd = temp_dir();
  const std::string env = "cd " + cwd + " && NANOCHAT_BASE_DIR=" + base + " " + NANOCHAT_BIN;
  ASSERT_EQ(run_shell(env + " report reset").rc, 0);
  atomic_write_file(base + "/report/tokenizer-training.md", "## Tokenizer training\ntimestamp: 2026-01-01 10:00:00\n");
  atomic_write_file(base + "/report/base-model-training.md",
                    "## Base model training\ntimestamp: 2026-01-01 10:10:00\n");
  CommandResult r = run_shell(env + " report generate");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string all = r.out + r.err;
  // the 7 stages of a full run that wrote nothing, in pipeline order, on one line; no warnings
  const std::string line =
      "no section from the stages that did not run (tokenizer-evaluation, base-model-loss, "
      "base-model-evaluation, chat-sft, chat-evaluation-sft, chat-rl, chat-evaluation-rl)";
  EXPECT_EQ(count_of(all, line), 1) << all;
  EXPECT_EQ(count_of(all, "report:"), 1) << all;  // that line; the path line says "report written"
  EXPECT_EQ(all.find("warn"), std::string::npos) << all;
  EXPECT_EQ(all.find("does not exist"), std::string::npos) << all;
  EXPECT_NE(read_file(base + "/report/report.md").find("## Base model training"), std::string::npos);

  // every stage there: not a word about missing ones (the studies are optional)
  for (const char* f : {"tokenizer-evaluation", "base-model-loss", "base-model-evaluation", "chat-sft",
                        "chat-evaluation-sft", "chat-rl", "chat-evaluation-rl"})
    atomic_write_file(base + "/report/" + f + ".md", std::string("## ") + f + "\n");
  CommandResult full = run_shell(env + " report generate");
  ASSERT_EQ(full.rc, 0) << full.err;
  EXPECT_EQ((full.out + full.err).find("did not run"), std::string::npos) << full.out << full.err;
}
