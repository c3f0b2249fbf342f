// Tests for the engine (upstream's engine.py): greedy KV-cache generation against the naive
// full-recompute gpt_generate, seeded sampling, independent rows, dropped finished rows
// checked by recomputing every row's log-probs without a cache, the sampler's top-k/top-p on
// known distributions, and the tool state machine on a scripted model whose next token is a
// fixed function of the last one (token streams and masks worked out by hand).
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/tokenizer.h"
#include "test_models.h"

using namespace nanochat;

namespace {

constexpr int32_t BOS = 256, USER_START = 257, USER_END = 258, ASSISTANT_START = 259, ASSISTANT_END = 260,
                  PYTHON_START = 261, PYTHON_END = 262, OUTPUT_START = 263, OUTPUT_END = 264;

GPTConfig tiny_config() { return tiny_gpt_config(300); }

GPT tiny_model(uint64_t seed = 7) { return perturbed_gpt(tiny_config(), seed, 0.3); }

// the scripted model: at every position the next token is script[current token] (others -inf),
// so sampling at any temperature picks it; records the batch size of every forward
struct ScriptedModel {
  std::map<int32_t, int32_t> script;
  int32_t fallback = '?';
  std::vector<int64_t> batch_sizes;
};
EngineModel scripted(ScriptedModel& s, int64_t vocab = 265) {
  EngineModel m;
  m.forward = [&s, vocab](const torch::Tensor& ids, KVCache& cache) {
    s.batch_sizes.push_back(ids.size(0));
    auto acc = ids.accessor<int64_t, 2>();
    torch::Tensor logits = torch::full({ids.size(0), ids.size(1), vocab}, -INFINITY);
    for (int64_t b = 0; b < ids.size(0); b++)
      for (int64_t t = 0; t < ids.size(1); t++) {
        auto it = s.script.find((int32_t)acc[b][t]);
        logits[b][t][it == s.script.end() ? s.fallback : it->second] = 0.0;
      }
    cache.advance(ids.size(1));
    return logits;
  };
  m.make_cache = [](int64_t batch, int64_t len) { return KVCache(batch, 1, len, 1, 1, torch::kCPU, torch::kFloat32); };
  m.sequence_len = 64;
  m.max_positions = 640;
  return m;
}

const std::vector<int32_t> kChatPrompt = {BOS, USER_START, 'h', 'i', USER_END, ASSISTANT_START};

std::vector<int32_t> generated(const GenerateResult& r, size_t row) {
  return std::vector<int32_t>(r.tokens[row].begin() + r.prompt_len, r.tokens[row].end());
}

}  // namespace

TEST(Engine, GreedyEqualsNaiveGenerate) {
  GPT model = tiny_model();
  Engine engine(model, byte_tokenizer());
  const std::vector<int32_t> prompt = {'T', 'h', 'e', ' ', 'c', 'a', 't', 290, 5};
  std::vector<int64_t> naive = gpt_generate(model, std::vector<int64_t>(prompt.begin(), prompt.end()), 24, 0.0);
  GenerateOptions opt;
  opt.num_samples = 3;
  opt.max_tokens = 24;
  opt.temperature = 0.0;
  opt.use_calculator = false;
  GenerateResult r = engine.generate_batch(prompt, opt);
  // the engine stops at <|bos|>/<|assistant_end|>; the naive loop does not
  size_t n = 0;
  while (n < naive.size() && naive[n] != BOS && naive[n] != ASSISTANT_END) n++;
  ASSERT_GE(n, 5u) << "the random model should not stop at once";
  for (int row = 0; row < 3; row++) {
    EXPECT_EQ(r.tokens[row].size(), prompt.size() + n);
    EXPECT_EQ(generated(r, row), std::vector<int32_t>(naive.begin(), naive.begin() + n)) << "row " << row;
    EXPECT_EQ(r.finish[row], n == naive.size() ? FinishReason::length : FinishReason::stop);
  }
}

