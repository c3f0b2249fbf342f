// The workers: one scheduler each (one per GPU, or --workers on the CPU sharing one model),
// their KV pools sized to fit the device.
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/kv_pool_size.h"
#include "server/state.h"

namespace nanochat {

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
  const KVPoolSize kv = server_kv_pool_size(cuda, o.max_batch, o.kv_len, m.sequence_len, m.max_positions, per_position,
                                            cuda ? 1 : n, free_bytes, where);
  if (kv.shrunk)
    log_info("chat-web: KV pool cut to %lld rows x %lld positions per worker to fit in 3/4 of the %.1f GiB free on %s",
             (long long)kv.rows, (long long)kv.row_len, free_bytes / double(int64_t(1) << 30), where.c_str());
  SchedulerOptions so;
  so.max_batch = kv.rows;
  so.row_len = kv.row_len;
  so.prefix_cache = o.prefix_cache;
  so.max_queue = o.max_queue;
  so.max_rows_per_key = kv.rows > 1 ? kv.rows - 1 : 0;  // one row always left for another client
  std::vector<ServerWorker> workers;
  for (int i = 0; i < n; i++) {
    std::shared_ptr<const Engine> e = engines[cuda ? i : 0];
    workers.push_back({i, cuda ? strprintf("cuda:%d", i) : "cpu", e, std::make_shared<Scheduler>(e, so)});
  }
  st.workers = std::move(workers);
}

}  // namespace nanochat
