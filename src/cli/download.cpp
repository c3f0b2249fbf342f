// `nanochat download [target]`: fetch named datasets into the base dir. Targets today:
// climbmix (the pretraining shards of spec §2.1) and eval-bundle (the CORE bundle, §8.1).
// Later issues add their own (task data) to kTargets; every one goes through download_file
// (resume, verify, lock, retry).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <mutex>
#include <optional>

#include "cli/commands.h"
#include "nanochat/common.h"
#include "nanochat/core_eval.h"
#include "nanochat/dataset.h"
#include "nanochat/dist.h"
#include "nanochat/tasks.h"

namespace nanochat {

struct DownloadFlags {
  std::string target = "climbmix";
  int num_files = -1;
  int workers = 4;
  std::string base_url = kClimbmixBaseUrl;
  double retry_delay = 2.0;
  int timeout = 30;
  std::string url = kEvalBundleUrl;
};

// One progress line in MB for all workers. The total is each file's size once its server
// said it, plus the mean of those for the files not started yet, so the ETA exists early.
class DownloadMeter {
 public:
  explicit DownloadMeter(int files) : files_(files) {}
  void add_bytes(int64_t delta) {
    std::lock_guard<std::mutex> g(mutex_);
    bytes_ += delta;
    if (!progress_) progress_.emplace("download", -1, "MB", 10.0);
    if (known_ > 0) progress_->set_total((known_total_ + (files_ - known_) * (known_total_ / known_)) / 1000000);
    progress_->set(bytes_ / 1000000);
  }
  void add_total(int64_t total) {
    std::lock_guard<std::mutex> g(mutex_);
    known_total_ += total, known_ += 1;
  }
  void finish() {
    std::lock_guard<std::mutex> g(mutex_);
    if (progress_) progress_->finish();
  }