TEST(Engine, ForwardLastIsForwardsLogitsAtThosePositions) {
  // a prompt's forward through forward_last: the lm_head of each row's one position, the same
  // cache after it. Against forward's logits at those positions: the lm_head's sums of C fp32
  // products in another order (1 row against 3*7), each within C * 2^-24 * sum |h||w| of the
  // exact sum, twice; the softcap's slope is at most 1
  GPT model = tiny_model();
  const EngineModel em = engine_model_from_gpt(model);
  torch::NoGradGuard ng;
  const torch::Tensor ids = torch::randint(0, 300, {3, 7}, torch::kLong);
  const std::vector<int64_t> last = {6, 2, 4};
  KVCache full_cache = em.make_cache(3, 16), last_cache = em.make_cache(3, 16);
  const torch::Tensor full = em.forward(ids, full_cache);  // (3,7,V)
  const torch::Tensor got = em.forward_last(ids, last_cache, last);
  ASSERT_EQ(got.sizes(), torch::IntArrayRef({3, full.size(2)}));
  EXPECT_EQ(last_cache.get_pos(), full_cache.get_pos());
  EXPECT_TRUE(torch::equal(last_cache.k_cache, full_cache.k_cache)) << "the same KV";
  const torch::Tensor h = model->hidden(ids).abs();  // (3,7,C)
  const torch::Tensor w = model->lm_head->weight.abs().narrow(0, 0, full.size(2));
  const int64_t C = h.size(2);
  for (int64_t b = 0; b < 3; b++) {
    const torch::Tensor bound = 2.0 * C * std::ldexp(1.0, -24) * at::matmul(h[b][last[b]], w.t()) + 1e-30;
    const double excess = ((got[b] - full[b][last[b]]).abs() / bound).max().item<double>();
    EXPECT_LE(excess, 1.0) << "row " << b;
  }
  EngineModel picked = em;  // without forward_last: forward's logits, picked
  picked.forward_last = nullptr;
  KVCache picked_cache = em.make_cache(3, 16);
  EXPECT_TRUE(torch::equal(engine_forward_last(picked, ids, picked_cache, last),
                           full.index({torch::arange(3), torch::tensor(last)})));
  EXPECT_THROW(engine_forward_last(em, ids, picked_cache, {1}), Error) << "one position per row";
}

TEST(Engine, OneSampleDrawsLikeNaiveGenerateWithTheSameSeed) {
  // same generator, same number of draws per step, same distribution: the same tokens
  GPT model = tiny_model();
  Engine engine(model, byte_tokenizer());
  const std::vector<int32_t> prompt = {'a', 'b', 'c', 'd'};
  std::vector<int64_t> naive = gpt_generate(model, {'a', 'b', 'c', 'd'}, 20, 1.0, 0, 123);
  GenerateOptions opt;
  opt.max_tokens = 20;
  opt.seed = 123;
  opt.use_calculator = false;
  opt.stop_tokens = {};
  GenerateResult r = engine.generate(prompt, opt);
  std::vector<int32_t> got = generated(r, 0);
  if (r.finish[0] == FinishReason::stop) got.push_back(r.stop_token[0]);
  ASSERT_LE(got.size(), naive.size());
  EXPECT_EQ(got, std::vector<int32_t>(naive.begin(), naive.begin() + got.size()));
}

TEST(Engine, SeededSamplingIsReproducibleAndRowsDiffer) {
  GPT model = tiny_model();
  Engine engine(model, byte_tokenizer());
  GenerateOptions opt;
  opt.num_samples = 4;
  opt.max_tokens = 16;
  opt.temperature = 1.0;
  opt.use_calculator = false;
  opt.stop_tokens = {};
  const std::vector<int32_t> prompt = {'x', 'y', 'z'};
  GenerateResult a = engine.generate(prompt, opt), b = engine.generate(prompt, opt);
  EXPECT_EQ(a.tokens, b.tokens);
  std::set<std::vector<int32_t>> distinct(a.tokens.begin(), a.tokens.end());
  EXPECT_EQ(distinct.size(), 4u) << "rows sample independently after the shared prefill";
  // the first tokens already differ: each row samples its first token from the prefill's logits
  std::set<int32_t> firsts;
  for (auto& t : a.tokens) firsts.insert(t[prompt.size()]);
  EXPECT_GT(firsts.size(), 1u);
  opt.seed = 43;
  GenerateResult c = engine.generate(prompt, opt);
  EXPECT_NE(a.tokens, c.tokens);
  // top-k and top-p runs are reproducible too, and stay inside their sets
  opt.top_k = 5;
  opt.top_p = 0.9;
  EXPECT_EQ(engine.generate(prompt, opt).tokens, engine.generate(prompt, opt).tokens);
}

