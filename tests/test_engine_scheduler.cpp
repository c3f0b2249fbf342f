// Tests for continuous batching (engine/scheduler.h; the per-row attention it rests on is
// tested in test_attention.cpp):
//  - greedy requests through the scheduler, alone or many at once with chunked prefill, give
//    the tokens of Engine::generate (whose own tests check it against the naive loop);
//  - a seeded request draws the same tokens alone, among others, and as Engine::generate;
//  - the calculator, per-row stops and budgets on a scripted model equal Engine::generate's;
//  - prefix reuse: the same tokens with and without it, cached_tokens counted by hand, LRU eviction;
//  - cancellation frees the rows; too many samples is an error;
//  - one bounded queue, first come first served; close_queue refuses those still waiting;
//  - fair admission: one queue per key, free rows to the key served least recently (the
//    waiting room's turns on hand-built queues, then a flooding key against a quiet one).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/engine.h"
#include "nanochat/engine/scheduler.h"
#include "engine/wait_queues.h"
#include "nanochat/gpt.h"
#include "test_models.h"

using namespace nanochat;

namespace {

constexpr int32_t BOS = 256, USER_START = 257, USER_END = 258, ASSISTANT_START = 259, ASSISTANT_END = 260,
                  PYTHON_START = 261, PYTHON_END = 262, OUTPUT_END = 264;

std::shared_ptr<const Engine> tiny_engine(uint64_t seed = 7) {
  return std::make_shared<const Engine>(perturbed_gpt(tiny_gpt_config(300), seed, 0.3), byte_tokenizer());
}

std::vector<int32_t> prompt_of(int i, int len) {  // distinct first tokens: no shared prefixes
  std::vector<int32_t> p;
  for (int t = 0; t < len; t++) p.push_back('a' + (i * 7 + t * 3) % 26);
  return p;
}

GenerateOptions greedy(int64_t max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.temperature = 0.0;
  o.use_calculator = false;
  return o;
}

// greedy without stop tokens: the row is held for exactly max_tokens steps, whichever tokens
// this CPU's rounding makes the tiny model pick
GenerateOptions greedy_unstopped(int64_t max_tokens) {
  GenerateOptions o = greedy(max_tokens);
  o.default_stops = false;
  return o;
}

// the stats once the decode thread has finished its step (they are written after it)
SchedulerStats settled(const Scheduler& s) {
  for (int i = 0; i < 200 && s.stats().running > 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return s.stats();
}

// each request on its own thread, all at once
std::vector<GenerateResult> run_together(Scheduler& s, const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<GenerateOptions>& opts) {
  std::vector<GenerateResult> out(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); i++)
    threads.emplace_back([&, i] { out[i] = s.generate(prompts[i], opts[i]); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST(Scheduler, GreedyAloneOrBatchedEqualsEngine) {
  auto engine = tiny_engine();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateOptions> opts;
  std::vector<GenerateResult> want;
  for (int i = 0; i < 6; i++) {
    prompts.push_back(prompt_of(i, 3 + 5 * i));  // 3..28 tokens: several prefill chunks of 8
    opts.push_back(greedy(12 + 3 * i));          // different budgets: rows leave at different steps
    want.push_back(engine->generate(prompts[i], opts[i]));
  }
  SchedulerOptions so;
  so.max_batch = 4;  // 6 requests: two wait for rows and join a running batch
  so.prefill_chunk = 8;
  Scheduler s(engine, so);
  for (int i = 0; i < 2; i++) EXPECT_EQ(s.generate(prompts[i], opts[i]).tokens, want[i].tokens) << "alone " << i;
  std::vector<GenerateResult> got = run_together(s, prompts, opts);
  for (int i = 0; i < 6; i++) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "batched " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << i;
  }
  SchedulerStats st = settled(s);
  EXPECT_EQ(st.rows_busy, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_GT(st.decode_rows, st.decode_steps) << "some steps decoded several rows";
}

TEST(Scheduler, FreshPromptsWaitingTogetherGoInOneForward) {
  // A holds every row; three fresh prompts of 5, 9 and 7 tokens queue behind it and are
  // admitted at the step its rows come free: one forward puts all three in, padded to 9
  // tokens, and each reply is still the one Engine::generate gives that prompt alone
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 3;
  Scheduler s(engine, so);
  GenerateOptions a_opt = greedy_unstopped(150);  // long enough for the three to queue behind it on a loaded machine
  a_opt.num_samples = 3;
  auto a = s.submit(prompt_of(0, 4), a_opt);
  ASSERT_TRUE(s.wait_admitted(*a));
  std::vector<std::vector<int32_t>> prompts = {prompt_of(1, 5), prompt_of(2, 9), prompt_of(3, 7)};
  std::vector<std::shared_ptr<Scheduler::Ticket>> waiting;
  for (auto& p : prompts) waiting.push_back(s.submit(p, greedy_unstopped(6 + (int64_t)p.size())));
  ASSERT_EQ(s.stats().waiting, 3) << "the three queued while A ran";
  EXPECT_EQ(s.run(*a).tokens, engine->generate(prompt_of(0, 4), a_opt).tokens);
  std::vector<GenerateResult> got(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); i++) threads.emplace_back([&, i] { got[i] = s.run(*waiting[i]); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); i++)
    EXPECT_EQ(got[i].tokens, engine->generate(prompts[i], greedy_unstopped(6 + (int64_t)prompts[i].size())).tokens)
        << "prompt " << i;
  EXPECT_EQ(settled(s).prefill_forwards, 2) << "A's prompt, then the three waiting ones in one forward";
}

TEST(Scheduler, GreedyBatchedEqualsEngineWithInferenceWeights) {
  // fp32 weights prepared for inference (no gradients): a decode step of 2 to 16 rows runs the
  // few-rows kernel, one row ATen's matvec; 8 requests at once give one request's tokens
  GPT m = perturbed_gpt(tiny_gpt_config(300), 7, 0.3);
  gpt_prepare_for_inference(m, "float32");
  auto engine = std::make_shared<const Engine>(m, byte_tokenizer());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateOptions> opts;
  std::vector<GenerateResult> want;
  for (int i = 0; i < 8; i++) {
    prompts.push_back(prompt_of(i, 3 + 2 * i));
    opts.push_back(greedy_unstopped(8 + i));
    want.push_back(engine->generate(prompts[i], opts[i]));
  }
  SchedulerOptions so;
  so.max_batch = 8;
  Scheduler s(engine, so);
  std::vector<GenerateResult> got = run_together(s, prompts, opts);
  for (int i = 0; i < 8; i++) EXPECT_EQ(got[i].tokens, want[i].tokens) << "batched " << i;
  EXPECT_GT(settled(s).decode_rows, 3 * settled(s).decode_steps) << "steps of many rows";
}

TEST(Scheduler, SeededSamplingIgnoresWhatElseRuns) {
  auto engine = tiny_engine();
  GenerateOptions o;
  o.max_tokens = 20;
  o.temperature = 1.0;
  o.seed = 123;
  o.use_calculator = false;
  o.default_stops = false;
  const std::vector<int32_t> prompt = prompt_of(3, 9);
  GenerateResult want = engine->generate(prompt, o);  // one row: one draw per step, as here
  Scheduler s(engine, SchedulerOptions{});
  EXPECT_EQ(s.generate(prompt, o).tokens, want.tokens);
  std::vector<std::vector<int32_t>> prompts = {prompt};
  std::vector<GenerateOptions> opts = {o};
  for (int i = 0; i < 5; i++) {  // others sample with other seeds and budgets meanwhile
    GenerateOptions other = o;
    other.seed = 1000 + i;
    other.max_tokens = 5 + 4 * i;
    prompts.push_back(prompt_of(10 + i, 4 + i));
    opts.push_back(other);
  }
  std::vector<GenerateResult> got = run_together(s, prompts, opts);
  EXPECT_EQ(got[0].tokens, want.tokens);
  // n samples of one request: reproducible, and the rows differ
  o.num_samples = 3;
  GenerateResult a = s.generate(prompt, o), b = run_together(s, {prompt, prompts[2]}, {o, opts[2]})[0];
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens[0], a.tokens[1]);
}

TEST(Scheduler, ToolStopsAndBudgetsAsTheEngine) {
  // the scripted model of test_engine: the next token is a fixed function of the last one
  std::map<int32_t, int32_t> script = {{ASSISTANT_START, 'A'},
                                       {'A', PYTHON_START},
                                       {PYTHON_START, '1'},
                                       {'1', '2'},
                                       {'2', '+'},
                                       {'+', '3'},
                                       {'3', PYTHON_END},
                                       {PYTHON_END, 'Z'},
                                       {OUTPUT_END, 'B'},
                                       {'B', 'a'},
                                       {'a', 'b'},
                                       {'b', 'c'},
                                       {'c', 'a'}};
  auto step_ms = std::make_shared<std::atomic<int>>(0);  // a slow model: the caller keeps up
  EngineModel m;
  m.forward = [script, step_ms](const torch::Tensor& ids, KVCache& cache) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms->load()));
    auto acc = ids.accessor<int64_t, 2>();
    torch::Tensor logits = torch::full({ids.size(0), ids.size(1), 265}, -INFINITY);
    for (int64_t b = 0; b < ids.size(0); b++)
      for (int64_t t = 0; t < ids.size(1); t++) {
        auto it = script.find((int32_t)acc[b][t]);
        logits[b][t][it == script.end() ? '?' : it->second] = 0.0;
      }
    cache.advance(ids.size(1));
    return logits;
  };
  m.make_cache = [](int64_t batch, int64_t len) { return KVCache(batch, 1, len, 1, 1, torch::kCPU, torch::kFloat32); };
  m.sequence_len = 64;
  m.max_positions = 640;
  auto engine = std::make_shared<const Engine>(m, byte_tokenizer());
  const std::vector<int32_t> prompt = {BOS, USER_START, 'h', 'i', USER_END, ASSISTANT_START};
  GenerateOptions o;
  o.num_samples = 3;
  o.max_tokens = 30;
  o.row_stop_tokens = {{}, {'c'}, {}};
  o.row_max_tokens = {30, 30, 9};
  GenerateResult want = engine->generate(prompt, o);
  Scheduler s(engine, SchedulerOptions{});
  std::vector<TokenColumn> cols;
  GenerateResult got = s.generate(prompt, o, [&](const TokenColumn& c) {
    cols.push_back(c);
    return true;
  });
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.masks, want.masks);
  EXPECT_EQ(got.finish, want.finish);
  EXPECT_EQ(got.stop_token, want.stop_token);
  EXPECT_EQ(got.steps, (int64_t)cols.size());
  // a callback returning false ends the request at the next step boundary the decode thread
  // reaches after it (it runs ahead of the caller: here 20 ms a step); its rows go back to the pool
  step_ms->store(20);
  int seen = 0;
  GenerateResult c = s.generate(prompt, o, [&](const TokenColumn&) { return ++seen < 2; });
  EXPECT_EQ(seen, 2);
  for (FinishReason f : c.finish) EXPECT_EQ(f, FinishReason::cancelled);
  EXPECT_EQ(settled(s).rows_busy, 0);
  // more samples than rows is an error, not a wait forever
  o.num_samples = 9;
  o.row_stop_tokens.clear();
  o.row_max_tokens.clear();
  EXPECT_THROW(s.generate(prompt, o), Error);
}

