// `nanochat download climbmix` without its flags: the shards fanned out over a thread pool,
// each rank starting at its own offset, the errors of all workers gathered into one.
#include <algorithm>
#include <mutex>
#include <optional>

#include "nanochat/common.h"
#include "nanochat/dataset.h"
#include "nanochat/dist.h"

namespace nanochat {

struct DownloadMeter::Impl {
  std::mutex mutex;
  std::optional<Progress> progress;
  int files, known = 0;
  int64_t bytes = 0, known_total = 0;
};

DownloadMeter::DownloadMeter(int files) : impl_(std::make_unique<Impl>()) { impl_->files = files; }
DownloadMeter::~DownloadMeter() = default;

void DownloadMeter::add_bytes(int64_t delta) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> g(m.mutex);
  m.bytes += delta;
  if (!m.progress) m.progress.emplace("download", -1, "MB", 10.0);
  if (m.known > 0) m.progress->set_total((m.known_total + (m.files - m.known) * (m.known_total / m.known)) / 1000000);
  m.progress->set(m.bytes / 1000000);
}

void DownloadMeter::add_total(int64_t total) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> g(m.mutex);
  m.known_total += total, m.known += 1;
}

void DownloadMeter::finish() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> g(m.mutex);
  if (m.progress) m.progress->finish();
}

void download_climbmix_shards(int num_files, const std::string& base_url, int workers, const DownloadOptions& opts) {
  std::string dir = base_dir_path("base_data_climbmix");
  make_dirs(dir);
  // several ranks share the list: each starts at its own offset so they fetch different
  // shards at once; the file locks keep any shard to one download
  DistEnv env = dist_env_from_environment();
  std::vector<int> ids = climbmix_shard_ids(num_files);
  std::rotate(ids.begin(), ids.begin() + ids.size() * env.rank / env.world_size, ids.end());
  std::vector<int> todo;
  for (int id : ids)
    if (!path_exists(dir + "/" + climbmix_shard_name(id))) todo.push_back(id);
  log_info("download climbmix: %zu shard(s) (%zu already in %s) from %s with %d workers", ids.size(),
           ids.size() - todo.size(), dir.c_str(), base_url.c_str(), workers);

  DownloadMeter meter((int)todo.size());
  std::atomic<bool> cancel{false};
  std::mutex mutex;
  std::string unreachable, fatal, first_error;
  int failed = 0, downloaded = 0;
  Timer timer;
  {
    ThreadPool pool(std::max(1, std::min<int>(workers, (int)std::max<size_t>(todo.size(), 1))));
    std::vector<std::future<void>> jobs;
    for (int id : todo) {
      jobs.push_back(pool.submit([&, id] {
        DownloadOptions o = opts;
        o.verify = download_verify_parquet;
        o.cancel = &cancel;
        int64_t my_total = -1;
        o.on_bytes = [&](int64_t d) { meter.add_bytes(d); };
        o.on_total = [&](int64_t t) {
          if (my_total < 0) meter.add_total(my_total = t);
        };
        std::string url = climbmix_shard_url(base_url, id);
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
  log_info("done: %d downloaded, %zu were already there, in %s; shards in %s", downloaded, ids.size() - todo.size(),
           format_duration(timer.seconds()).c_str(), dir.c_str());
}

}  // namespace nanochat
