// The decode thread's loop, one iteration per step boundary:
//   admit waiting requests that fit, in the waiting room's turns (wait_queues.h), into the KV
//   slot pool (kv_slots.h: rows, prefix match) -> prefill up to prefill_chunk
//   prompt tokens, oldest request first (rows join once their prompt is in) -> sample every live row (per
//   request, its own generator) and hand the columns to the callers -> drop finished rows
//   (swap with the last live row) -> one batched decode forward over the live rows.
// Live rows are slots 0..live-1 of the pool, `logits` and `feed` are aligned with them.
#include "nanochat/engine/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <ATen/ATen.h>

#include "engine/kv_slots.h"
#include "engine/row_state.h"
#include "engine/wait_queues.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"

namespace nanochat {

namespace {

using clk = std::chrono::steady_clock;

// a request from the waiting room (its key, the rows it needs) through the slot pool (its slots, scope) to its end
struct Request : WaitingRequest, SlotHolder, std::enable_shared_from_this<Request> {
  std::vector<int32_t> prompt;
  GenerateOptions opt;
  std::vector<RowState> rows;
  at::Generator rng;
  int64_t prefilled = 0;   // prompt positions in row 0's slot
  int64_t cached = 0;      // of which reused
  bool need_prev = false;  // a partly reused row: the smear's input is recomputed
  int64_t steps = 0;
  // shared with the caller, under Impl::mu
  std::deque<TokenColumn> out;
  bool admitted = false;  // holds its rows (or needs none)
  bool refused = false;   // left the queue by close_queue
  bool finished = false;
  std::string error;
  std::atomic<bool> cancel{false};
  std::condition_variable cv;
};

Request& as_request(WaitingRequest& w) { return static_cast<Request&>(w); }
Request* holder_request(SlotHolder* h) { return static_cast<Request*>(h); }

// Wakes the callers whose requests got a column, on a thread of its own: the decode thread hands
// it a step's requests and goes on to the forward. Woken by the decode thread itself, 16 callers
// cost it ~60 us a step, and more where a woken caller took its core.
class Waker {
 public:
  Waker() : thread_([this] { loop(); }) {}
  ~Waker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void wake(std::vector<std::shared_ptr<Request>>& rs) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.insert(pending_.end(), rs.begin(), rs.end());
    }
    rs.clear();
    cv_.notify_one();
  }

