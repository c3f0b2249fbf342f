// Continuous batching (what llama-server's --parallel and vLLM do): one decode thread per
// device runs a batch of rows, and requests join and leave it at step boundaries.
//  - KV pool (src/engine/kv_slots.h): one KVCache of max_batch rows x row_len positions,
//    allocated once. Rows that decode are kept packed at the front (rows 0..B-1), each at its
//    own position (the attention module's per-row masked decode), so a step reads only live
//    rows and no cache is copied per step; a row that finishes swaps places with the last live one.
//  - A request takes as many rows as it has samples; it waits while the pool has too few
//    free rows, in its key's queue (submit's queue_key, wait_queues.h): free rows go to
//    the key served least recently, first come first served within a key, and each key has at
//    most max_queue requests waiting (a further one of that key is refused at once), so a key
//    that floods is refused and delayed alone. With max_rows_per_key a key is passed over while
//    it holds its share of the rows. Between two decode steps at most prefill_chunk prompt
//    tokens are prefilled, oldest request first (many short prompts join in one step, a long
//    one is spread over several, delaying the others by one chunk at a time), into one row,
//    copied to the request's other rows, and then the rows join the batch. Fresh prompts (no
//    KV reused) that arrive together go in one forward, padded to the longest.
//  - Each request samples with its own generator (seeded from its options) over its own rows
//    only, so a seeded request gives the same tokens whatever else runs (up to the float
//    rounding of a batched matmul); rows keep their own stop tokens, budget, calculator state.
//  - Prefix reuse: a free row keeps the tokens its KV holds (a finished request's prompt and
//    reply) and the request's cache_scope. A new request of the same scope whose prompt begins
//    with them takes that row and prefills only the rest; other scopes never see it (neither
//    in cached_tokens nor in time). Free rows are handed out empty ones first, then least
//    recently used.
// Callbacks run on the caller's thread (a slow client holds up only its own request); the
// decode thread queues token columns for it. A callback returning false, or `cancelled`
// returning true, cancels the request at the next step boundary.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/common/error.h"
#include "nanochat/engine.h"

namespace nanochat {

struct SchedulerOptions {
  int64_t max_batch = 8;                 // rows in the KV pool = rows decoded together
  int64_t row_len = 0;                   // positions per row; 0: the model's max_positions
  int64_t prefill_chunk = 128;           // prompt tokens prefilled between two decode steps, at most
  bool prefix_cache = true;              // reuse the KV of a finished request's tokens
  int64_t max_queue = int64_t(1) << 40;  // requests of one queue key that may wait for rows
  // rows one queue key may hold at once (0: no cap); while another key waits, half of
  // max_batch (at least 1). The server sets max_batch - 1, so a key never holds every row and
  // another key's request starts within a decode step of a row coming free. A request with
  // more samples than this is refused at submit.
  int64_t max_rows_per_key = 0;
};

// a request turned away at the door: max_queue requests of its key already wait (closed = false), or the
// scheduler takes no more (close_queue or shutdown: closed = true)
struct SchedulerRefused : Error {
  bool closed;
  SchedulerRefused(bool c, const std::string& m) : Error(m), closed(c) {}
};

struct SchedulerStats {
  int64_t running = 0;       // requests holding rows (prefilling or decoding)
  int64_t waiting = 0;       // requests waiting for rows
  int64_t rows_waiting = 0;  // rows those ask for
  int64_t rows_total = 0, rows_busy = 0, rows_cached = 0, row_len = 0;
  int64_t kv_bytes = 0;          // the pool's memory
  int64_t decode_steps = 0;      // batched forward passes of one token per row
  int64_t decode_rows = 0;       // rows summed over those steps (occupancy = rows / steps / rows_total)
  int64_t prefill_forwards = 0;  // forwards that put prompt tokens in (fresh prompts share one)
  double prefill_seconds = 0, decode_seconds = 0;  // time in those forwards, and in the decode steps' (sampling not)
  double sample_seconds = 0;  // time sampling the rows, handing out their tokens and dropping the finished ones
  int64_t tokens = 0;         // tokens generated
  int64_t prompt_tokens = 0, cached_tokens = 0;  // prompt positions asked for, and reused
  double tokens_per_s = 0;                       // over the last 10 s
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Engine> engine, SchedulerOptions options);
  ~Scheduler();  // shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A request in the scheduler, from the queue to its end; dropping it cancels the request.
  // It must not outlive its scheduler.
  class Ticket;
  // Checks a request (Engine::generate's checks, more samples than max_batch, prompt +
  // max_tokens past row_len: Error) and queues it in `queue_key`'s queue (fair admission: the
  // server's API key, or the client's address); SchedulerRefused when it cannot wait.
  std::shared_ptr<Ticket> submit(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                 const std::string& queue_key = "");
  // blocks until the request holds its rows (true), or left the queue without them: cancelled
  // (false) or refused by close_queue (SchedulerRefused). Error when the decode thread failed.
  bool wait_admitted(Ticket& ticket, const std::function<bool()>& cancelled = nullptr);
  // Engine::generate's contract (same columns and result) for a submitted request, served in
  // the shared batch; blocks until it ends. `cached_tokens` (optional) gets how many prompt
  // positions were reused. Error when the decode thread failed.
  GenerateResult run(Ticket& ticket, const TokenCallback& on_column = nullptr,
                     const std::function<bool()>& cancelled = nullptr, int64_t* cached_tokens = nullptr);
  // submit, then run
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const TokenCallback& on_column = nullptr, const std::function<bool()>& cancelled = nullptr,
                          int64_t* cached_tokens = nullptr);
  // takes no more requests: those waiting are refused, those holding rows run to their end
  void close_queue();
  // rows held or asked for by its requests (a request goes to the least loaded scheduler)
  int64_t load() const;
  SchedulerStats stats() const;
  int64_t row_len() const;
  const Engine& engine() const;
  // ends the decode thread: requests in it finish as cancelled, later ones fail
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanochat
