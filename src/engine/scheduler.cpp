// defines: Scheduler
// The decode thread's loop, one iteration per step boundary:
//   admit waiting requests that fit (rows, prefix match) -> prefill up to prefill_chunk
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

#include "engine/row_state.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"

namespace nanochat {

namespace {

using clk = std::chrono::steady_clock;

struct Request {
  std::vector<int32_t> prompt;
  GenerateOptions opt;
  std::vector<RowState> rows;
  at::Generator rng;
  std::vector<int64_t> slot;  // the pool slot of each row, -1 once it left
  int64_t prefilled = 0;      // prompt positions in row 0's slot
  int64_t cached = 0;         // of which reused
  bool need_prev = false;     // a partly reused row: the smear's input is recomputed
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

struct Slot {
  Request* req = nullptr;  // the owner, or null (free)
  int64_t row = -1;
  int64_t pos = 0;               // positions whose KV the slot holds
  std::vector<int32_t> tokens;   // a free slot: the tokens of those positions (prefix cache)
  std::string scope;             // ... and the cache scope of the request that left them
  uint64_t used = 0;             // when it was last freed or hit (LRU)
};

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t n = 0, m = (int64_t)std::min(a.size(), b.size());
  while (n < m && a[n] == b[n]) n++;
  return n;
}

}  // namespace

struct Scheduler::Impl {
  std::shared_ptr<const Engine> engine;
  SchedulerOptions opt;
  EngineModel model;
  ToolTokens tools;
  KVCache pool;
  torch::Tensor prev;  // (R,1,C) the smear's input per slot, allocated at the first forward
  std::vector<Slot> slots;
  int64_t live = 0;
  torch::Tensor logits;       // (live, V) after a forward or a join
  std::vector<int64_t> feed;  // (live) tokens for the next forward
  uint64_t tick = 0;

  mutable std::mutex mu;
  std::condition_variable work;
  std::deque<std::shared_ptr<Request>> incoming;     // waiting for rows
  std::deque<std::shared_ptr<Request>> prefilling;   // rows held, prompt going in
  std::vector<std::shared_ptr<Request>> decoding;    // rows in the batch
  bool stop = false;
  bool closed = false;  // close_queue: no more requests
  std::thread thread;

  // stats (written by the decode thread under mu)
  SchedulerStats st;
  std::deque<std::pair<clk::time_point, int64_t>> rate;  // (time, tokens so far)

  Impl(std::shared_ptr<const Engine> e, SchedulerOptions o)
      : engine(std::move(e)), opt(o), model(engine->model()), tools(engine_tool_tokens(engine->tokenizer())),
        pool(model.make_cache(std::max<int64_t>(o.max_batch, 1),
                              o.row_len > 0 ? std::min(o.row_len, model.max_positions) : model.max_positions)) {
    if (opt.max_batch < 1) fail("scheduler: max_batch must be >= 1, got %lld", (long long)opt.max_batch);
    if (opt.prefill_chunk < 1) fail("scheduler: prefill_chunk must be >= 1");
    opt.row_len = pool.max_seq_len();
    slots.resize(opt.max_batch);
    st.rows_total = opt.max_batch;
    st.row_len = opt.row_len;
    st.kv_bytes = (int64_t)(2 * pool.k_cache.numel() * pool.k_cache.element_size());
    thread = std::thread([this] { loop(); });
  }

  // ---- slots ----------------------------------------------------------------------------
  void swap_slots(int64_t a, int64_t b) {
    if (a == b) return;
    const int64_t len = std::max(slots[a].pos, slots[b].pos);
    if (len > 0) {
      auto dev = pool.k_cache.device();
      torch::Tensor from = torch::tensor({a, b}, torch::kLong).to(dev), to = torch::tensor({b, a}, torch::kLong).to(dev);
      for (torch::Tensor* c : {&pool.k_cache, &pool.v_cache}) {
        torch::Tensor used = c->narrow(2, 0, len);
        used.index_copy_(1, to, used.index_select(1, from));
      }
      if (prev.defined()) prev.index_copy_(0, to, prev.index_select(0, from));
    }
    std::swap(slots[a], slots[b]);
    for (int64_t s : {a, b})
      if (slots[s].req) slots[s].req->slot[slots[s].row] = s;
  }

  // copies slot `from`'s first n positions (and its smear input) into slot `to`
  void copy_slot(int64_t from, int64_t to, int64_t n) {
    for (torch::Tensor* c : {&pool.k_cache, &pool.v_cache})
      c->narrow(2, 0, n).select(1, to).copy_(c->narrow(2, 0, n).select(1, from));
    if (prev.defined()) prev.select(0, to).copy_(prev.select(0, from));
    slots[to].pos = n;
  }