TEST(Scheduler, PrefixReuseGivesTheSameTokensAndEvictsLeastRecentlyUsed) {
  auto engine = tiny_engine();
  SchedulerOptions on, off;
  on.max_batch = off.max_batch = 2;
  on.prefill_chunk = off.prefill_chunk = 8;
  off.prefix_cache = false;
  Scheduler with(engine, on), without(engine, off);
  GenerateOptions o = greedy(10);
  o.default_stops = false;
  // turn 1, then turn 2 = turn 1's prompt and reply + more: the whole first conversation is reused
  const std::vector<int32_t> p1 = prompt_of(1, 12);
  int64_t cached = -1;
  GenerateResult r1 = with.generate(p1, o, nullptr, nullptr, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(r1.tokens, without.generate(p1, o).tokens);
  std::vector<int32_t> p2 = r1.tokens[0];
  for (int32_t t : prompt_of(2, 5)) p2.push_back(t);
  GenerateResult r2 = with.generate(p2, o, nullptr, nullptr, &cached);
  // the KV holds the prompt and every reply token but the last (sampled, never fed)
  EXPECT_EQ(cached, (int64_t)p1.size() + 10 - 1);
  EXPECT_EQ(r2.tokens, without.generate(p2, o).tokens);
  // the same prompt again: all but its last token reused, from the middle of a longer row
  GenerateResult r3 = with.generate(p1, o, nullptr, nullptr, &cached);
  EXPECT_EQ(cached, (int64_t)p1.size() - 1);
  EXPECT_EQ(r3.tokens, r1.tokens);
  // two rows: A then B then C (no common prefix) evicts A, the least recently used
  const std::vector<int32_t> a = prompt_of(5, 9), b = prompt_of(6, 9), c = prompt_of(8, 9);
  with.generate(a, o);
  with.generate(b, o);
  with.generate(c, o);
  with.generate(b, o, nullptr, nullptr, &cached);
  EXPECT_EQ(cached, 8) << "B is still held";
  with.generate(a, o, nullptr, nullptr, &cached);
  EXPECT_EQ(cached, 0) << "A was evicted";
  EXPECT_EQ(settled(with).rows_cached, 2);
  EXPECT_EQ(settled(without).rows_cached, 0);
}

// The prefix cache as a cross-user oracle: Alice sends a secret; Bob, in another scope, probes
// 8 candidates. His cached_tokens must be what they are with no Alice at all (his own probes
// share a prefix with each other, never with her); within one scope the right candidate would
// stand out (all its prompt but the last token reused, a wrong one only the common part), and
// Alice's next turn still reuses her whole first turn.
TEST(Scheduler, PrefixCacheKeepsScopesApart) {
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 4;
  so.prefill_chunk = 64;
  GenerateOptions o = greedy(4);
  o.default_stops = false;
  auto in_scope = [&](const char* scope) {
    GenerateOptions x = o;
    x.cache_scope = scope;
    return x;
  };
  const std::vector<int32_t> sentence = prompt_of(3, 12);  // "my banking password is"
  auto candidate = [&](int i) {                            // ... and candidate i (0: the secret)
    std::vector<int32_t> p = sentence;
    for (int32_t t : prompt_of(10 + i, 4)) p.push_back(t);
    return p;
  };
  auto probes = [&](Scheduler& s, const char* scope) {
    std::vector<int64_t> cached;
    for (int i : {3, 0, 5, 1, 7, 2, 6, 4}) {
      int64_t c = -1;
      s.generate(candidate(i), in_scope(scope), nullptr, nullptr, &c);
      cached.push_back(c);
    }
    return cached;
  };
  const std::vector<int64_t> want = {0, 12, 12, 12, 12, 12, 12, 12};  // by hand: the sentence after the first
  Scheduler alone(engine, so);
  EXPECT_EQ(probes(alone, "bob"), want);
  Scheduler shared(engine, so);
  int64_t cached = -1;
  GenerateResult secret = shared.generate(candidate(0), in_scope("alice"), nullptr, nullptr, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(probes(shared, "bob"), want) << "another scope learned something from Alice's request";
  // Alice's next turn: her prompt and reply (but the last, never fed) come from the cache
  std::vector<int32_t> turn2 = secret.tokens[0];
  for (int32_t t : prompt_of(20, 5)) turn2.push_back(t);
  GenerateResult r2 = shared.generate(turn2, in_scope("alice"), nullptr, nullptr, &cached);
  EXPECT_EQ(cached, 16 + 4 - 1);
  EXPECT_EQ(r2.tokens, alone.generate(turn2, in_scope("alice")).tokens);
  // in Alice's own scope the probe would tell: the secret reuses 15 of its 16 tokens, a wrong guess 12
  for (int guess : {0, 1}) {
    Scheduler same(engine, so);
    same.generate(candidate(0), in_scope("alice"));
    same.generate(candidate(guess), in_scope("alice"), nullptr, nullptr, &cached);
    EXPECT_EQ(cached, guess == 0 ? 15 : 12) << "guess " << guess;
  }
}

// --max-queue bounds the requests that wait for rows, not those the free rows take at the
// decode thread's next step: two requests sent back to back onto two free rows are both taken
// with a queue of 0, even before the first is admitted; a third, with both rows held, is refused.
TEST(Scheduler, ARequestForFreeRowsIsNotRefusedForTheQueue) {
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 2;
  so.max_queue = 0;
  Scheduler s(engine, so);
  const GenerateOptions hold = greedy_unstopped(200);
  auto a = s.submit(prompt_of(1, 6), hold);
  auto b = s.submit(prompt_of(2, 6), hold);
  ASSERT_TRUE(s.wait_admitted(*a));
  ASSERT_TRUE(s.wait_admitted(*b));
  EXPECT_THROW(s.submit(prompt_of(3, 6), greedy(4)), SchedulerRefused);
}

// One queue, first come first served and bounded: with its one row taken, two requests wait
// and a third is refused at once; the first waiting gets the row first; close_queue refuses
// the one still waiting (and every later one) while the admitted one runs to its end.
TEST(Scheduler, OneBoundedQueueFirstComeFirstServed) {
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 1;
  so.max_queue = 2;
  Scheduler s(engine, so);
  // the holder and the first in line each hold the row for 200 steps: long enough for what the
  // test does meanwhile (a few calls), never cut short by a stop token
  const GenerateOptions hold = greedy_unstopped(200);
  // the references first: computed while `first` decodes, they gave it time to finish before
  // close_queue, and `second` then took the row (seen on a loaded machine)
  const auto want_holder = engine->generate(prompt_of(1, 6), hold).tokens;
  const auto want_first = engine->generate(prompt_of(2, 6), hold).tokens;
  auto holder = s.submit(prompt_of(1, 6), hold);
  ASSERT_TRUE(s.wait_admitted(*holder));
  auto first = s.submit(prompt_of(2, 6), hold);
  auto second = s.submit(prompt_of(3, 6), greedy(4));
  EXPECT_EQ(s.stats().waiting, 2);
  EXPECT_EQ(s.load(), 3);  // one row held, two asked for
  try {
    s.submit(prompt_of(4, 6), greedy(4));
    ADD_FAILURE() << "a third waiting request was queued";
  } catch (const SchedulerRefused& e) {
    EXPECT_FALSE(e.closed);
    EXPECT_NE(std::string(e.what()).find("--max-queue"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.run(*holder).tokens, want_holder);
  ASSERT_TRUE(s.wait_admitted(*first));  // the row went to the first in line
  s.close_queue();
  EXPECT_THROW(s.wait_admitted(*second), SchedulerRefused);
  EXPECT_THROW(s.submit(prompt_of(5, 6), greedy(4)), SchedulerRefused);
  EXPECT_EQ(s.run(*first).tokens, want_first);
  EXPECT_EQ(settled(s).waiting, 0);
  // a ticket dropped while it waits cancels its request
  Scheduler t(engine, so);
  auto busy = t.submit(prompt_of(1, 6), hold);
  ASSERT_TRUE(t.wait_admitted(*busy));
  t.submit(prompt_of(2, 6), greedy(4)).reset();
  t.run(*busy);
  EXPECT_EQ(settled(t).waiting, 0);
  EXPECT_EQ(t.load(), 0);
}

// ---- fair admission --------------------------------------------------------------------------

namespace {
std::shared_ptr<WaitingRequest> waiter(const std::string& key, int64_t rows = 1) {
  auto w = std::make_shared<WaitingRequest>();
  w->key = key;
  w->rows_needed = rows;
  return w;
}
}  // namespace

// A pushes a1 a2 a3, then B pushes b1, C pushes c1 c2. Turns by hand: A first (nobody served
// yet, oldest request), then B and C (never served; b1 came first), then A (served longest
// ago), then C, then A: a1 b1 c1 a2 c2 a3.
TEST(WaitQueues, RowsGoToTheKeyServedLeastRecently) {
  WaitQueues q;
  std::map<WaitingRequest*, std::string> name;
  for (auto [key, id] : std::vector<std::pair<std::string, std::string>>{
           {"A", "a1"}, {"A", "a2"}, {"A", "a3"}, {"B", "b1"}, {"C", "c1"}, {"C", "c2"}}) {
    auto w = waiter(key);
    name[w.get()] = id;
    q.push(w);
  }
  EXPECT_EQ(q.size(), 6);
  // with 2 free rows, admission would take a1 and b1: A has 2 left blocked, B none, C 2
  EXPECT_EQ(q.blocked("A", 2), 2);
  EXPECT_EQ(q.blocked("B", 2), 0);
  EXPECT_EQ(q.blocked("C", 2), 2);
  std::string order;
  while (auto w = q.pop_next()) order += name[w.get()] + " ";
  EXPECT_EQ(order, "a1 b1 c1 a2 c2 a3 ");
  EXPECT_EQ(q.size(), 0);
  EXPECT_EQ(q.rows(), 0);
}

// a key whose turn it is but whose request needs more rows than are free holds the line (no
// overtaking, so a request of many samples is not starved); the count of rows is kept
TEST(WaitQueues, ARequestTooBigForTheFreeRowsBlocksTheRest) {
  WaitQueues q;
  q.push(waiter("A", 3));
  q.push(waiter("B", 1));
  EXPECT_EQ(q.rows(), 4);
  EXPECT_EQ(q.blocked("B", 2), 1);  // A's 3 rows come first and do not fit in 2
  EXPECT_EQ(q.blocked("B", 4), 0);
  q.pop_back("B");
  EXPECT_EQ(q.rows(), 3);
  EXPECT_EQ(q.next()->key, "A");
}

// One row; key A holds it and queues its limit (max_queue 2): A's next request is refused,
// B's is not (its own queue is empty), and when the row frees B gets it, ahead of A's two
// that waited longer.
TEST(Scheduler, AFloodingKeyIsRefusedAloneAndTheOtherKeyGoesFirst) {
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 1;
  so.max_queue = 2;
  Scheduler s(engine, so);
  auto a0 = s.submit(prompt_of(1, 6), greedy_unstopped(60), "A");
  ASSERT_TRUE(s.wait_admitted(*a0));
  auto a1 = s.submit(prompt_of(2, 6), greedy_unstopped(4), "A");
  auto a2 = s.submit(prompt_of(3, 6), greedy_unstopped(4), "A");
  EXPECT_THROW(s.submit(prompt_of(4, 6), greedy(4), "A"), SchedulerRefused);
  std::shared_ptr<Scheduler::Ticket> b;
  ASSERT_NO_THROW(b = s.submit(prompt_of(5, 6), greedy_unstopped(200), "B"));
  EXPECT_EQ(s.stats().waiting, 3);
  s.run(*a0);  // the row frees
  ASSERT_TRUE(s.wait_admitted(*b));
  // one row: had a1 or a2 gone first, they would have left the waiting room before b got it
  EXPECT_EQ(s.stats().waiting, 2) << "A's earlier requests went ahead of B";
  s.run(*b);
  ASSERT_TRUE(s.wait_admitted(*a1));
  s.run(*a1);
  s.run(*a2);
  EXPECT_EQ(settled(s).waiting, 0);
}

// Eight rows, a key holds at most seven. Key A's request of 8 samples is refused at submit; A's
// two requests of 4 samples: the first takes 4 rows, the second would make 8 and waits; B's
// one-sample request then starts while A's first still holds its rows (without the cap A's
// second would have had the last 4 rows, and B would have waited for A's first to end).
// Then A alone fills 7 rows with one-sample requests, its 8th waits, and B's goes into the
// row that was left.
TEST(Scheduler, AKeyNeverHoldsEveryRow) {
  auto engine = tiny_engine();
  SchedulerOptions so;
  so.max_batch = 8;
  so.max_rows_per_key = 7;
  Scheduler s(engine, so);
  GenerateOptions eight = greedy_unstopped(200), four = greedy_unstopped(200);
  eight.num_samples = 8;
  four.num_samples = 4;
  try {
    s.submit(prompt_of(1, 6), eight, "A");
    ADD_FAILURE() << "8 samples were queued";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one client may hold"), std::string::npos) << e.what();
  }
  auto a0 = s.submit(prompt_of(1, 6), four, "A");
  ASSERT_TRUE(s.wait_admitted(*a0));
  auto a1 = s.submit(prompt_of(2, 6), four, "A");
  auto b = s.submit(prompt_of(3, 6), greedy_unstopped(4), "B");
  ASSERT_TRUE(s.wait_admitted(*b));
  EXPECT_EQ(s.stats().waiting, 1) << "A's second request took rows before B's";
  s.run(*b);
  s.run(*a0);
  ASSERT_TRUE(s.wait_admitted(*a1));
  s.run(*a1);
  EXPECT_EQ(settled(s).waiting, 0);

  std::vector<std::shared_ptr<Scheduler::Ticket>> a;
  for (int i = 0; i < 8; i++) a.push_back(s.submit(prompt_of(10 + i, 6), greedy_unstopped(200), "A"));
  for (int i = 0; i < 7; i++) ASSERT_TRUE(s.wait_admitted(*a[i]));
  auto late = s.submit(prompt_of(20, 6), greedy_unstopped(4), "B");
  ASSERT_TRUE(s.wait_admitted(*late));
  EXPECT_EQ(s.stats().waiting, 1) << "A's eighth request took the last row";
  s.run(*late);
  for (auto& t : a) s.run(*t);
  EXPECT_EQ(settled(s).waiting, 0);
}
