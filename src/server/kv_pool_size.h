// How big each worker's KV pool is. The pool is allocated at start, all of it (zeroed, so
// every page is touched), and lives as long as the server: it must fit in what the device
// has free once the model is loaded, with a quarter left for the forward's activations and
// logits. Defaults shrink to fit (positions per row first, not below the model's
// sequence_len, then rows); a size asked for by flag that does not fit is an error naming
// the flag, not an out-of-memory kill once the rows fill up. Internal to the server module.
#pragma once
#include <cstdint>
#include <string>

namespace nanochat {

struct KVPoolSize {
  int64_t rows = 0;     // conversations (or samples) decoded together: --max-batch
  int64_t row_len = 0;  // KV positions per row, prompt and reply together: --kv-len
  int64_t bytes = 0;    // of all `pools` pools together
  bool shrunk = false;  // a default was cut to fit
};

// max_batch, kv_len: the flags (0: default: 8 rows on the CPU, 32 on CUDA; positions: on the
// CPU the model's limit within a 2 GiB pool, on CUDA its sequence_len). per_position: bytes of
// one position of one row (K and V, every layer). pools: pools sharing the device's memory
// (the CPU workers; one per GPU). free_bytes: what the device has free (< 0: unknown, no check).
// `where` names the device in the error.
KVPoolSize server_kv_pool_size(bool cuda, int64_t max_batch, int64_t kv_len, int64_t sequence_len,
                               int64_t max_positions, int64_t per_position, int64_t pools, int64_t free_bytes,
                               const std::string& where);

}  // namespace nanochat
