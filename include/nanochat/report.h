// defines: ReportItem, report_dir, report_slug, report_render_section, report_log, report_reset,
//          report_generate, report_format_summary
// The report card (upstream's nanochat/report.py): every stage writes one markdown
// section into $NANOCHAT_BASE_DIR/report/<slug>.md (rank 0 only); `nanochat report reset`
// starts a run with header.md (git, hardware, software, code size, start time) and
// `nanochat report generate` joins the header and the sections into report.md with a summary
// table of the headline metrics (CORE, the chat tasks, ChatCORE) and the wall-clock time.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat {

// a string is written verbatim; an object as "- key: value" lines (floats with 4 decimals,
// integers >= 10000 with thousands separators); null, "", {} are skipped
using ReportItem = nlohmann::ordered_json;

std::string report_dir();                           // $NANOCHAT_BASE_DIR/report
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

}  // namespace nanochat