 private:
  void loop() {
    std::vector<std::shared_ptr<Request>> now;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, every wake-up made
      now.swap(pending_);
      lock.unlock();
      for (auto& r : now) r->cv.notify_all();
      now.clear();  // (the last references to finished requests may go here)
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Request>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

struct Scheduler::Impl {
  std::shared_ptr<const Engine> engine;
  SchedulerOptions opt;
  EngineModel model;
  ToolTokens tools;
  KvSlots kv;                 // the pool; its slots 0..kv.live-1 decode
  torch::Tensor logits;       // (live, V) after a forward or a join
  std::vector<int64_t> feed;  // (live) tokens for the next forward

  mutable std::mutex mu;
  std::condition_variable work;
  WaitQueues waiting;                               // waiting for rows, one queue per key
  std::deque<std::shared_ptr<Request>> prefilling;  // rows held, prompt going in
  std::vector<std::shared_ptr<Request>> decoding;   // rows in the batch
  bool stop = false;
  bool closed = false;  // close_queue: no more requests
  std::thread thread;
  Waker waker;                                  // wakes the callers a step's columns went to
  std::vector<std::shared_ptr<Request>> woken;  // (the decode thread's list for it)

  // stats (written by the decode thread under mu)
  SchedulerStats st;
  std::deque<std::pair<clk::time_point, int64_t>> rate;  // (time, tokens so far)
  double sample_seconds_pending = 0;                     // sample_step's time, not yet in st (the decode thread's own)

  static int64_t pool_rows(const SchedulerOptions& o) { return std::max<int64_t>(o.max_batch, 1); }
  static int64_t pool_len(const SchedulerOptions& o, const EngineModel& m) {
    return o.row_len > 0 ? std::min(o.row_len, m.max_positions) : m.max_positions;
  }

  Impl(std::shared_ptr<const Engine> e, SchedulerOptions o)
      : engine(std::move(e)),
        opt(o),
        model(engine->model()),
        tools(engine_tool_tokens(engine->tokenizer())),
        kv(model, pool_rows(o), pool_len(o, model), o.prefix_cache) {
    if (opt.max_batch < 1) fail("scheduler: max_batch must be >= 1, got %lld", (long long)opt.max_batch);
    if (opt.prefill_chunk < 1) fail("scheduler: prefill_chunk must be >= 1");
    opt.row_len = kv.pool.max_seq_len();
    st.rows_total = opt.max_batch;
    st.row_len = opt.row_len;
    st.kv_bytes = (int64_t)(2 * kv.pool.k_cache.numel() * kv.pool.k_cache.element_size());
    thread = std::thread([this] { loop(); });
  }

  void admit(const std::shared_ptr<Request>& r) {
    bool need_prev = false;
    const int64_t reuse = kv.take(*r, (int64_t)r->rows.size(), r->prompt, (bool)model.embed, need_prev);
    r->need_prev = need_prev;
    r->prefilled = r->cached = reuse;
    st.prompt_tokens += (int64_t)r->prompt.size();
    st.cached_tokens += reuse;
    r->admitted = true;
    r->cv.notify_all();
  }

  // rows held or asked for by the requests here (under mu): how loaded the scheduler is
  int64_t load() const {
    int64_t n = waiting.rows();
    for (auto& r : prefilling) n += (int64_t)r->rows.size();
    for (auto& r : decoding) n += (int64_t)r->rows.size();
    return n;
  }

  void count_waiting() {
    st.waiting = waiting.size();
    st.rows_waiting = waiting.rows();
  }

  // ---- the request's side of the queue (under mu) ---------------------------------------------
  // the caller's check whether its client is gone, asked with mu released (it may touch a
  // socket); a yes marks the request for the decode thread to end
  void poll_cancel(Request& r, std::unique_lock<std::mutex>& lock, const std::function<bool()>& cancelled) {
    if (r.cancel || !cancelled) return;
    lock.unlock();
    const bool stop_it = cancelled();
    lock.lock();
    if (stop_it) {
      r.cancel = true;
      work.notify_all();
    }
  }

  // The one way a request ends: rows still running finish as `cancelled`, slots it still
  // holds go back to the pool (their KV not kept), `error` (the decode thread failed) is what
  // its caller gets, and the caller wakes. Taking it off its queue is the caller's part.
  void end_request(Request& r, const std::string& error = "") {
    for (RowState& row : r.rows)
      if (row.finish == FinishReason::none) row.finish = FinishReason::cancelled;
    for (int64_t& s : r.slot)
      if (s >= 0) kv.release(s, {}), s = -1;
    r.error = error;
    r.finished = true;
    r.cv.notify_all();
  }

  // ---- one step ---------------------------------------------------------------------------
  torch::Tensor ids(const std::vector<int64_t>& v, int64_t rows) {
    return torch::tensor(v, torch::kLong).view({rows, -1}).to(model.device);
  }

  // the prompt is in (its logits `last`, (1,V)): its other rows get a copy, and every
  // unfinished row joins the batch
  void join_batch(const std::shared_ptr<Request>& r, const torch::Tensor& last) {
    const int64_t T = (int64_t)r->prompt.size();
    for (size_t i = 1; i < r->slot.size(); i++) kv.copy(r->slot[0], r->slot[i], T);
    std::vector<torch::Tensor> joined = {};
    if (logits.defined() && kv.live > 0) joined.push_back(logits.narrow(0, 0, kv.live));
    for (size_t i = 0; i < r->rows.size(); i++) {
      if (r->rows[i].finish != FinishReason::none) {  // a budget of 0: never decodes
        kv.release(r->slot[i], {});
        r->slot[i] = -1;
        continue;
      }
      kv.swap(r->slot[i], kv.live);
      feed.resize(kv.live + 1);
      kv.live++;
      joined.push_back(last);
    }
    logits = at::cat(joined, 0);
    std::lock_guard<std::mutex> lock(mu);
    prefilling.erase(std::find(prefilling.begin(), prefilling.end(), r));
    decoding.push_back(r);
  }

  void count_prefill_forward(clk::time_point start) {
    const double seconds = std::chrono::duration<double>(clk::now() - start).count();
    std::lock_guard<std::mutex> lock(mu);
    st.prefill_forwards++;
    st.prefill_seconds += seconds;
  }

  // up to `budget` more prompt tokens of r; returns how many
  int64_t prefill_chunk(std::shared_ptr<Request> r, int64_t budget) {  // a copy: it leaves `prefilling`
    const int64_t T = (int64_t)r->prompt.size(), s0 = r->slot[0];
    const int64_t c = std::min(budget, T - r->prefilled);
    KVCache view = kv.pool.view_rows(s0, 1, r->prefilled);
    if (r->prefilled > 0 && r->need_prev) view.prev_embedding = model.embed(ids({r->prompt[r->prefilled - 1]}, 1));
    else if (r->prefilled > 0 && kv.prev.defined()) view.prev_embedding = kv.prev.narrow(0, s0, 1).clone();
    r->need_prev = false;
    std::vector<int64_t> chunk(r->prompt.begin() + r->prefilled, r->prompt.begin() + r->prefilled + c);
    const clk::time_point start = clk::now();
    torch::Tensor lg = engine_forward_last(model, ids(chunk, 1), view, {c - 1});  // (1,V)
    count_prefill_forward(start);
    kv.store_prev(s0, view.prev_embedding);
    r->prefilled += c;
    kv.slots[s0].pos = r->prefilled;
    if (r->prefilled == T) join_batch(r, lg);
    return c;
  }

  // Fresh prompts at the front of `prefilling` (none of their KV reused) that fit the budget
  // whole go in one forward: their first rows moved next to the live ones (slots live..live+n-1),
  // each padded to the longest with its last token. Padding sits after a prompt's own positions,
  // so causal attention keeps it out of them, and its KV is overwritten by decode (a row reads
  // only its first pos keys); the smear's input the forward leaves (the last position's
  // embedding) is the last token's. At most a third of the forward's tokens are padding.
  // Returns the tokens the forward ran (0: fewer than two such prompts; they go one by one).
  int64_t prefill_together(int64_t budget) {
    std::vector<std::shared_ptr<Request>> batch;
    int64_t longest = 0, real = 0;
    for (const auto& r : prefilling) {
      const int64_t T = (int64_t)r->prompt.size(), L = std::max(longest, T);
      const int64_t padded = L * (int64_t)(batch.size() + 1);
      if (r->prefilled > 0 || padded > budget || 2 * padded > 3 * (real + T)) break;
      batch.push_back(r);
      longest = L;
      real += T;
    }
    const int64_t n = (int64_t)batch.size(), first = kv.live;
    if (n < 2) return 0;
    std::vector<int64_t> ids_padded;
    for (int64_t i = 0; i < n; i++) {
      kv.swap(batch[i]->slot[0], first + i);
      const std::vector<int32_t>& p = batch[i]->prompt;
      ids_padded.insert(ids_padded.end(), p.begin(), p.end());
      ids_padded.insert(ids_padded.end(), longest - (int64_t)p.size(), p.back());
    }
    std::vector<int64_t> last(n);  // each prompt's last position
    for (int64_t i = 0; i < n; i++) last[i] = (int64_t)batch[i]->prompt.size() - 1;
    KVCache view = kv.pool.view_rows(first, n, 0);
    const clk::time_point start = clk::now();
    torch::Tensor lg = engine_forward_last(model, ids(ids_padded, n), view, last);  // (n,V)
    count_prefill_forward(start);
    kv.store_prev(first, view.prev_embedding);
    for (int64_t i = 0; i < n; i++) {
      const int64_t T = (int64_t)batch[i]->prompt.size();
      batch[i]->prefilled = T;
      kv.slots[first + i].pos = T;
    }
    for (int64_t i = 0; i < n; i++) join_batch(batch[i], lg.narrow(0, i, 1));
    return longest * n;
  }

  // samples every live row (one pass, one read-back) and hands out the columns
  void sample_live_rows() {
    std::map<Request*, std::vector<int64_t>> by_req;  // request -> its live slots, in row order
    for (int64_t b = 0; b < kv.live; b++) by_req[holder_request(kv.slots[b].holder)].push_back(b);
    std::vector<SampleRequest> asks;
    std::vector<Request*> asking;  // the request of each ask (cancel is read once: both loops agree)
    for (auto& [r, bs] : by_req) {
      std::sort(bs.begin(), bs.end(), [&](int64_t x, int64_t y) { return kv.slots[x].row < kv.slots[y].row; });
      if (r->cancel) {
        for (int64_t b : bs) r->rows[kv.slots[b].row].finish = FinishReason::cancelled;
        continue;
      }
      asks.push_back({bs, r->opt.temperature, r->opt.top_k, r->opt.top_p, &r->rng});
      asking.push_back(r);
    }
    const std::vector<int64_t> drawn = engine_sample_rows(logits, asks);
    std::vector<TokenColumn> cols(asks.size());
    int64_t tokens = 0;
    for (size_t k = 0; k < asks.size(); k++) {
      Request* r = asking[k];
      const std::vector<int64_t>& bs = asks[k].rows;
      std::vector<int64_t> mine(bs.size()), which(bs.size()), took;
      for (size_t i = 0; i < bs.size(); i++) mine[i] = drawn[bs[i]], which[i] = kv.slots[bs[i]].row;
      torch::Tensor lg;  // the request's logits, for its log-probs
      if (r->opt.logprobs) lg = logits.index_select(0, torch::tensor(bs, torch::kLong).to(logits.device()));
      cols[k] = engine_column_step(r->rows, which, mine.data(), lg, r->steps, r->opt, engine->tokenizer(), tools, took);
      for (size_t i = 0; i < bs.size(); i++) feed[bs[i]] = took[i];
      r->steps++;
      tokens += (int64_t)bs.size();
    }
    // every column handed out under one lock, the waiting threads woken after it by the waker
    // (woken one by one under the lock, each took it back from this loop in turn: 16 rows ~0.2 ms
    // a step; by this thread after it, ~60 us)
    {
      std::lock_guard<std::mutex> lock(mu);
      for (size_t k = 0; k < asks.size(); k++) asking[k]->out.push_back(std::move(cols[k]));
      st.tokens += tokens;
    }
    for (Request* r : asking) woken.push_back(r->shared_from_this());
    waker.wake(woken);
  }

  // samples, then drops the rows that finished (last first, so a swap only moves a row
  // already sampled) and ends the requests with none left
  void sample_step() {
    const clk::time_point start = clk::now();
    sample_live_rows();
    const int64_t live_before = kv.live;
    for (int64_t b = kv.live - 1; b >= 0; b--) {
      Request* r = holder_request(kv.slots[b].holder);
      const int64_t row = kv.slots[b].row;
      if (r->rows[row].finish == FinishReason::none) continue;
      kv.swap(b, kv.live - 1);
      feed[b] = feed[kv.live - 1];
      kv.live--;
      r->slot[row] = -1;
      kv.release(kv.live, r->rows[row].tokens);
    }
    feed.resize(kv.live);
    logits = torch::Tensor();
    const double seconds = std::chrono::duration<double>(clk::now() - start).count();
    // only a row that finished can end a request: most steps go on to the forward without the
    // lock, which the threads just woken are taking to read their columns (the time is counted
    // under the next lock this thread takes)
    sample_seconds_pending += seconds;
    if (kv.live == live_before) return;
    std::lock_guard<std::mutex> lock(mu);
    st.sample_seconds += sample_seconds_pending;
    sample_seconds_pending = 0;
    for (auto it = decoding.begin(); it != decoding.end();) {
      Request& r = **it;
      if (std::all_of(r.slot.begin(), r.slot.end(), [](int64_t s) { return s < 0; })) {
        end_request(r);
        it = decoding.erase(it);
      } else {
        ++it;
      }
    }
  }

  void decode_forward() {
    const int64_t live = kv.live;
    KVCache view = kv.pool.view_rows(0, live, 0);
    std::vector<int64_t> pos(live);
    for (int64_t b = 0; b < live; b++) pos[b] = kv.slots[b].pos;
    view.set_row_positions(pos);
    if (kv.prev.defined()) view.prev_embedding = kv.prev.narrow(0, 0, live);
    const clk::time_point start = clk::now();
    logits = model.forward(ids(feed, live), view).select(1, 0);  // (live, V)
    const double seconds = std::chrono::duration<double>(clk::now() - start).count();
    kv.store_prev(0, view.prev_embedding);
    for (int64_t b = 0; b < live; b++) kv.slots[b].pos++;
    std::lock_guard<std::mutex> lock(mu);
    st.decode_steps++;
    st.decode_rows += live;
    st.decode_seconds += seconds;
    st.sample_seconds += sample_seconds_pending;
    sample_seconds_pending = 0;
    const auto now = clk::now();
    rate.emplace_back(now, st.tokens);
    while (rate.size() > 2 && now - rate.front().first > std::chrono::seconds(10)) rate.pop_front();
  }

  // requests cancelled before they joined the batch leave here (their rows never decoded)
  void drop_cancelled_waiting() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& w :
         waiting.remove_if([](const WaitingRequest& w) { return static_cast<const Request&>(w).cancel.load(); }))
      end_request(as_request(*w));
    for (auto it = prefilling.begin(); it != prefilling.end();) {
      if (!(*it)->cancel) {
        ++it;
        continue;
      }
      end_request(**it);
      it = prefilling.erase(it);
    }
  }

