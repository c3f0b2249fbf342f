// The report card (upstream's report.py): sections, header, summary. Formats follow upstream's
// report.py so reports from both read the same.
#include "nanochat/report.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include <torch/version.h>

#include "nanochat/common.h"
#include "nanochat/common/device.h"

namespace nanochat {

namespace {

// the stages' sections, in report order
const char* kSectionFiles[] = {"tokenizer-training.md", "tokenizer-evaluation.md", "base-model-training.md",
                               "base-model-loss.md", "base-model-evaluation.md", "chat-sft.md",
                               "chat-evaluation-sft.md", "chat-rl.md", "chat-evaluation-rl.md",
                               // studies over many base runs (scaling-fit), not stages of one run
                               "miniseries.md", "scaling-laws.md"};

std::string now_timestamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// "%Y-%m-%d %H:%M:%S" after `prefix` at the start of a line; -1 when there is none
int64_t find_timestamp(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::tm tm{};
    int n = std::sscanf(line.c_str() + prefix.size(), " %d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                        &tm.tm_hour, &tm.tm_min, &tm.tm_sec);
    if (n != 6) continue;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);  // both ends in the same zone: only the difference matters
  }
  return -1;
}

// upstream's extract(): for every line containing a key, the text after its first ':'
std::map<std::string, std::string> extract(const std::string& section, const std::vector<std::string>& keys) {
  std::map<std::string, std::string> out;
  std::istringstream in(section);
  for (std::string line; std::getline(in, line);)
    for (const std::string& key : keys) {
      if (line.find(key) == std::string::npos) continue;
      size_t a = line.find(':');
      if (a == std::string::npos) continue;
      size_t b = line.find(':', a + 1);
      std::string v = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
      v.erase(0, v.find_first_not_of(" \t"));
      v.erase(v.find_last_not_of(" \t\r") + 1);
      out[key] = v;
    }
  return out;
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string value_text(const nlohmann::ordered_json& v) {
  if (v.is_number_float()) return strprintf("%.4f", v.get<double>());
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return i >= 10000 ? format_thousands(i) : std::to_string(i);
  }
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

bool falsy(const nlohmann::ordered_json& v) {
  return v.is_null() || (v.is_string() && v.get<std::string>().empty()) || (v.is_object() && v.empty()) ||
         (v.is_array() && v.empty());
}

// stdout of a shell command, "" on failure
std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (pclose(p) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string header_text() {
  std::string h = "# nanochat training report\n\nGenerated: " + now_timestamp() + "\n\n";
  // git of the working directory (where the run was started from), as upstream
  const std::string commit = command_output("git rev-parse --short HEAD");
  h += "## Environment\n\n### Git Information\n";
  if (commit.empty()) {
    h += "- Branch: unknown\n- Commit: unknown\n- Dirty: unknown\n- Message: unknown\n\n";
  } else {
    std::string message = command_output("git log -1 --pretty=%B");
    message = message.substr(0, message.find('\n')).substr(0, 80);
    h += "- Branch: " + command_output("git rev-parse --abbrev-ref HEAD") + "\n- Commit: " + commit +
         "\n- Dirty: " + (command_output("git status --porcelain").empty() ? "No" : "Yes") + "\n- Message: " + message +
         "\n\n";
  }
  HostInfo host = host_info();
  struct utsname u {};
  uname(&u);
  h += "### Hardware\n";
  h += strprintf("- Platform: %s %s %s\n", u.sysname, u.release, u.machine);
  h += "- CPU: " + host.cpu_model + "\n";
  h += strprintf("- CPUs (logical): %d\n", host.hardware_threads);
  if (host.memory_total_bytes > 0) h += strprintf("- Memory: %.1f GB\n", (double)host.memory_total_bytes / 1e9);
  std::vector<CudaDeviceInfo> gpus = cuda_device_infos();
  if (gpus.empty()) {
    h += "- GPUs: none\n";
  } else {
    int64_t vram = 0;
    for (const auto& g : gpus) vram += g.total_bytes;
    h += strprintf("- GPUs: %zux %s\n- GPU Memory: %.1f GB total\n- CUDA Version: %s\n", gpus.size(),
                   gpus[0].name.c_str(), (double)vram / 1e9, cuda_runtime_version().c_str());
    // upstream's hourly rates per GPU: H100 $3.00, A100 $1.79, V100 $0.55, else $2.00
    const std::string name = gpus[0].name;
    const double rate = name.find("H100") != std::string::npos   ? 3.00
                        : name.find("A100") != std::string::npos ? 1.79
                        : name.find("V100") != std::string::npos ? 0.55
                                                                 : 2.00;
    h += strprintf("- Hourly Rate: $%.2f/hour\n", rate * (double)gpus.size());
  }
  h += "\n### Software\n";
  h += strprintf("- nanochat: %s\n- LibTorch: %s\n", NANOCHAT_VERSION, TORCH_VERSION);
  if (cuda_built()) h += "- NCCL: " + nccl_version() + "\n";
  // the size of the code base, counted over the files git tracks, as upstream's "bloat"
  const std::string listing = command_output(
      "git ls-files -- '*.cpp' '*.h' '*.cu' '*.md' '*.sh' '*.py' '*.html' '*.js' '*.css' '*.cmake' "
      "'*CMakeLists.txt'");
  if (!listing.empty()) {
    int64_t files = 0, lines = 0, chars = 0;
    std::istringstream paths(listing);
    for (std::string path; std::getline(paths, path);) {
      if (!path_exists(path)) continue;  // deleted in the working tree
      const std::string text = read_file_bytes(path);
      files++;
      chars += (int64_t)text.size();
      lines += std::count(text.begin(), text.end(), '\n');
    }
    h += "\n### Bloat\n";
    h += "- Characters: " + format_thousands(chars) + "\n- Lines: " + format_thousands(lines) +
         "\n- Files: " + std::to_string(files) + "\n- Tokens (approx): " + format_thousands(chars / 4) + "\n";
  }
  h += "\nRun started: " + now_timestamp() + "\n\n---\n\n";
  return h;
}

// markdown image links to relative paths, ![..](x.svg), made to point into dir
std::string report_links_into(const std::string& md, const std::string& dir) {
  std::string out;
  size_t at = 0;
  for (size_t open; (open = md.find("](", at)) != std::string::npos; at = open + 2) {
    out.append(md, at, open + 2 - at);
    const size_t bang = md.rfind("![", open);
    const bool image = bang != std::string::npos && md.find('\n', bang) > open;
    const char next = open + 2 < md.size() ? md[open + 2] : '/';
    if (image && next != '/' && md.compare(open + 2, 4, "http") != 0) out += dir + "/";
  }
  return out + md.substr(at);
}

}  // namespace

std::string report_dir() { return base_dir_path("report"); }

std::string report_slug(const std::string& section) {
  std::string s;
  for (char ch : section) s += ch == ' ' ? '-' : (char)std::tolower((unsigned char)ch);
  return s;
}

std::string report_render_section(const std::string& section, const std::vector<ReportItem>& items,
                                  const std::string& timestamp) {
  std::string out = "## " + section + "\ntimestamp: " + timestamp + "\n\n";
  for (const ReportItem& item : items) {
    if (falsy(item)) continue;
    if (item.is_string()) {
      out += item.get<std::string>();
    } else if (item.is_object()) {
      for (const auto& [k, v] : item.items()) out += "- " + k + ": " + value_text(v) + "\n";
    } else {
      out += value_text(item);
    }
    out += "\n";
  }
  return out;
}

void report_log(const std::string& section, const std::vector<ReportItem>& items) {
  try {
    make_dirs(report_dir());
    atomic_write_file(report_dir() + "/" + report_slug(section) + ".md",
                      report_render_section(section, items, now_timestamp()));
  } catch (const std::exception& e) {
    log_warn("report: could not write the '%s' section: %s", section.c_str(), e.what());
  }
}

void report_reset() {
  make_dirs(report_dir());
  for (const char* f : kSectionFiles) std::remove((report_dir() + "/" + f).c_str());
  std::remove((report_dir() + "/report.md").c_str());
  report_remove_charts(report_dir());
  atomic_write_file(report_dir() + "/header.md", header_text());
  log_info("report reset: %s/header.md", report_dir().c_str());
}

std::string report_format_summary(const std::string& header,
                                  const std::vector<std::pair<std::string, std::string>>& sections) {
  std::map<std::string, std::map<std::string, std::string>> metrics;  // stage -> metric -> value
  const std::vector<std::string> chat = {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval", "ChatCORE"};
  int64_t end_time = -1;
  std::string time_to_gpt2;  // base-train's leaderboard line, when it evaluated CORE
  for (const auto& [file, text] : sections) {
    // RL is optional; the scaling studies are not part of the run's wall clock
    const bool study = file == "miniseries.md" || file == "scaling-laws.md";
    if (file.find("rl") == std::string::npos && !study) end_time = find_timestamp(text, "timestamp:");
    if (file == "base-model-training.md") time_to_gpt2 = extract(text, {"Time to GPT-2"})["Time to GPT-2"];
    if (file == "base-model-evaluation.md") metrics["base"] = extract(text, {"CORE"});
    if (file == "chat-evaluation-sft.md") metrics["sft"] = extract(text, chat);
    if (file == "chat-evaluation-rl.md") metrics["rl"] = extract(text, {"GSM8K"});
  }
  // CORE first, ChatCORE last, the rest alphabetically
  std::set<std::string> names;
  for (const auto& [stage, m] : metrics)
    for (const auto& [k, v] : m) names.insert(k);
  std::vector<std::string> order;
  if (names.count("CORE")) order.push_back("CORE");
  for (const std::string& n : names)
    if (n != "CORE" && n != "ChatCORE") order.push_back(n);
  if (names.count("ChatCORE")) order.push_back("ChatCORE");

  std::string out = "## Summary\n\n";
  size_t bloat = header.find("### Bloat\n");
  if (bloat != std::string::npos) {
    size_t start = bloat + 10, end = header.find("\n\n", start);
    out += header.substr(start, end == std::string::npos ? std::string::npos : end - start);
  } else {
    out += "[bloat data missing]";
  }
  out += "\n\n";
  const char* stages[] = {"base", "sft", "rl"};
  out += "| " + pad("Metric", 15) + " |";
  for (const char* s : stages) {
    std::string up = s;
    for (char& ch : up) ch = (char)std::toupper((unsigned char)ch);
    out += " " + pad(up, 8) + " |";
  }
  out += "\n|" + std::string(17, '-') + "|";
  for (size_t i = 0; i < 3; i++) out += std::string(10, '-') + "|";
  out += "\n";
  for (const std::string& name : order) {
    out += "| " + pad(name, 15) + " |";
    for (const char* s : stages) {
      auto st = metrics.find(s);
      std::string v = "-";
      if (st != metrics.end() && st->second.count(name)) v = st->second.at(name);
      out += " " + pad(v, 8) + " |";
    }
    out += "\n";
  }
  out += "\n";
  const int64_t start_time = find_timestamp(header, "Run started:");
  if (start_time >= 0 && end_time >= 0) {
    const int64_t seconds = end_time - start_time;
    out += strprintf("Total wall clock time: %lldh%lldm\n", (long long)(seconds / 3600),
                     (long long)(seconds % 3600 / 60));
  } else {
    out += "Total wall clock time: unknown\n";
  }
  if (!time_to_gpt2.empty()) out += "Time to GPT-2: " + time_to_gpt2 + "\n";
  return out;
}

std::string report_generate() {
  const std::string dir = report_dir();
  std::string header;
  if (path_exists(dir + "/header.md")) {
    header = read_file_bytes(dir + "/header.md");
  } else {
    log_warn("report: %s/header.md does not exist (run `nanochat report reset` at the start of a run)", dir.c_str());
  }
  std::vector<std::pair<std::string, std::string>> sections;
  std::string body = header;
  make_dirs(dir);
  report_remove_charts(dir);
  std::map<std::string, std::string> charts = report_stage_charts(dir);  // section file -> markdown
  std::string not_run;  // the stages without a section, named in one line (the studies are optional)
  for (const char* f : kSectionFiles) {
    const std::string path = dir + "/" + f;
    if (!path_exists(path)) {
      std::string name = f;
      name = name.substr(0, name.size() - 3);
      if (name != "miniseries" && name != "scaling-laws") not_run += (not_run.empty() ? "" : ", ") + name;
      continue;
    }
    sections.emplace_back(f, read_file_bytes(path));
    body += sections.back().second + "\n";
    auto c = charts.find(f);
    if (c != charts.end()) {
      body += c->second + "\n";
      charts.erase(c);
    }
  }
  if (!not_run.empty()) log_info("report: no section from the stages that did not run (%s)", not_run.c_str());
  for (const auto& [f, md] : charts) body += report_section_heading_for_charts(f) + md + "\n";  // no section
  body += report_format_summary(header, sections);
  atomic_write_file(dir + "/report.md", body);
  try {
    // a copy where the run was started, as upstream; its images point into the report dir
    atomic_write_file("report.md", report_links_into(body, dir));
  } catch (const std::exception& e) {
    log_warn("report: no copy in the current directory: %s", e.what());
  }
  return dir + "/report.md";
}

}  // namespace nanochat
