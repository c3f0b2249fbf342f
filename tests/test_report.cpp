// The report card (upstream's report.py): sections rendered and the summary table, wall-clock time and
// code-size lines worked out by hand from upstream's report.py rules.
#include <gtest/gtest.h>

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
