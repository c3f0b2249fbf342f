// `base-train --dry-run` through the real binary: its plan against upstream nanochat's own
// base_train.py printout for the same flags, the default device batch it plans for an 80 GB
// card, and one clear error line for a bad size; the device batch the ranks agree on (the
// smallest), over two Gloo ranks in this process.
//
// The expected numbers are upstream's printout (scripts/base_train.py at karpathy/nanochat
// 92d63d4: "Parameter counts", "Estimated FLOPs per token", "Auto-computed optimal batch size",
// "Scaling LRs by", "Scaling weight decay from", "Scaling the LR for the AdamW parameters",
// "Calculated number of iterations", "Total number of training tokens", "Total batch size ...
// => gradient accumulation steps"), run on the meta device up to its training loop with vocab
// 32768 and the world size given, copied here by hand.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/base_train.h"
#include "nanochat/dist.h"
#include "nanochat/gpt/memory.h"
#include "test_util.h"

namespace {

struct Upstream {
  const char* flags;
  int world;
  int64_t wte, value_embeds, lm_head, transformer_matrices, scalars, total;
  const char* flops_per_token;  // as printed: %e
  int64_t total_batch_size;
  const char* batch_lr_scale;   // %.4f, "1.0000" when upstream prints no scaling line
  const char* weight_decay;     // %.6f, "0.280000" when upstream prints no scaling line
  const char* dmodel_lr_scale;  // %.6f
  int64_t num_iterations, total_tokens, device_batch_size, grad_accum_steps;
};

const Upstream kUpstream[] = {
    {"--depth 12", 1, 25165824, 150994944, 25165824, 84935088, 50, 286261730, "7.596960e+08", 524288, "1.0000",
     "0.280000", "1.000000", 2520, 1321205760, 32, 8},
    {"--depth 20", 8, 41943040, 419430400, 41943040, 393217200, 66, 896533746, "2.886213e+09", 1048576, "1.4142",
     "0.100188", "0.774597", 4980, 5221908480, 32, 2},
    {"--depth 24", 8, 50331648, 603979776, 50331648, 679478976, 74, 1384122122, "4.775226e+09", 1048576, "1.4142",
     "0.059738", "0.707107", 8352, 8757706752, 32, 2},
    // the speedrun's flags
    {"--depth 24 --target-param-data-ratio 8 --device-batch-size 16", 8, 50331648, 603979776, 50331648, 679478976, 74,
     1384122122, "4.775226e+09", 1048576, "1.4142", "0.059738", "0.707107", 5568, 5838471168, 16, 4},
    {"--depth 26", 8, 54525952, 708837376, 54525952, 863897580, 78, 1681786938, "5.991051e+09", 1048576, "1.4142",
     "0.047470", "0.679366", 10510, 11020533760, 32, 2},
    {"--depth 12 --num-iterations 20 --total-batch-size 65536 --device-batch-size 8", 1, 25165824, 150994944, 25165824,
     84935088, 50, 286261730, "7.596960e+08", 65536, "0.3536", "0.098995", "1.000000", 20, 1310720, 8, 4},
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// runs the dry-run in an empty base dir (no tokenizer: vocab 32768 assumed); the last line's JSON
nlohmann::json dry_run(const std::string& flags, CommandResult* result = nullptr) {
  const std::string base = temp_dir();
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base + " " NANOCHAT_BIN " base-train --dry-run " + flags);
  if (result) *result = r;
  EXPECT_EQ(r.rc, 0) << r.err;
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t nl = out.rfind('\n');
  return nlohmann::json::parse(nl == std::string::npos ? out : out.substr(nl + 1), nullptr, false);
}

TEST(BaseTrainPlan, EqualsUpstreamPrintout) {
  for (const Upstream& u : kUpstream) {
    SCOPED_TRACE(std::string(u.flags) + " on " + std::to_string(u.world) + " rank(s)");
    CommandResult r;
    nlohmann::json j = dry_run(std::string(u.flags) + " --world-size " + std::to_string(u.world), &r);
    ASSERT_TRUE(j.is_object()) << r.out;
    const nlohmann::json& p = j["param_counts"];
    EXPECT_EQ(p["wte"].get<int64_t>(), u.wte);
    EXPECT_EQ(p["value_embeds"].get<int64_t>(), u.value_embeds);
    EXPECT_EQ(p["lm_head"].get<int64_t>(), u.lm_head);
    EXPECT_EQ(p["transformer_matrices"].get<int64_t>(), u.transformer_matrices);
    EXPECT_EQ(p["scalars"].get<int64_t>(), u.scalars);
    EXPECT_EQ(j["num_params"].get<int64_t>(), u.total);
    EXPECT_EQ(fmt("%e", j["flops_per_token"].get<double>()), u.flops_per_token);
    EXPECT_EQ(j["total_batch_size"].get<int64_t>(), u.total_batch_size);
    EXPECT_EQ(fmt("%.4f", j["batch_lr_scale"].get<double>()), u.batch_lr_scale);
    EXPECT_EQ(fmt("%.6f", j["weight_decay"].get<double>()), u.weight_decay);
    EXPECT_EQ(fmt("%.6f", j["dmodel_lr_scale"].get<double>()), u.dmodel_lr_scale);
    EXPECT_EQ(j["num_iterations"].get<int64_t>(), u.num_iterations);
    EXPECT_EQ(j["total_tokens"].get<int64_t>(), u.total_tokens);
    EXPECT_EQ(j["device_batch_size"].get<int64_t>(), u.device_batch_size);
    EXPECT_EQ(j["grad_accum_steps"].get<int64_t>(), u.grad_accum_steps);
    EXPECT_EQ(j["vocab_size"].get<int64_t>(), 32768);
    EXPECT_TRUE(j["vocab_assumed"].get<bool>());
    EXPECT_GT(j["estimated_peak_memory_bytes"].get<int64_t>(), 0);
    EXPECT_NE(r.out.find("assumed"), std::string::npos) << "says the vocab is assumed";
  }
}

TEST(BaseTrainPlan, DefaultDeviceBatchForAnEightyGigabyteCard) {
  // 8 ranks of an 80 GB GPU: d20 gets upstream's 32, d24 the speedrun's 16
  nlohmann::json d20 = dry_run("--depth 20 --world-size 8 --gpu-memory 80GB");
  EXPECT_EQ(d20["device_batch_size"].get<int64_t>(), 32);
  EXPECT_EQ(d20["grad_accum_steps"].get<int64_t>(), 2);
  EXPECT_EQ(d20["memory_budget_bytes"].get<int64_t>(), 80000000000);
  nlohmann::json d24 = dry_run("--depth 24 --world-size 8 --gpu-memory 80GB");
  EXPECT_EQ(d24["device_batch_size"].get<int64_t>(), 16);
  EXPECT_EQ(d24["grad_accum_steps"].get<int64_t>(), 4);
  EXPECT_LE(d24["estimated_peak_memory_bytes"].get<int64_t>(), 72000000000);
  // the wall-clock: total FLOPs / (MFU x the H100's 989 TFLOPS x 8)
  EXPECT_NEAR(d24["estimated_seconds"].get<double>(), 4.775226e9 * 8757706752.0 / (0.4 * 989e12 * 8),
              1e-5 * d24["estimated_seconds"].get<double>());
}

TEST(BaseTrainPlan, BadSizeIsOneClearLine) {
  const std::string base = temp_dir();
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base + " " NANOCHAT_BIN " base-train --dry-run --gpu-memory 80");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--gpu-memory '80'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
}