TEST(Engine, DroppedRowsKeepTheirOwnCache) {
  // rows end at different times (budgets), so the decode batch shrinks by index_select on
  // the cache; each row's log-probs must still equal a cache-free forward of its own tokens
  GPT model = tiny_model();
  EngineModel em = engine_model_from_gpt(model);
  std::vector<int64_t> sizes;
  auto inner = em.forward;
  em.forward = [&](const torch::Tensor& ids, KVCache& cache) {
    sizes.push_back(ids.size(0));
    return inner(ids, cache);
  };
  auto inner_last = em.forward_last;  // the prompt's forward
  em.forward_last = [&](const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& last) {
    sizes.push_back(ids.size(0));
    return inner_last(ids, cache, last);
  };
  Engine engine(em, byte_tokenizer());
  GenerateOptions opt;
  opt.num_samples = 5;
  opt.temperature = 1.0;
  opt.seed = 5;
  opt.logprobs = true;
  opt.use_calculator = false;
  opt.row_max_tokens = {3, 9, 14, 5, 20};
  opt.row_stop_tokens = {{}, {}, {}, {}, {}};
  const std::vector<int32_t> prompt = {'q', 'r', 's', 't', 'u'};
  GenerateResult r = engine.generate(prompt, opt);
  const int64_t T = (int64_t)prompt.size();
  for (int row = 0; row < 5; row++) {
    const int64_t n = (int64_t)r.tokens[row].size() - T;
    ASSERT_EQ((int64_t)r.logprobs[row].size(), n);
    if (r.finish[row] == FinishReason::length) {
      EXPECT_EQ(n, opt.row_max_tokens[row]);
    }
    if (n == 0) continue;
    std::vector<int64_t> ids(r.tokens[row].begin(), r.tokens[row].end());
    torch::NoGradGuard ng;
    torch::Tensor logits = model->forward(torch::tensor(ids).view({1, -1}));  // no cache
    torch::Tensor lp = at::log_softmax(logits[0], -1);
    for (int64_t i = 0; i < n; i++)
      EXPECT_NEAR(r.logprobs[row][i], lp[T - 1 + i][ids[T + i]].item<float>(), 1e-4) << "row " << row << " token " << i;
  }
  // prefill (1 row), the first decode at 5 rows, then fewer, down to the longest row alone
  ASSERT_GE(sizes.size(), 3u);
  EXPECT_EQ(sizes[0], 1);
  EXPECT_EQ(sizes[1], 5);
  EXPECT_TRUE(std::is_sorted(sizes.begin() + 1, sizes.end(), std::greater<int64_t>()));
  EXPECT_LT(sizes.back(), 5);
}

