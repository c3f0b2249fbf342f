// `nanochat download [target]`: fetch named datasets into the base dir: climbmix (the
// pretraining shards, as upstream's nanochat/dataset.py; the fan-out lives in dataset),
// eval-bundle (the CORE bundle) and tasks (the chat task data). Every file goes through
// download_file (resume, verify, lock, retry).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/common.h"
#include "nanochat/core_eval.h"
#include "nanochat/dataset.h"
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
  int64_t max_file_bytes = DownloadOptions().max_file_bytes;
};

// the flags every target shares: retries, timeouts, the size cap
static DownloadOptions download_options(const DownloadFlags& f) {
  DownloadOptions o;
  o.retry_base_seconds = f.retry_delay;
  o.connect_timeout_seconds = o.read_timeout_seconds = f.timeout;
  o.max_file_bytes = f.max_file_bytes;
  return o;
}

static int download_climbmix(const DownloadFlags& f) {
  DownloadOptions o = download_options(f);
  download_climbmix_shards(f.num_files, f.base_url, f.workers, o);
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
  DownloadOptions o = download_options(f);
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
  log_info("done in %s: %zu CORE tasks in %s", format_duration(timer.seconds()).c_str(), core_bundle_load(dest).size(),
           dest.c_str());
  return 0;
}

// the chat task datasets (upstream's tasks/) through the hub's parquet listing API ($HF_ENDPOINT
// for a mirror), one split after the other, plus SpellingBee's word list
static int download_tasks(const DownloadFlags& f) {
  DownloadOptions o = download_options(f);
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
    {"eval-bundle", "the CORE eval bundle (22 DCLM tasks) -> $NANOCHAT_BASE_DIR/eval_bundle/", download_eval_bundle},
    {"tasks",
     "SFT / chat-eval datasets (SmolTalk, MMLU, GSM8K, ARC, HumanEval; $HF_ENDPOINT for a mirror) -> $NANOCHAT_BASE_DIR/task_data/",
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
      ->default_val(-1)
      ->check(CLI::Range(-1, 1 << 30));
  sub->add_option("-w,--workers", f.workers, "parallel downloads")->default_val(4)->check(CLI::Range(1, 64));
  sub->add_option("--base-url", f.base_url, "where the shards are (a mirror): <base-url>/shard_00000.parquet")
      ->default_val(kClimbmixBaseUrl);
  sub->add_option("--url", f.url, "eval-bundle: the zip's URL (a mirror)")->default_val(kEvalBundleUrl);
  sub->add_option("--retry-delay", f.retry_delay, "seconds before the first retry; doubles each time (5 attempts)")
      ->default_val(2.0)
      ->check(CLI::Range(0.0, 600.0));
  sub->add_option("--timeout", f.timeout, "seconds to connect, and of silence before a transfer is retried")
      ->default_val(30)
      ->check(CLI::Range(1, 3600));
  sub->add_option("--max-file-bytes", f.max_file_bytes,
                  "refuse any file larger than this (bytes, or with a unit: 500MB, 8GB); 0: no limit")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Validator(
          [](std::string& v) {
            return !v.empty() && v[0] == '-' ? std::string("must not be negative") : std::string();
          },
          "BYTES"))
      ->capture_default_str();
  sub->callback([&exit_code] {
    for (auto& t : kTargets)
      if (f.target == t.name) exit_code = t.run(f);
  });
}

}  // namespace nanochat