  // every request still here ends (shutdown; or with `error` when the decode thread failed)
  void end_all(const std::string& error) {
    for (auto& w : waiting.take_all()) end_request(as_request(*w), error);
    for (auto& r : prefilling) end_request(*r, error);
    for (auto& r : decoding) end_request(*r, error);
    prefilling.clear();
    decoding.clear();
  }

  // the decode thread failed: every request gets the error, the pool starts over empty
  void fail_all(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    end_all(what);
    kv.clear();
    feed.clear();
    logits = torch::Tensor();
  }

  // rows the requests of `key` hold now (under mu)
  int64_t rows_held(const std::string& key) const {
    int64_t n = 0;
    for (auto& r : prefilling)
      if (r->key == key) n += (int64_t)r->rows.size();
    for (auto& r : decoding)
      if (r->key == key) n += std::count_if(r->slot.begin(), r->slot.end(), [](int64_t s) { return s >= 0; });
    return n;
  }

  // whether a request's key may take its rows now: within max_rows_per_key, or half the
  // rows while another key waits (under mu)
  bool within_key_share(const WaitingRequest& w) const {
    if (opt.max_rows_per_key <= 0) return true;
    const int64_t share = waiting.others_wait(w.key) ? std::max<int64_t>(1, opt.max_batch / 2) : opt.max_rows_per_key;
    return rows_held(w.key) + w.rows_needed <= std::max(share, w.rows_needed);
  }