  int64_t free_slots() const {
    int64_t n = 0;
    for (const Slot& s : slots) n += s.req == nullptr;
    return n;
  }

  // a free slot outside the live rows: the first empty one (next to the live rows: no copy
  // when it joins), else the least recently used
  int64_t take_free_slot() {
    int64_t best = -1;
    for (int64_t s = live; s < (int64_t)slots.size(); s++) {
      if (slots[s].req) continue;
      if (best < 0) best = s;
      const bool empty = slots[s].tokens.empty(), best_empty = slots[best].tokens.empty();
      if (empty != best_empty ? empty : !empty && slots[s].used < slots[best].used) best = s;  // empty: the first
    }
    slots[best].tokens.clear();
    slots[best].pos = 0;
    return best;
  }

  void admit(const std::shared_ptr<Request>& r) {
    const int64_t n = (int64_t)r->rows.size(), T = (int64_t)r->prompt.size();
    r->slot.assign(n, -1);
    int64_t hit = -1, reuse = 0;
    if (opt.prefix_cache) {
      for (int64_t s = live; s < (int64_t)slots.size(); s++) {
        if (slots[s].req || slots[s].tokens.empty() || slots[s].scope != r->opt.cache_scope) continue;
        int64_t k = std::min(common_prefix(slots[s].tokens, r->prompt), T - 1);  // the last prompt token gives logits
        if (k < slots[s].pos && !model.embed) k = 0;  // a partial reuse needs the smear's input recomputed
        if (k > reuse) hit = s, reuse = k;
      }
    }
    for (int64_t i = 0; i < n; i++) {
      int64_t s = (i == 0 && hit >= 0) ? hit : take_free_slot();
      slots[s].req = r.get();
      slots[s].row = i;
      slots[s].used = ++tick;
      r->slot[i] = s;
    }
    if (hit >= 0) {
      r->need_prev = reuse < slots[hit].pos;
      slots[hit].tokens.clear();
      slots[hit].pos = reuse;
    }
    r->prefilled = r->cached = reuse;
    st.prompt_tokens += T;
    st.cached_tokens += reuse;
    r->admitted = true;
    r->cv.notify_all();
  }

  // rows held or asked for by the requests here (under mu): how loaded the scheduler is
  int64_t load() const {
    int64_t n = 0;
    for (auto* q : {&incoming, &prefilling})
      for (auto& r : *q) n += (int64_t)r->rows.size();
    for (auto& r : decoding) n += (int64_t)r->rows.size();
    return n;
  }

  // requests in the queue that the free rows cannot take, first come first served: those that
  // wait for rows (the decode thread admits the others at its next step, so a request that
  // arrives while rows are free is never refused for a queue it will not stand in)
  int64_t blocked() const {
    int64_t free = free_slots(), n = 0;
    for (auto& r : incoming) {
      if (n == 0 && (int64_t)r->rows.size() <= free) free -= (int64_t)r->rows.size();
      else n++;
    }
    return n;
  }

  void count_waiting() {
    st.waiting = (int64_t)incoming.size();
    st.rows_waiting = 0;
    for (auto& r : incoming) st.rows_waiting += (int64_t)r->rows.size();
  }

  // the slot's positions go back to the pool; with the prefix cache it remembers their tokens
  // and the scope they may be reused in
  void release_slot(int64_t s, const std::vector<int32_t>& tokens) {
    Slot& sl = slots[s];
    sl.scope = sl.req ? sl.req->opt.cache_scope : std::string();
    sl.req = nullptr;
    sl.row = -1;
    sl.used = ++tick;
    sl.tokens.clear();
    if (opt.prefix_cache && sl.pos > 0 && (int64_t)tokens.size() >= sl.pos)
      sl.tokens.assign(tokens.begin(), tokens.begin() + sl.pos);
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
      if (s >= 0) release_slot(s, {}), s = -1;
    r.error = error;
    r.finished = true;
    r.cv.notify_all();
  }

  // ---- one step ---------------------------------------------------------------------------
  torch::Tensor ids(const std::vector<int64_t>& v, int64_t rows) {
    return torch::tensor(v, torch::kLong).view({rows, -1}).to(model.device);
  }

  void store_prev(int64_t first, const torch::Tensor& p) {
    if (!p.defined()) return;
    if (!prev.defined()) prev = at::zeros({(int64_t)slots.size(), 1, p.size(-1)}, p.options());
    prev.narrow(0, first, p.size(0)).copy_(p);
  }

