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
      ReportItem{{"lr", 1.5}, {"tokens", 12345678}, {"steps", 9999}, {"name", "d20"}, {"fp8", true}},
      ReportItem(""), ReportItem(), ReportItem::object(), ReportItem("a table\n| x |\n")};
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
      {"base-model-evaluation.md", "## Base model evaluation\ntimestamp: 2026-01-01 11:00:00\n\n- model: d20\n- CORE metric: 0.2219\n"},
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

#include "nanochat/svg_chart.h"

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
  // x 0..100 -> nice step 20 (100/6 = 16.7 rounds up to 20), axis 0..100; y 1..3 -> step 0.5, axis 1..3
  c.series.push_back(chart_line("train", {0, 50, 100}, {3, 2, 1}));
  const std::string svg = chart_render_svg(c);
  EXPECT_NE(svg.find("data-kind=\"line\" data-n=\"3\""), std::string::npos) << svg;
  auto pts = polyline_points(svg, "line");
  ASSERT_EQ(pts.size(), 3u);
  // plot area: x 76..704 (720 - 16), y 370 (420 - 50) .. 34
  EXPECT_NEAR(pts[0].first, 76, 0.05);
  EXPECT_NEAR(pts[1].first, 390, 0.05);
  EXPECT_NEAR(pts[2].first, 704, 0.05);
  EXPECT_NEAR(pts[0].second, 34, 0.05);
  EXPECT_NEAR(pts[1].second, 202, 0.05);
  EXPECT_NEAR(pts[2].second, 370, 0.05);
  for (const char* label : {">0<", ">20<", ">40<", ">60<", ">80<", ">100<", ">1.0<", ">1.5<", ">2.5<", ">3.0<"})
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
  c.series.push_back(chart_fit("fit", [](double x) { return 6.0 * std::pow(x, -0.1); }, 0, 0, 50));
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
  // y: the curve is 6*10^-0.1 = 4.766 at x=10 and 6*10^-0.3 = 3.007 at x=1000; the y axis spans
  // 3.0..5.0 (step 0.5), so pixels are 370 - (y-3)/2*336
  EXPECT_NEAR(pts.front().second, 370 - (6 * std::pow(10.0, -0.1) - 3) / 2 * 336, 0.06);
  EXPECT_NEAR(pts.back().second, 370 - (6 * std::pow(10.0, -0.3) - 3) / 2 * 336, 0.06);
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
  for (const char* label : {">0<", ">5e17<", ">1e18<", ">1.5e18<", ">2.5e18<"}) EXPECT_NE(svg.find(label), std::string::npos) << label;
}