  // waiting requests get rows while they fit, in the waiting room's turns (under mu)
  void admit_waiting() {
    const WaitQueues::Admissible share = [this](const WaitingRequest& w) { return within_key_share(w); };
    while (waiting.next(share) && waiting.next(share)->rows_needed <= kv.free_count()) {
      std::shared_ptr<Request> r = std::static_pointer_cast<Request>(waiting.pop_next(share));
      if (r->cancel) {
        end_request(*r);
        continue;
      }
      admit(r);
      prefilling.push_back(r);
    }
    count_waiting();
  }

  void count_step() {
    std::lock_guard<std::mutex> lock(mu);
    st.running = (int64_t)(prefilling.size() + decoding.size());
    count_waiting();
    st.rows_busy = st.rows_cached = 0;
    for (const PoolSlot& s : kv.slots) {
      st.rows_busy += s.holder != nullptr;
      st.rows_cached += s.holder == nullptr && !s.tokens.empty();
    }
  }

  void loop() {
    torch::NoGradGuard no_grad;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        work.wait(lock, [&] { return stop || waiting.size() > 0 || !prefilling.empty() || kv.live > 0; });
        if (stop) break;
        admit_waiting();
      }
      try {
        drop_cancelled_waiting();
        // prompts go in, oldest first, up to prefill_chunk tokens per step: many short
        // prompts join together (fresh ones in one forward), a long one is spread over several steps
        for (int64_t budget = opt.prefill_chunk, used = 0; budget > 0 && !prefilling.empty(); budget -= used) {
          used = prefill_together(budget);
          if (used > 0) continue;
          // a prompt that fits one step whole waits for the next rather than split
          const int64_t rest = (int64_t)prefilling.front()->prompt.size() - prefilling.front()->prefilled;
          if (rest > budget && rest <= opt.prefill_chunk) break;
          used = prefill_chunk(prefilling.front(), budget);
        }
        if (kv.live > 0) sample_step();
        if (kv.live > 0) decode_forward();
      } catch (const std::exception& e) {
        fail_all(e.what());
      }
      count_step();
    }
    // shutting down: everything still here ends as cancelled
    std::lock_guard<std::mutex> lock(mu);
    end_all("");
  }
};

