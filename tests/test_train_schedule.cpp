// The base-train arithmetic: scaling rules and schedules (upstream's base_train.py) against numbers
// worked out by hand and the leaderboard's logged step counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/train_schedule.h"

using namespace nanochat;

// scaling params (transformer matrices + lm_head) of upstream's num_scaling_params at each depth, vocab 32768
constexpr int64_t kScalingD12 = 110100912, kScalingD16 = 234881792, kScalingD20 = 435160240, kScalingD24 = 729810624,
                  kScalingD26 = 918423532;

TEST(Schedule, PythonRoundHalvesToEven) {
  EXPECT_EQ(python_round(0.5), 0);
  EXPECT_EQ(python_round(1.5), 2);
  EXPECT_EQ(python_round(2.5), 2);
  EXPECT_EQ(python_round(6.5), 6);
  EXPECT_EQ(python_round(-0.5), 0);
  EXPECT_EQ(python_round(-1.5), -2);
  EXPECT_EQ(python_round(2.4), 2);
  EXPECT_EQ(python_round(2.6), 3);
}

TEST(Schedule, LeaderboardIterationCounts) {
  // Run 1: d24, ratio 12, fixed 0.5M batch -> step 16704
  TrainScaling r1 = train_scaling(kScalingD24, kScalingD12, 12, 524288, 0.28);
  EXPECT_EQ(train_num_iterations(-1, -1, 0, r1, 12), 16704);
  // Run 3: d26, ratio 8.25, 1M batch -> step 7226. Its d26 (commit 2c062aa) had ve_gates
  // of 32 input channels: 13 gates x 13 heads x 32 = 5408 params instead of today's 2028,
  // so 918,426,912 scaling params: int(8.25 * that) // 2^20 = 7226 (7226.01). Today's d26
  // gives 7,576,994,139 // 2^20 = 7225 (7225.98), the same formula (floor division).
  TrainScaling r3_then = train_scaling(kScalingD26 - 2028 + 5408, kScalingD12, 8.25, 1048576, 0.28);
  EXPECT_EQ(train_num_iterations(-1, -1, 0, r3_then, 8.25), 7226);
  TrainScaling r3 = train_scaling(kScalingD26, kScalingD12, 8.25, 1048576, 0.28);
  EXPECT_EQ(train_num_iterations(-1, -1, 0, r3, 8.25), 7225);
  // precedence: --num-iterations, then --target-flops: round(1e18 / (1e9 * 2^20)) = 954
  EXPECT_EQ(train_num_iterations(77, 1e18, 1e9, r3, 8.25), 77);
  EXPECT_EQ(train_num_iterations(-1, 1e18, 1e9, r3, 8.25), 954);
  EXPECT_THROW(train_num_iterations(-1, -1, 1e9, r3, -1), Error);
}

TEST(Schedule, AutoBatchAndScaledWeightDecay) {
  struct Row {
    int64_t params;
    int64_t batch;
    double wd;
  };
  // batch: 2^round(log2(2^19 * (D/D_ref)^0.383)); wd: 0.28 * sqrt(B/2^19) * D_ref/D, by hand:
  // d16: 0.28 * 0.46875 = 0.13125; d20: 0.28 * 1.41421 * 0.253013 = 0.100189;
  // d24: 0.28 * 1.41421 * 0.150862 = 0.059738; d26: 0.28 * 1.41421 * 0.119881 = 0.047470
  const Row rows[] = {{kScalingD12, 1 << 19, 0.28},
                      {kScalingD16, 1 << 19, 0.13125},
                      {kScalingD20, 1 << 20, 0.100189},
                      {kScalingD24, 1 << 20, 0.059738},
                      {kScalingD26, 1 << 20, 0.047470}};
  for (const Row& r : rows) {
    for (double ratio : {8.0, 12.0, 20.0}) {  // the ratio cancels out of both
      TrainScaling s = train_scaling(r.params, kScalingD12, ratio, -1, 0.28);
      EXPECT_EQ(s.total_batch_size, r.batch) << r.params;
      EXPECT_NEAR(s.weight_decay, r.wd, 2e-6) << r.params;
      EXPECT_NEAR(s.batch_lr_scale, r.batch == (1 << 20) ? std::sqrt(2.0) : 1.0, 1e-12);
    }
  }
}