  // up to `budget` more prompt tokens of r; returns how many
  int64_t prefill_chunk(std::shared_ptr<Request> r, int64_t budget) {  // a copy: it leaves `prefilling`
    const int64_t T = (int64_t)r->prompt.size(), s0 = r->slot[0];
    const int64_t c = std::min(budget, T - r->prefilled);
    KVCache view = pool.view_rows(s0, 1, r->prefilled);
    if (r->prefilled > 0 && r->need_prev) view.prev_embedding = model.embed(ids({r->prompt[r->prefilled - 1]}, 1));
    else if (r->prefilled > 0 && prev.defined()) view.prev_embedding = prev.narrow(0, s0, 1).clone();
    r->need_prev = false;
    std::vector<int64_t> chunk(r->prompt.begin() + r->prefilled, r->prompt.begin() + r->prefilled + c);
    torch::Tensor lg = model.forward(ids(chunk, 1), view);
    store_prev(s0, view.prev_embedding);
    r->prefilled += c;
    slots[s0].pos = r->prefilled;
    if (r->prefilled < T) return c;
    // the prompt is in: its other rows get a copy, and every unfinished row joins the batch
    for (size_t i = 1; i < r->slot.size(); i++) copy_slot(s0, r->slot[i], T);
    torch::Tensor last = lg.select(1, c - 1);  // (1,V)
    std::vector<torch::Tensor> joined = {};
    if (logits.defined() && live > 0) joined.push_back(logits.narrow(0, 0, live));
    for (size_t i = 0; i < r->rows.size(); i++) {
      if (r->rows[i].finish != FinishReason::none) {  // a budget of 0: never decodes
        release_slot(r->slot[i], {});
        r->slot[i] = -1;
        continue;
      }
      swap_slots(r->slot[i], live);
      feed.resize(live + 1);
      live++;
      joined.push_back(last);
    }
    logits = at::cat(joined, 0);
    std::lock_guard<std::mutex> lock(mu);
    prefilling.erase(std::find(prefilling.begin(), prefilling.end(), r));
    decoding.push_back(r);
    return c;
  }

  // samples every live row (one pass, one read-back), hands out the columns, drops the rows
  // that finished
  void sample_step() {
    std::map<Request*, std::vector<int64_t>> by_req;  // request -> its live slots, in row order
    for (int64_t b = 0; b < live; b++) by_req[slots[b].req].push_back(b);
    std::vector<SampleRequest> asks;
    std::vector<Request*> asking;  // the request of each ask (cancel is read once: both loops agree)
    for (auto& [r, bs] : by_req) {
      std::sort(bs.begin(), bs.end(), [&](int64_t x, int64_t y) { return slots[x].row < slots[y].row; });
      if (r->cancel) {
        for (int64_t b : bs) r->rows[slots[b].row].finish = FinishReason::cancelled;
        continue;
      }
      asks.push_back({bs, r->opt.temperature, r->opt.top_k, r->opt.top_p, &r->rng});
      asking.push_back(r);
    }
    const std::vector<int64_t> drawn = engine_sample_rows(logits, asks);
    for (size_t k = 0; k < asks.size(); k++) {
      Request* r = asking[k];
      const std::vector<int64_t>& bs = asks[k].rows;
      std::vector<int64_t> mine(bs.size()), which(bs.size()), took;
      for (size_t i = 0; i < bs.size(); i++) mine[i] = drawn[bs[i]], which[i] = slots[bs[i]].row;
      torch::Tensor lg;  // the request's logits, for its log-probs
      if (r->opt.logprobs) lg = logits.index_select(0, torch::tensor(bs, torch::kLong).to(logits.device()));
      TokenColumn col = engine_column_step(r->rows, which, mine.data(), lg, r->steps, r->opt, engine->tokenizer(), tools, took);
      for (size_t i = 0; i < bs.size(); i++) feed[bs[i]] = took[i];
      r->steps++;
      st.tokens += (int64_t)bs.size();
      std::lock_guard<std::mutex> lock(mu);
      r->out.push_back(std::move(col));
      r->cv.notify_all();
    }
    // drop finished rows, last first, so a swap only moves a row already sampled
    for (int64_t b = live - 1; b >= 0; b--) {
      Request* r = slots[b].req;
      const int64_t row = slots[b].row;
      if (r->rows[row].finish == FinishReason::none) continue;
      swap_slots(b, live - 1);
      feed[b] = feed[live - 1];
      live--;
      r->slot[row] = -1;
      release_slot(live, r->rows[row].tokens);
    }
    feed.resize(live);
    logits = torch::Tensor();
    std::lock_guard<std::mutex> lock(mu);
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
    KVCache view = pool.view_rows(0, live, 0);
    std::vector<int64_t> pos(live);
    for (int64_t b = 0; b < live; b++) pos[b] = slots[b].pos;
    view.set_row_positions(pos);
    if (prev.defined()) view.prev_embedding = prev.narrow(0, 0, live);
    logits = model.forward(ids(feed, live), view).select(1, 0);  // (live, V)
    store_prev(0, view.prev_embedding);
    for (int64_t b = 0; b < live; b++) slots[b].pos++;
    std::lock_guard<std::mutex> lock(mu);
    st.decode_steps++;
    st.decode_rows += live;
    const auto now = clk::now();
    rate.emplace_back(now, st.tokens);
    while (rate.size() > 2 && now - rate.front().first > std::chrono::seconds(10)) rate.pop_front();
  }