Scheduler::Scheduler(std::shared_ptr<const Engine> engine, SchedulerOptions options)
    : impl_(std::make_unique<Impl>(std::move(engine), options)) {}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->work.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int64_t Scheduler::row_len() const { return impl_->opt.row_len; }
const Engine& Scheduler::engine() const { return *impl_->engine; }

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SchedulerStats s = impl_->st;
  if (impl_->rate.size() >= 2) {
    const auto& a = impl_->rate.front();
    const auto& b = impl_->rate.back();
    const double secs = std::chrono::duration<double>(b.first - a.first).count();
    const bool recent = clk::now() - b.first < std::chrono::seconds(10);
    if (secs > 0 && recent) s.tokens_per_s = (double)(b.second - a.second) / secs;
  }
  return s;
}

// a request from its queue to its end; a ticket dropped before the end cancels it
class Scheduler::Ticket {
 public:
  Ticket(Scheduler::Impl* im, std::shared_ptr<Request> r) : im_(im), r_(std::move(r)) {}
  ~Ticket() {
    {
      std::lock_guard<std::mutex> lock(im_->mu);
      if (r_->finished) return;
      r_->cancel = true;
    }
    im_->work.notify_all();
  }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;

 private:
  friend class Scheduler;
  Scheduler::Impl* im_;
  std::shared_ptr<Request> r_;
};

namespace {
const char* const kClosed = "generate: the scheduler takes no more requests (shutting down)";
}

std::shared_ptr<Scheduler::Ticket> Scheduler::submit(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                                     const std::string& queue_key) {
  Impl& im = *impl_;
  auto r = std::make_shared<Request>();
  int64_t longest = 0;
  r->rows = engine_rows_init(prompt, options, im.model, im.engine->tokenizer(), im.opt.row_len, longest);
  if ((int64_t)r->rows.size() > im.opt.max_batch)
    fail("generate: %zu samples exceed the %lld rows decoded together (--max-batch)", r->rows.size(),
         (long long)im.opt.max_batch);
  if (im.opt.max_rows_per_key > 0 && (int64_t)r->rows.size() > im.opt.max_rows_per_key)
    fail(
        "generate: %zu samples exceed the %lld rows one client may hold at once (--max-batch %lld less one, kept "
        "for other clients)",
        r->rows.size(), (long long)im.opt.max_rows_per_key, (long long)im.opt.max_batch);
  r->prompt = prompt;
  r->opt = options;
  r->key = queue_key;
  r->scope = options.cache_scope;
  r->rows_needed = (int64_t)r->rows.size();
  if (longest == 0) {  // no row decodes: done at once
    r->admitted = r->finished = true;
    return std::make_shared<Ticket>(&im, r);
  }
  r->rng = gpt_make_generator(im.model.device, options.seed);
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (im.stop || im.closed) throw SchedulerRefused(true, kClosed);
    im.waiting.push(r);
    // bounded per key: a key that floods fills its own queue, not its neighbours'
    if (const int64_t waiting = im.waiting.blocked(r->key, im.kv.free_count()); waiting > im.opt.max_queue) {
      im.waiting.pop_back(r->key);
      throw SchedulerRefused(false,
                             strprintf("generate: %lld requests of this client already wait for rows (--max-queue)",
                                       (long long)waiting - 1));
    }
    im.count_waiting();
  }
  im.work.notify_all();
  return std::make_shared<Ticket>(&im, r);
}

