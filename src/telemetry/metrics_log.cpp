// metrics.jsonl: appended line by line; a resume first rewrites the file (atomically)
// without the lines of the steps that are about to be trained again.
#include "nanochat/telemetry/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <utility>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"

namespace nanochat {

static void drop_lines_from_step(const std::string& path, int64_t resume_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // a torn last line (crash mid-write) is not valid JSON: drop it too
    if (j.is_discarded() || !j.contains("step")) continue;
    if (j["step"].get<int64_t>() >= resume_step) continue;
    kept += line + "\n";
  }
  atomic_write_file(path, kept);
}

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) : path_(path) {
  make_dirs(parent_dir(path));
  if (resume_step >= 0 && path_exists(path)) drop_lines_from_step(path, resume_step);
  file_ = std::fopen(path.c_str(), resume_step >= 0 ? "a" : "w");
  if (!file_) fail("cannot open %s for writing: %s", path.c_str(), std::strerror(errno));
  if (env_get("NANOCHAT_TENSORBOARD") && !env_flag("NANOCHAT_TENSORBOARD")) return;
  try {
    tensorboard_ = TensorBoardWriter(parent_dir(path), resume_step);
    log_info("TensorBoard events in %s (tensorboard --logdir %s)", tensorboard_.path().c_str(),
             parent_dir(path).c_str());
  } catch (const std::exception& e) {
    log_warn("no TensorBoard events: %s", e.what());
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      tensorboard_(std::move(other.tensorboard_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    tensorboard_ = std::move(other.tensorboard_);
  }
  return *this;
}

void MetricsLog::log(const nlohmann::json& record) {
  if (!file_) return;
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    fail("cannot write %s: %s", path_.c_str(), std::strerror(errno));
  if (tensorboard_.path().empty()) return;
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [key, value] : record.items())
    if (key != "step" && value.is_number() && std::isfinite(value.get<double>()))
      scalars.emplace_back(key, value.get<double>());
  try {
    tensorboard_.add_scalars(record.value("step", (int64_t)0), scalars);
  } catch (const std::exception& e) {
    log_warn("TensorBoard events stop here: %s", e.what());
    tensorboard_ = TensorBoardWriter();
  }
}

}  // namespace nanochat