 private:
  std::mutex mutex_;
  std::optional<Progress> progress_;
  int files_, known_ = 0;
  int64_t bytes_ = 0, known_total_ = 0;
};

static int download_climbmix(const DownloadFlags& f) {
  std::string dir = base_dir_path("base_data_climbmix");
  make_dirs(dir);
  // several ranks (launch, torchrun, srun) share the list: each starts at its own offset so
  // they fetch different shards at once; the file locks keep any shard to one download
  DistEnv env = dist_env_from_environment();
  std::vector<int> ids = climbmix_shard_ids(f.num_files);
  std::rotate(ids.begin(), ids.begin() + ids.size() * env.rank / env.world_size, ids.end());
  std::vector<int> todo;
  for (int id : ids)
    if (!path_exists(dir + "/" + climbmix_shard_name(id))) todo.push_back(id);
  log_info("download climbmix: %zu shard(s) (%zu already in %s) from %s with %d workers", ids.size(),
           ids.size() - todo.size(), dir.c_str(), f.base_url.c_str(), f.workers);

  DownloadMeter meter((int)todo.size());
  std::atomic<bool> cancel{false};
  std::mutex mutex;
  std::string unreachable, fatal, first_error;
  int failed = 0, downloaded = 0;
  Timer timer;
  {
    ThreadPool pool(std::max(1, std::min<int>(f.workers, (int)std::max<size_t>(todo.size(), 1))));
    std::vector<std::future<void>> jobs;
    for (int id : todo) {
      jobs.push_back(pool.submit([&, id] {
        DownloadOptions o;
        o.retry_base_seconds = f.retry_delay;
        o.connect_timeout_seconds = o.read_timeout_seconds = f.timeout;
        o.verify = download_verify_parquet;
        o.cancel = &cancel;
        int64_t my_total = -1;
        o.on_bytes = [&](int64_t d) { meter.add_bytes(d); };
        o.on_total = [&](int64_t t) {
          if (my_total < 0) meter.add_total(my_total = t);
        };
        std::string url = climbmix_shard_url(f.base_url, id);
        try {
          if (cancel) return;
          if (download_file(url, dir + "/" + climbmix_shard_name(id), o) == DownloadOutcome::downloaded) {
            std::lock_guard<std::mutex> g(mutex);
            downloaded++;
          }
        } catch (const DownloadError& e) {
          std::lock_guard<std::mutex> g(mutex);
          if (e.unreachable) {
            // offline: stop everything and say it once
            if (unreachable.empty()) unreachable = e.what();
            cancel = true;
          } else if (!cancel) {
            failed++;
            if (first_error.empty()) first_error = e.what();
            log_warn("%s", e.what());
          }
        } catch (const Error& e) {
          // not about one shard (a bad --base-url, an unwritable directory): stop, say it once
          std::lock_guard<std::mutex> g(mutex);
          if (fatal.empty()) fatal = e.what();
          cancel = true;
        }
      }));
    }
    for (auto& j : jobs) j.wait();
  }
  meter.finish();
  if (!fatal.empty()) fail("%s", fatal.c_str());
  if (!unreachable.empty()) fail("%s (or pass --base-url with a reachable mirror)", unreachable.c_str());
  if (failed)
    fail("%d of %zu shards could not be downloaded (first: %s); run the same command again to resume", failed,
         todo.size(), first_error.c_str());
  log_info("done: %d downloaded, %zu were already there, in %s; shards in %s", downloaded,
           ids.size() - todo.size(), format_duration(timer.seconds()).c_str(), dir.c_str());
  return 0;
}

static int download_eval_bundle(const DownloadFlags& f) {
  std::string dest = base_dir_path("eval_bundle");
  if (path_exists(dest + "/core.yaml")) {
    log_info("the CORE eval bundle is already in %s", dest.c_str());
    return 0;
  }
  log_info("download eval-bundle: %s -> %s", f.url.c_str(), dest.c_str());
  DownloadMeter meter(1);
  DownloadOptions o;
  o.retry_base_seconds = f.retry_delay;
  o.connect_timeout_seconds = o.read_timeout_seconds = f.timeout;
  o.on_bytes = [&](int64_t d) { meter.add_bytes(d); };
  o.on_total = [&](int64_t t) { meter.add_total(t); };
  Timer timer;
  try {
    core_bundle_download(f.url, o);
  } catch (const DownloadError& e) {
    meter.finish();
    fail("%s%s", e.what(), e.unreachable ? " (or pass --url with a reachable mirror)" : "");
  }
  meter.finish();
  log_info("done in %s: %zu CORE tasks in %s", format_duration(timer.seconds()).c_str(),
           core_bundle_load(dest).size(), dest.c_str());
  return 0;
}

// the chat task datasets (spec §9.1-§9.2) through the hub's parquet listing API ($HF_ENDPOINT
// for a mirror), one split after the other, plus SpellingBee's word list
static int download_tasks(const DownloadFlags& f) {
  DownloadOptions o;
  o.retry_base_seconds = f.retry_delay;
  o.connect_timeout_seconds = o.read_timeout_seconds = f.timeout;
  Timer timer;
  for (const HubSplit& s : kTaskDataSplits) {
    std::vector<std::string> shards = hub_download(s, o);
    log_info("%s %s/%s: %zu shard(s) in %s", s.repo_id.c_str(), s.subset.c_str(), s.split.c_str(), shards.size(),
             hub_split_dir(s).c_str());
  }
  try {  // only the historical spelling tasks need it, and they can use wamerican instead
    download_file(kWordListUrl, spelling_word_list_path(), o);
  } catch (const DownloadError& e) {
    log_warn("%s; SpellingBee / SimpleSpelling will use /usr/share/dict/words (wamerican) instead", e.what());
  }
  log_info("done in %s: task data in %s, word list %s", format_duration(timer.seconds()).c_str(),
           base_dir_path("task_data").c_str(), spelling_word_list_path().c_str());
  return 0;
}

struct DownloadTarget {
  const char* name;
  const char* what;
  int (*run)(const DownloadFlags&);
};
static const DownloadTarget kTargets[] = {
    {"climbmix", "ClimbMix pretraining shards (~100 MB each) -> $NANOCHAT_BASE_DIR/base_data_climbmix/",
     download_climbmix},
    {"eval-bundle", "the CORE eval bundle (22 DCLM tasks, spec §8.1) -> $NANOCHAT_BASE_DIR/eval_bundle/",
     download_eval_bundle},
    {"tasks", "SFT / chat-eval datasets (SmolTalk, MMLU, GSM8K, ARC, HumanEval; $HF_ENDPOINT for a mirror) -> $NANOCHAT_BASE_DIR/task_data/",
     download_tasks},
};

void cli_register_download(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("download", "Download datasets (resumable, verified, safe under several ranks)");
  static DownloadFlags f;
  std::vector<std::string> names;
  std::string help = "what to download (default climbmix):";
  for (auto& t : kTargets) names.push_back(t.name), help += std::string("\n  ") + t.name + ": " + t.what;
  sub->add_option("target", f.target, help)->check(CLI::IsMember(names));
  sub->add_option("-n,--num-files", f.num_files,
                  "climbmix: train shards 0..n-1 (the val shard 06542 is always added); -1 = all 6542 (more is capped)")
      ->default_val(-1)->check(CLI::Range(-1, 1 << 30));
  sub->add_option("-w,--workers", f.workers, "parallel downloads")->default_val(4)->check(CLI::Range(1, 64));
  sub->add_option("--base-url", f.base_url, "where the shards are (a mirror): <base-url>/shard_00000.parquet")
      ->default_val(kClimbmixBaseUrl);
  sub->add_option("--url", f.url, "eval-bundle: the zip's URL (a mirror)")->default_val(kEvalBundleUrl);
  sub->add_option("--retry-delay", f.retry_delay, "seconds before the first retry; doubles each time (5 attempts)")
      ->default_val(2.0)->check(CLI::Range(0.0, 600.0));
  sub->add_option("--timeout", f.timeout, "seconds to connect, and of silence before a transfer is retried")
      ->default_val(30)->check(CLI::Range(1, 3600));
  sub->callback([&exit_code] {
    for (auto& t : kTargets)
      if (f.target == t.name) exit_code = t.run(f);
  });
}

}  // namespace nanochat