  // requests cancelled before they joined the batch leave here (their rows never decoded)
  void drop_cancelled_waiting() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto* q : {&incoming, &prefilling})
      for (auto it = q->begin(); it != q->end();) {
        if (!(*it)->cancel) {
          ++it;
          continue;
        }
        end_request(**it);
        it = q->erase(it);
      }
  }

  // every request still here ends (shutdown; or with `error` when the decode thread failed)
  void end_all(const std::string& error) {
    for (auto& r : incoming) end_request(*r, error);
    for (auto& r : prefilling) end_request(*r, error);
    for (auto& r : decoding) end_request(*r, error);
    incoming.clear();
    prefilling.clear();
    decoding.clear();
  }

  // the decode thread failed: every request gets the error, the pool starts over empty
  void fail_all(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    end_all(what);
    for (Slot& s : slots) s = Slot();
    live = 0;
    feed.clear();
    logits = torch::Tensor();
  }

  void loop() {
    torch::NoGradGuard no_grad;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        work.wait(lock, [&] { return stop || !incoming.empty() || !prefilling.empty() || live > 0; });
        if (stop) break;
        // first come, first served: the oldest waiting request goes in once its rows are free
        while (!incoming.empty() && (int64_t)incoming.front()->rows.size() <= free_slots()) {
          std::shared_ptr<Request> r = incoming.front();
          incoming.pop_front();
          if (r->cancel) {
            end_request(*r);
            continue;
          }
          admit(r);
          prefilling.push_back(r);
        }
      }
      try {
        drop_cancelled_waiting();
        // prompts go in, oldest first, up to prefill_chunk tokens per step: many short
        // prompts join together, a long one is spread over several steps
        for (int64_t budget = opt.prefill_chunk; budget > 0 && !prefilling.empty();)
          budget -= prefill_chunk(prefilling.front(), budget);
        if (live > 0) sample_step();
        if (live > 0) decode_forward();
      } catch (const std::exception& e) {
        fail_all(e.what());
      }
      std::lock_guard<std::mutex> lock(mu);
      st.running = (int64_t)(prefilling.size() + decoding.size());
      count_waiting();
      st.rows_busy = st.rows_cached = 0;
      for (const Slot& s : slots) {
        st.rows_busy += s.req != nullptr;
        st.rows_cached += s.req == nullptr && !s.tokens.empty();
      }
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
int64_t Scheduler::max_batch() const { return impl_->opt.max_batch; }
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

std::shared_ptr<Scheduler::Ticket> Scheduler::submit(const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  Impl& im = *impl_;
  auto r = std::make_shared<Request>();
  int64_t longest = 0;
  r->rows = engine_rows_init(prompt, options, im.model, im.engine->tokenizer(), im.opt.row_len, longest);
  if ((int64_t)r->rows.size() > im.opt.max_batch)
    fail("generate: %zu samples exceed the %lld rows decoded together (--max-batch)", r->rows.size(),
         (long long)im.opt.max_batch);
  r->prompt = prompt;
  r->opt = options;
  if (longest == 0) {  // no row decodes: done at once
    r->admitted = r->finished = true;
    return std::make_shared<Ticket>(&im, r);
  }
  r->rng = gpt_make_generator(im.model.device, options.seed);
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (im.stop || im.closed) throw SchedulerRefused(true, kClosed);
    im.incoming.push_back(r);
    if (const int64_t waiting = im.blocked(); waiting > im.opt.max_queue) {
      im.incoming.pop_back();
      throw SchedulerRefused(false, strprintf("generate: %lld requests already wait for rows (--max-queue)",
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
  for (auto& r : im.incoming) {
    r->refused = true;
    im.end_request(*r);
  }
  im.incoming.clear();
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