TEST(Engine, SamplerTopKTopPAndArgmax) {
  // probabilities 0.6, 0.3, 0.1 in a batch of 4000 identical rows
  torch::Tensor logits = torch::log(torch::tensor({0.1, 0.6, 0.3})).to(torch::kFloat32).view({1, 3}).expand({4000, 3});
  auto gen = gpt_make_generator(torch::kCPU, 1);
  std::vector<int64_t> all_rows(4000);
  std::iota(all_rows.begin(), all_rows.end(), 0);
  auto counts = [&](double temperature, int64_t k, double p) {
    std::vector<int64_t> n(3, 0);
    for (int64_t t : engine_sample_rows(logits, {{all_rows, temperature, k, p, &gen}})) n.at(t)++;
    return n;
  };
  EXPECT_EQ(counts(0.0, 0, 1.0), (std::vector<int64_t>{0, 4000, 0}));
  EXPECT_EQ(counts(1.0, 0, 0.5), (std::vector<int64_t>{0, 4000, 0}));  // 0.6 alone reaches 0.5
  auto p80 = counts(1.0, 0, 0.8);                                      // 0.6 + 0.3, renormalised
  EXPECT_EQ(p80[0], 0);
  EXPECT_NEAR(p80[1] / 4000.0, 2.0 / 3, 0.03);
  auto k2 = counts(1.0, 2, 1.0);  // top-2 is the same set
  EXPECT_EQ(k2[0], 0);
  EXPECT_NEAR(k2[1] / 4000.0, 2.0 / 3, 0.03);
  auto all = counts(1.0, 0, 1.0);
  EXPECT_NEAR(all[0] / 4000.0, 0.1, 0.02);
  EXPECT_NEAR(all[1] / 4000.0, 0.6, 0.03);
  auto hot = counts(0.5, 0, 1.0);  // temperature 0.5 squares the odds: 0.36, 0.09, 0.01 -> /0.46
  EXPECT_NEAR(hot[1] / 4000.0, 0.36 / 0.46, 0.03);
  EXPECT_THROW(engine_sample_rows(logits, {{all_rows, -1.0, 0, 1.0, &gen}}), Error);
  EXPECT_THROW(engine_sample_rows(logits, {{all_rows, 1.0, 0, 0.0, &gen}}), Error);
  EXPECT_THROW(engine_sample_rows(logits, {{all_rows, 1.0, 0, 1.0, nullptr}}), Error);
}

// upstream engine.py's sample_next_token (plus top-p), with ATen's multinomial: what each
// request of a batched step must draw, alone, from its own generator
static torch::Tensor upstream_sample(const torch::Tensor& logits, at::Generator& gen, double t, int64_t k, double p) {
  if (t == 0.0) return at::argmax(logits, -1, true);
  if (k > 0 || p < 1.0) {
    auto [vals, idx] = at::topk(logits, k > 0 ? std::min<int64_t>(k, logits.size(-1)) : logits.size(-1), -1);
    torch::Tensor probs = at::softmax(vals / t, -1);
    if (p < 1.0) probs = probs.masked_fill(probs.cumsum(-1) - probs >= p, 0.0);
    return idx.gather(1, at::multinomial(probs, 1, false, gen));
  }
  return at::multinomial(at::softmax(logits / t, -1), 1, false, gen);
}

TEST(Engine, BatchedSamplingDrawsWhatEachRequestDrawsAlone) {
  // nine rows, six requests mixing every kind (two share a top-k with other temperatures, two
  // share the whole vocabulary with other temperatures), rows interleaved; 30 steps, so the
  // generators' streams carry on from step to step
  struct Ask {
    std::vector<int64_t> rows;
    double t;
    int64_t k;
    double p;
  };
  const std::vector<Ask> asks = {{{0, 7}, 0.0, 0, 1.0}, {{1, 2}, 0.8, 0, 1.0}, {{3}, 1.3, 0, 1.0},
                                 {{4}, 1.2, 5, 1.0},    {{5, 8}, 0.7, 5, 0.6}, {{6}, 1.0, 0, 0.9}};
  std::vector<at::Generator> batched, alone;
  for (size_t i = 0; i < asks.size(); i++) {
    batched.push_back(gpt_make_generator(torch::kCPU, 100 + i));
    alone.push_back(gpt_make_generator(torch::kCPU, 100 + i));
  }
  auto data = gpt_make_generator(torch::kCPU, 9);
  for (int step = 0; step < 30; step++) {
    torch::Tensor logits = at::randn({9, 50}, data, torch::kFloat32) * 3;
    std::vector<SampleRequest> requests;
    for (size_t i = 0; i < asks.size(); i++)
      requests.push_back({asks[i].rows, asks[i].t, asks[i].k, asks[i].p, &batched[i]});
    std::vector<int64_t> got = engine_sample_rows(logits, requests);
    for (size_t i = 0; i < asks.size(); i++) {
      const Ask& a = asks[i];
      torch::Tensor want =
          upstream_sample(logits.index_select(0, torch::tensor(a.rows)), alone[i], a.t, a.k, a.p).view({-1});
      for (size_t j = 0; j < a.rows.size(); j++)
        EXPECT_EQ(got[a.rows[j]], want[j].item<int64_t>())
            << "step " << step << " request " << i << " row " << a.rows[j];
    }
  }
}