TEST(Schedule, GradAccumAndItsError) {
  EXPECT_EQ(train_grad_accum(524288, 32, 2048, 8), 1);
  EXPECT_EQ(train_grad_accum(524288, 16, 2048, 8), 2);
  EXPECT_EQ(train_grad_accum(16384, 32, 512, 1), 1);
  try {
    train_grad_accum(524288, 24, 2048, 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("must be a multiple of 393216"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--device-batch-size"), std::string::npos) << msg;
  }
}

TEST(Schedule, LearningRateMultiplier) {
  // N=100: warmdown = round(65) = 65 steps, flat until step 35, warmup 40 steps first
  EXPECT_DOUBLE_EQ(lr_multiplier(0, 100), 1.0 / 40);
  EXPECT_DOUBLE_EQ(lr_multiplier(35, 100), 36.0 / 40);
  EXPECT_DOUBLE_EQ(lr_multiplier(39, 100), 1.0);
  EXPECT_NEAR(lr_multiplier(60, 100), 40.0 / 65 + (25.0 / 65) * 0.05, 1e-15);
  EXPECT_NEAR(lr_multiplier(100, 100), 0.05, 1e-15);
  // N=1000: flat from 40 to 350
  EXPECT_DOUBLE_EQ(lr_multiplier(350, 1000), 1.0);
  EXPECT_NEAR(lr_multiplier(351, 1000), 649.0 / 650 + (1.0 / 650) * 0.05, 1e-15);
  // N=10 without warmup: round(6.5) = 6 (to even), so step 5 is 5/6 of the way up
  EXPECT_NEAR(lr_multiplier(5, 10, 0), 5.0 / 6 + (1.0 / 6) * 0.05, 1e-15);
  EXPECT_DOUBLE_EQ(lr_multiplier(4, 10, 0), 1.0);
}

TEST(Schedule, MuonMomentumAndWeightDecay) {
  EXPECT_DOUBLE_EQ(muon_momentum(0, 1000), 0.85);
  EXPECT_NEAR(muon_momentum(200, 1000), 0.91, 1e-15);
  EXPECT_NEAR(muon_momentum(300, 1000), 0.94, 1e-15);  // before the warmdown (starts at 350)
  EXPECT_DOUBLE_EQ(muon_momentum(400, 10000), 0.97);
  EXPECT_NEAR(muon_momentum(500, 1000), 0.97 - 0.07 * 150.0 / 650, 1e-15);
  EXPECT_NEAR(muon_momentum(1000, 1000), 0.90, 1e-15);
  EXPECT_DOUBLE_EQ(muon_weight_decay(0, 1000, 0.2), 0.2);
  EXPECT_NEAR(muon_weight_decay(500, 1000, 0.2), 0.1, 1e-15);
  EXPECT_NEAR(muon_weight_decay(250, 1000, 0.2), 0.1 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(muon_weight_decay(1000, 1000, 0.2), 0.0, 1e-15);
}

TEST(Schedule, SftSchedules) {
  // defaults: no warmup, flat to progress 0.5, then linear to 0 at progress 1
  EXPECT_DOUBLE_EQ(sft_lr_multiplier(0.0), 1.0);
  EXPECT_DOUBLE_EQ(sft_lr_multiplier(0.5), 1.0);
  EXPECT_NEAR(sft_lr_multiplier(0.75), 0.5, 1e-15);
  EXPECT_NEAR(sft_lr_multiplier(1.0), 0.0, 1e-15);
  EXPECT_NEAR(sft_lr_multiplier(0.9, 0.0, 0.5, 0.1), 0.2 * 1.0 + 0.8 * 0.1, 1e-15);
  EXPECT_NEAR(sft_lr_multiplier(0.05, 0.1), (0.05 + 1e-8) / 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(sft_muon_momentum(0), 0.85);
  EXPECT_NEAR(sft_muon_momentum(150), 0.90, 1e-15);
  EXPECT_DOUBLE_EQ(sft_muon_momentum(300), 0.95);
  EXPECT_DOUBLE_EQ(sft_muon_momentum(5000), 0.95);
}