bool Scheduler::wait_admitted(Ticket& ticket, const std::function<bool()>& cancelled) {
  Impl& im = *impl_;
  Request& r = *ticket.r_;
  std::unique_lock<std::mutex> lock(im.mu);
  while (!r.admitted) {
    if (r.finished) {
      if (!r.error.empty()) fail("generate: %s", r.error.c_str());
      if (r.refused) throw SchedulerRefused(true, kClosed);
      return false;
    }
    im.poll_cancel(r, lock, cancelled);
    r.cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return r.admitted || r.finished; });
  }
  return true;
}

void Scheduler::close_queue() {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  im.closed = true;
  for (auto& w : im.waiting.take_all()) {
    as_request(*w).refused = true;
    im.end_request(as_request(*w));
  }
  im.count_waiting();
}

int64_t Scheduler::load() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->load();
}

GenerateResult Scheduler::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                   const TokenCallback& on_column, const std::function<bool()>& cancelled,
                                   int64_t* cached_tokens) {
  std::shared_ptr<Ticket> ticket = submit(prompt, options);
  return run(*ticket, on_column, cancelled, cached_tokens);
}

GenerateResult Scheduler::run(Ticket& ticket, const TokenCallback& on_column, const std::function<bool()>& cancelled,
                              int64_t* cached_tokens) {
  Impl& im = *impl_;
  Request& r = *ticket.r_;
  if (cached_tokens) *cached_tokens = 0;
  std::unique_lock<std::mutex> lock(im.mu);
  bool listening = true;  // the callback has not asked to stop
  while (true) {
    while (!r.out.empty()) {
      TokenColumn col = std::move(r.out.front());
      r.out.pop_front();
      if (!listening || !on_column) continue;
      lock.unlock();
      const bool more = on_column(col);
      lock.lock();
      if (!more) {
        listening = false;
        r.cancel = true;
        im.work.notify_all();
      }
    }
    if (r.finished) break;
    im.poll_cancel(r, lock, cancelled);
    r.cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return r.finished || !r.out.empty(); });
  }
  lock.unlock();
  if (!r.error.empty()) fail("generate: %s", r.error.c_str());
  if (r.refused) throw SchedulerRefused(true, kClosed);
  if (cached_tokens) *cached_tokens = r.cached;
  return engine_rows_result(r.rows, (int64_t)r.prompt.size(), r.steps);
}

}  // namespace nanochat