TEST(Engine, PythonBlockForcesTheCalculatorOutput) {
  ScriptedModel s;
  // "A" <|python_start|> 1 2 + 3 <|python_end|> ... "B" <|assistant_end|>
  s.script = {
      {ASSISTANT_START, 'A'}, {'A', PYTHON_START}, {PYTHON_START, '1'}, {'1', '2'},          {'2', '+'}, {'+', '3'},
      {'3', PYTHON_END},      {PYTHON_END, 'Z'},   {OUTPUT_END, 'B'},   {'B', ASSISTANT_END}};
  Engine engine(scripted(s), byte_tokenizer());
  GenerateOptions opt;
  opt.num_samples = 2;
  opt.max_tokens = 40;
  std::vector<TokenColumn> columns;
  GenerateResult r = engine.generate(kChatPrompt, opt, [&](const TokenColumn& c) {
    columns.push_back(c);
    return true;
  });
  // 12 + 3: the forced tokens replace whatever the model samples meanwhile ('Z', '2', ...)
  const std::vector<int32_t> want = {'A',        PYTHON_START, '1', '2', '+',        '3',
                                     PYTHON_END, OUTPUT_START, '1', '5', OUTPUT_END, 'B'};
  const std::vector<uint8_t> want_mask = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1};
  for (int row = 0; row < 2; row++) {
    EXPECT_EQ(generated(r, row), want);
    std::vector<uint8_t> mask(r.masks[row].begin() + r.prompt_len, r.masks[row].end());
    EXPECT_EQ(mask, want_mask);
    EXPECT_EQ(std::vector<uint8_t>(r.masks[row].begin(), r.masks[row].begin() + r.prompt_len),
              std::vector<uint8_t>(kChatPrompt.size(), 0));
    EXPECT_EQ(r.finish[row], FinishReason::stop);
    EXPECT_EQ(r.stop_token[row], ASSISTANT_END);
  }
  // the stream: one column per token, the terminal one included, then nothing
  ASSERT_EQ(columns.size(), want.size() + 1);
  EXPECT_EQ(r.steps, (int64_t)columns.size());
  for (size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(columns[i].tokens, (std::vector<int32_t>{want[i], want[i]}));
    EXPECT_EQ(columns[i].masks, (std::vector<uint8_t>{want_mask[i], want_mask[i]}));
    EXPECT_EQ(columns[i].finished[0], FinishReason::none);
  }
  EXPECT_EQ(columns.back().tokens, (std::vector<int32_t>{ASSISTANT_END, ASSISTANT_END}));
  EXPECT_EQ(columns.back().finished, (std::vector<FinishReason>{FinishReason::stop, FinishReason::stop}));
}

TEST(Engine, FailedCalculationInjectsNothing) {
  ScriptedModel s;  // <|python_start|> 1 / 0 <|python_end|> C <|assistant_end|>
  s.script = {{ASSISTANT_START, PYTHON_START},
              {PYTHON_START, '1'},
              {'1', '/'},
              {'/', '0'},
              {'0', PYTHON_END},
              {PYTHON_END, 'C'},
              {'C', ASSISTANT_END}};
  Engine engine(scripted(s), byte_tokenizer());
  GenerateResult r = engine.generate_batch(kChatPrompt, GenerateOptions{});
  EXPECT_EQ(generated(r, 0), (std::vector<int32_t>{PYTHON_START, '1', '/', '0', PYTHON_END, 'C'}));
  // and with the tool off, even a good expression is left alone
  s.script[PYTHON_START] = '2';
  s.script['2'] = PYTHON_END;
  GenerateOptions off;
  off.use_calculator = false;
  r = engine.generate_batch(kChatPrompt, off);
  EXPECT_EQ(generated(r, 0), (std::vector<int32_t>{PYTHON_START, '2', PYTHON_END, 'C'}));
  EXPECT_EQ(r.masks[0].back(), 1);
}

