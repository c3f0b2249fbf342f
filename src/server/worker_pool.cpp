// defines: WorkerPool, server_workers_setup
// First come, first served: each acquire() takes a ticket; a freed worker goes to the oldest
// ticket, so a burst of requests cannot starve an earlier one (a plain condition variable
// wakes waiters in no particular order).
#include "nanochat/server.h"

#include <algorithm>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/kv_pool_size.h"
#include "server/server_state.h"

namespace nanochat {

WorkerPool::WorkerPool(int num_workers, int max_queue) : busy_(num_workers, false), max_queue_(max_queue) {}

int WorkerPool::acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  if (shutdown_ || (int)tickets_.size() >= max_queue_) return -1;
  const uint64_t ticket = next_ticket_++;
  tickets_.push_back(ticket);
  int worker = -1;
  cv_.wait(lock, [&] {
    if (shutdown_) return true;
    if (tickets_.front() != ticket) return false;
    for (size_t i = 0; i < busy_.size(); i++)
      if (!busy_[i]) {
        worker = (int)i;
        return true;
      }
    return false;
  });
  for (auto it = tickets_.begin(); it != tickets_.end(); ++it)
    if (*it == ticket) {
      tickets_.erase(it);
      break;
    }
  if (shutdown_) worker = -1;
  if (worker >= 0) busy_[worker] = true;
  cv_.notify_all();  // the next ticket is now at the front
  return worker;
}

void WorkerPool::release(int worker) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_[worker] = false;
  }
  cv_.notify_all();
}

void WorkerPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

int WorkerPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (int)tickets_.size();
}

int WorkerPool::idle_groups(int groups) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> busy(groups, false);
  for (size_t i = 0; i < busy_.size(); i++)
    if (busy_[i]) busy[i % groups] = true;
  int n = 0;
  for (bool b : busy) n += !b;
  return n;
}

void server_workers_setup(ServerState& st, const std::vector<std::shared_ptr<const Engine>>& engines) {
  const ServerOptions& o = st.opt;
  const bool cuda = o.device_type == "cuda";
  const int n = cuda ? o.num_gpus : o.workers;
  const EngineModel& m = engines[0]->model();
  const KVCache probe = m.make_cache(1, 1);
  const int64_t per_position = 2 * probe.k_cache.numel() * (int64_t)probe.k_cache.element_size();
  // each GPU holds one pool, the CPU one per worker: size them by the device with the least free
  int64_t free_bytes = -1;
  std::string where = "this machine (MemAvailable)";
  for (const auto& e : engines) {
    const int64_t f = device_free_memory_bytes(e->model().device);
    if (f < 0 || (free_bytes >= 0 && f >= free_bytes)) continue;
    free_bytes = f;
    if (cuda) where = e->model().device.str();
  }
  const KVPoolSize kv = server_kv_pool_size(cuda, o.max_batch, o.kv_len, m.sequence_len, m.max_positions,
                                            per_position, cuda ? 1 : n, free_bytes, where);
  if (kv.shrunk)
    log_info("chat-web: KV pool cut to %lld rows x %lld positions per worker to fit in 3/4 of the %.1f GiB free on %s",
             (long long)kv.rows, (long long)kv.row_len, free_bytes / double(int64_t(1) << 30), where.c_str());
  SchedulerOptions so;
  so.max_batch = kv.rows;
  so.row_len = kv.row_len;
  so.prefix_cache = o.prefix_cache;
  std::vector<ServerWorker> workers;
  for (int i = 0; i < n; i++) {
    std::shared_ptr<const Engine> e = engines[cuda ? i : 0];
    workers.push_back({i, cuda ? strprintf("cuda:%d", i) : "cpu", e, std::make_shared<Scheduler>(e, so)});
  }
  st.workers = std::move(workers);
  st.pool = std::make_unique<WorkerPool>((int)(st.workers.size() * so.max_batch), o.max_queue);
}

}  // namespace nanochat
