// infer-bench: the step statistics and MBU arithmetic by hand, and the real binary on a random-weight d2 checkpoint, whose JSON line is checked
// against numbers worked out here from the model's configuration and from its own printed values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "nanochat/common/percentile.h"
#include "nanochat/engine/infer_bench.h"
#include "server_fixture.h"
#include "test_util.h"

using namespace nanochat;

TEST(InferBench, PercentilesAndRatesByHand) {
  // upstream's median is sorted[n // 2]; p90 sorted[floor(0.9 n)]
  EXPECT_EQ(percentile({0.4, 0.1, 0.3, 0.2}, 0.5), 0.3);
  EXPECT_EQ(percentile({0.4, 0.1, 0.3, 0.2}, 0.9), 0.4);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3}, 0.5), 3);
  EXPECT_EQ(percentile({5, 1, 4, 2, 3, 9, 8, 7, 6, 10}, 0.9), 10);
  EXPECT_EQ(percentile({}, 0.5), 0);
  // 4 steps in 1.0 s: 4 tokens a second per row, 16 over a batch of 4
  InferBenchStep s = infer_bench_step_stats({0.1, 0.2, 0.3, 0.4}, 4);
  EXPECT_DOUBLE_EQ(s.median_sec, 0.3);
  EXPECT_DOUBLE_EQ(s.p90_sec, 0.4);
  EXPECT_DOUBLE_EQ(s.tok_per_sec_row, 4.0);
  EXPECT_DOUBLE_EQ(s.tok_per_sec_total, 16.0);
  // 1 GB read in 10 ms is 100 GB/s: half of a 200 GB/s device
  EXPECT_DOUBLE_EQ(infer_bench_mbu_percent(1e9, 0.01, 2e11), 50.0);
  EXPECT_EQ(infer_bench_mbu_percent(1e9, 0.01, INFINITY), 0.0);  // unknown device
}

TEST(InferBench, PromptHasExactlyTheAskedTokensBosFirst) {
  Tokenizer tok = tiny_chat_tokenizer();
  for (int64_t n : {1, 7, 300}) {
    std::vector<int32_t> p = infer_bench_prompt(tok, n);
    ASSERT_EQ((int64_t)p.size(), n);
    EXPECT_EQ(p[0], tok.bos_id());
  }
}

TEST(InferBench, CliJsonIsConsistentOnATinyCheckpoint) {
  const std::string base = tiny_chat_base_dir();  // sft d2: 2 layers, 2 KV heads of 64, seq len 128
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base +
                              " OMP_NUM_THREADS=1 " NANOCHAT_BIN
                              " infer-bench -i sft -g d2 --device-type cpu --prompt-tokens 200 --decode-tokens 12"
                              " --batch-sizes 1,4");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_NE(r.out.find("Prefill (batch 1"), std::string::npos) << r.out;  // the card came first

  // the prompt is clamped to sequence_len - decode_tokens
  EXPECT_EQ(j["prompt_tokens"], 128 - 12);
  EXPECT_EQ(j["step"], 0);
  EXPECT_EQ(j["model_tag"], "d2");
  // KV cache: k and v, per layer, per KV head, head_dim values of 4 bytes (fp32 on the CPU)
  const int64_t kv_per_token = 2 * 2 * 2 * 64 * 4;
  EXPECT_EQ(j["kv_bytes_per_token"], kv_per_token);
  // read per step at context 116 + 6 = 122, a layer's k and v (2 x 2 heads x 64 x 4 bytes) over
  // min(122, window) tokens: the short window (a quarter of 128, rounded up to 128) and the
  // full one both cover it
  EXPECT_EQ(j["context_mid"], 122);
  const int64_t kv_layer_token = 2 * 2 * 64 * 4;
  EXPECT_EQ(j["kv_read_bytes_per_step"], kv_layer_token * (122 + 122));
  // weights as stored: every parameter, counted from the configuration (fp32 masters; the
  // embeddings fp32 too on the CPU)
  const ScalingParams p = gpt_num_scaling_params(tiny_chat_config(j["model_config"]["vocab_size"].get<int64_t>()));
  EXPECT_EQ(j["weight_bytes"], p.total * 4);
  EXPECT_EQ(j["num_params"], p.total);
  const double peak_bw = j["peak_bandwidth_bytes_per_sec"].get<double>();
  EXPECT_GT(peak_bw, 1e8);
  EXPECT_GT(j["prefill"]["tok_per_sec"].get<double>(), 0);
  EXPECT_NEAR(j["prefill"]["tok_per_sec"].get<double>() * j["prefill"]["time_sec"].get<double>(), 116, 1e-6);

  ASSERT_EQ(j["sweep"].size(), 2u);
  for (const auto& row : j["sweep"]) {
    const int64_t b = row["batch_size"];
    SCOPED_TRACE(b);
    EXPECT_EQ(row["decode_steps"], 11);  // 12 tokens: the first is the TTFT's
    const double tpot = row["tpot_sec"], per_row = row["tok_per_sec_per_row"], total = row["tok_per_sec"];
    EXPECT_GT(tpot, 0);
    EXPECT_GE(row["tpot_p90_sec"].get<double>(), tpot);
    EXPECT_GT(row["ttft_sec"].get<double>(), 0);
    EXPECT_NEAR(total, per_row * (double)b, 1e-9 * total);
    // bytes a step reads: the weights once, each row's KV at the middle context
    const double bytes = (double)p.total * 4 + (double)b * kv_layer_token * (122 + 122);
    EXPECT_DOUBLE_EQ(row["bytes_per_step"].get<double>(), bytes);
    EXPECT_NEAR(row["mbu_percent"].get<double>(), 100.0 * bytes / tpot / peak_bw,
                1e-9 * row["mbu_percent"].get<double>());
    EXPECT_GE(row["peak_memory_bytes"].get<int64_t>(), 0);
  }
  run_shell("rm -rf '" + base + "'");
}

TEST(InferBench, BadFlagsGiveOneClearError) {
  const std::string base = tiny_chat_base_dir();
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base +
                              " " NANOCHAT_BIN " infer-bench -i sft --device-type cpu --decode-tokens 200");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("leaves no room for a prompt"), std::string::npos) << r.err;
  r = run_shell("NANOCHAT_BASE_DIR=" + base + " " NANOCHAT_BIN " infer-bench -i sft --batch-sizes 1,0");
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run_shell("NANOCHAT_BASE_DIR=" + base + " " NANOCHAT_BIN " infer-bench -i base");  // no base checkpoint
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  run_shell("rm -rf '" + base + "'");
}