TEST(Engine, PerRowStopsBudgetsAndCancel) {
  ScriptedModel s;  // an endless a b c a b c ...
  s.script = {{ASSISTANT_START, 'a'}, {'a', 'b'}, {'b', 'c'}, {'c', 'a'}};
  Engine engine(scripted(s), byte_tokenizer());
  GenerateOptions opt;
  opt.num_samples = 3;
  opt.max_tokens = 10;
  opt.row_stop_tokens = {{}, {'c'}, {}};
  opt.row_max_tokens = {10, 10, 4};
  GenerateResult r = engine.generate_batch(kChatPrompt, opt);
  EXPECT_EQ(generated(r, 0), (std::vector<int32_t>{'a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c', 'a'}));
  EXPECT_EQ(r.finish[0], FinishReason::length);
  EXPECT_EQ(generated(r, 1), (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(r.finish[1], FinishReason::stop);
  EXPECT_EQ(r.stop_token[1], 'c');
  EXPECT_EQ(generated(r, 2), (std::vector<int32_t>{'a', 'b', 'c', 'a'}));
  EXPECT_EQ(r.finish[2], FinishReason::length);
  // prefill, decode at 3 rows, 2 rows once row 1 stopped (1 of 3 >= a quarter), then row 0 alone
  EXPECT_EQ(s.batch_sizes, (std::vector<int64_t>{1, 3, 3, 2, 1, 1, 1, 1, 1, 1}));
  // a callback returning false stops every row at once
  s.batch_sizes.clear();
  opt.row_stop_tokens.clear();
  opt.row_max_tokens.clear();
  int seen = 0;
  r = engine.generate(kChatPrompt, opt, [&](const TokenColumn&) { return ++seen < 3; });
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(r.steps, 3);
  for (int row = 0; row < 3; row++) {
    EXPECT_EQ(generated(r, row), (std::vector<int32_t>{'a', 'b', 'c'}));
    EXPECT_EQ(r.finish[row], FinishReason::cancelled);
  }
  EXPECT_EQ(s.batch_sizes.size(), 3u);  // prefill + 2 decodes: no forward after the stop
}

TEST(Engine, BadRequestsAreErrors) {
  ScriptedModel s;
  Engine engine(scripted(s), byte_tokenizer());
  GenerateOptions opt;
  EXPECT_THROW(engine.generate({}, opt), Error);
  opt.num_samples = 0;
  EXPECT_THROW(engine.generate({1}, opt), Error);
  opt.num_samples = 2;
  opt.row_max_tokens = {1};
  EXPECT_THROW(engine.generate({1}, opt), Error);
  opt.row_max_tokens.clear();
  opt.top_p = 0.0;
  EXPECT_THROW(engine.generate({1}, opt), Error);
  opt.top_p = 1.0;
  opt.max_tokens = 700;  // past max_positions (640)
  EXPECT_THROW(engine.generate({1}, opt), Error);
  opt.max_tokens = -1;  // the default budget: sequence_len (64) minus the prompt
  EXPECT_THROW(engine.generate(std::vector<int32_t>(64, 1), opt), Error);
  GenerateResult r = engine.generate(std::vector<int32_t>(60, 1), opt);
  EXPECT_EQ(r.tokens[0].size(), 64u);  // 4 tokens of '?' (the fallback), then the budget ends
  EXPECT_EQ(r.finish[0], FinishReason::length);
  opt.max_tokens = 0;
  r = engine.generate({1, 2}, opt);
  EXPECT_EQ(r.tokens[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.steps, 0);
}