// a loopback port nothing listens on now (the kernel's pick for a socket bound to port 0)
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  bind(fd, (sockaddr*)&a, sizeof a);
  getsockname(fd, (sockaddr*)&a, &n);
  close(fd);
  return ntohs(a.sin_port);
}

// runs rank_main(rank, dist) on two Gloo ranks of this process (rank 1 on a thread), each with
// its own Dist on a free loopback port, and the dist timeout `timeout_s` seconds meanwhile
template <class F>
void on_two_ranks(F rank_main, const char* timeout_s = "600") {
  const int port = free_port();
  const char* old_timeout = std::getenv("NANOCHAT_DIST_TIMEOUT");
  const std::string saved = old_timeout ? old_timeout : "";
  setenv("NANOCHAT_DIST_TIMEOUT", timeout_s, 1);
  auto run = [&](int rank) {
    nanochat::DistEnv env;
    env.rank = rank;
    env.world_size = 2;
    env.local_rank = rank;
    env.local_world_size = 2;
    env.master_port = port;
    nanochat::Dist dist(env, torch::Device(torch::kCPU));
    try {
      rank_main(rank, dist);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  std::thread r1(run, 1);
  run(0);
  r1.join();
  if (old_timeout) setenv("NANOCHAT_DIST_TIMEOUT", saved.c_str(), 1);
  else unsetenv("NANOCHAT_DIST_TIMEOUT");
}

// each rank fits its own free memory; they train with the smallest (ranks that
// disagree step out of line: eval step counts, loader state)
TEST(BaseTrainPlan, RanksAgreeOnTheSmallestDeviceBatch) {
  const int64_t fits[2] = {16, 4};
  int64_t agreed[2] = {-1, -1};
  on_two_ranks([&](int rank, nanochat::Dist& dist) {
    agreed[rank] = nanochat::base_train_agree_device_batch(fits[rank], dist);
  });
  EXPECT_EQ(agreed[0], 4);
  EXPECT_EQ(agreed[1], 4);
}

// a rank whose memory query gave nothing (budget <= 0) still joins the agreement with the
// flag's default; rank 0 fits exactly 4 rows of a d4 model (its budget sits just above the 4-row
// estimate over 0.9), so both plan 4. Were rank 1 to skip the all-reduce, rank 0 would wait in
// it until the 30 s timeout set here and fail.
TEST(BaseTrainPlan, ARankWithNoFreeMemoryStillAgrees) {
  nanochat::BaseTrainFlags o;
  o.depth = 4;
  const nanochat::GPTConfig config = nanochat::gpt_config_from_depth(o.depth, 32768, o.max_seq_len, o.window_pattern,
                                                                     o.aspect_ratio, o.head_dim);
  const int64_t four_rows = nanochat::gpt_train_memory(config, 4, torch::kBFloat16, 2, false).total;
  const int64_t eight_rows = nanochat::gpt_train_memory(config, 8, torch::kBFloat16, 2, false).total;
  ASSERT_LT(four_rows, eight_rows);
  nanochat::MemoryBudget budgets[2];
  budgets[0].bytes = four_rows / 9 * 10 + 1000;  // 90% of it holds 4 rows, not 8
  budgets[0].source = "a test's 4-row budget";
  ASSERT_LT(budgets[0].bytes / 10 * 9, eight_rows);
  budgets[1].bytes = 0;  // what a failed memory query reports
  int64_t rows[2] = {-1, -1};
  on_two_ranks(
      [&](int rank, nanochat::Dist& dist) {
        rows[rank] =
            nanochat::base_train_plan(o, 32768, 2, "cuda", torch::kBFloat16, budgets[rank], &dist).device_batch_size;
      },
      "30");
  EXPECT_EQ(rows[0], 4);
  EXPECT_EQ(rows[1], 4);
}

// The step-time model against numbers worked out by hand from the H200's figures (docs/log.md):
// a d20 L micro-step at B=16 is 20 MLPs at 4.15 ms times 1.5 (the block's GEMMs are 12 C^2 a
// token, the MLP's 8) = 124.5 ms, 20 causal layers at 1.64 ms, the CE's 13.97 ms, 41 resid norms
// at 0.82 ms and 40 rotary norms at 0.33 ms; upstream's micro-step is its measured 32768 tokens
// at 157,537 tok/s, the calibration everything else hangs on.
TEST(BaseTrainPlan, StepTimeModelMatchesHandComputedFigures) {
  using nanochat::base_train_step_model;
  const nanochat::GPTConfig d20 = nanochat::gpt_config_from_depth(20, 32768, 2048, "L");
  const nanochat::StepTimeModel up = base_train_step_model(d20, 16, 2048, 989e12, 4.8e12, /*upstream=*/true);
  EXPECT_NEAR(up.total(), 32768.0 / 157537, 1e-9);
  EXPECT_NEAR(up.matmuls, 124.5e-3, 1e-9);
  EXPECT_NEAR(up.attention, 32.8e-3, 1e-9);
  // the CE's GEMMs at the MLP's rate (8.246e12 FLOPs at 620.9 TFLOPS) + 8 bytes a logit at 80% of 4.3 TB/s
  EXPECT_NEAR(
      up.lm_head_ce,
      6.0 * 32768 * 1280 * 32768 / (6.0 * 32768 * 8 * 1280 * 1280 / 4.15e-3) + 8.0 * 32768 * 32768 / (0.8 * 4.3e12),
      1e-9);
  const nanochat::StepTimeModel ours = base_train_step_model(d20, 16, 2048, 989e12, 4.8e12, /*upstream=*/false);
  EXPECT_NEAR(ours.matmuls, 124.5e-3, 1e-9);
  EXPECT_NEAR(ours.attention, 32.8e-3, 1e-9);
  EXPECT_NEAR(ours.lm_head_ce, 13.97e-3, 1e-9);
  EXPECT_NEAR(ours.norms, 41 * 0.82e-3 + 40 * 0.33e-3, 1e-9);
  EXPECT_NEAR(ours.other, up.other, 1e-12);
  // other = upstream's step less its modelled ops: 208.002 - (124.5 + 32.8 + 15.776 + 15.853) ms
  EXPECT_NEAR(ours.other, 19.073e-3, 0.002e-3);
  EXPECT_NEAR(ours.total(), 237.163e-3, 0.002e-3);
  // the norm kernels at 80% of the bandwidth: 41 x 20 B + 40 x 12 B a element over 3.44 TB/s
  const nanochat::StepTimeModel fast = base_train_step_model(d20, 16, 2048, 989e12, 4.8e12, false, 0.8);
  EXPECT_NEAR(fast.norms, (41 * 20.0 + 40 * 12.0) * 32768 * 1280 / (0.8 * 4.3e12), 1e-9);
  EXPECT_NEAR(up.total() / fast.total(), 1.009, 0.001);

  // d24 SSSL at B=32 on an H100 (989 TFLOPS, 3.35 TB/s nominal): 6 L and 18 S layers of 12
  // heads; compute-bound ops scale with tokens, width and heads, memory-bound ones also by
  // 4.3/3.35 x 4.8/4.3 (the H200's measured share of its nominal bandwidth)
  const nanochat::GPTConfig d24 = nanochat::gpt_config_from_depth(24, 32768, 2048, "SSSL");
  const nanochat::StepTimeModel h100 = base_train_step_model(d24, 32, 2048, 989e12, 3.35e12, false, 0.8);
  EXPECT_NEAR(h100.matmuls, 4.15e-3 * 1.5 * 24 * 1.44 * 2, 1e-9);
  EXPECT_NEAR(h100.attention, (6 * 1.64e-3 + 18 * 1.69e-3) * 2 * 1.2, 1e-9);
  EXPECT_NEAR(h100.lm_head_ce, 13.97e-3 * 2 * 1.2, 1e-9);
  EXPECT_NEAR(h100.norms, (49 * 20.0 * 65536 * 1536 + 24 * 12.0 * 65536 * 3072) / (0.8 * 3.35e12 * 4.3 / 4.8), 1e-9);
  EXPECT_NEAR(h100.total(), 704.38e-3, 0.01e-3);
}

TEST(BaseTrainPlan, DryRunPrintsTheModelsWallClock) {
  nlohmann::json j = dry_run("--depth 20 --world-size 8 --gpu-memory 80GB --gpu-name H200 --window-pattern L");
  ASSERT_TRUE(j["model_micro_step_ms"].is_object());
  const double micro = j["model_micro_step_ms"]["total"].get<double>();
  // d20 on 8 ranks at B=32: two micro-steps a step, each twice the B=16 figures above
  EXPECT_NEAR(micro, 2 * 237.163, 0.01);
  EXPECT_NEAR(j["model_upstream_micro_step_ms"]["total"].get<double>(), 2 * 208.002, 0.01);
  EXPECT_NEAR(j["model_seconds"].get<double>(), micro / 1e3 * 2 * 4980, 1e-6 * micro * 2 * 4980);
  nlohmann::json cpu = dry_run("--depth 4 --device-type cpu");
  EXPECT_TRUE(cpu["model_seconds"].is_null());
}

}  // namespace
