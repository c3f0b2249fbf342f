// The KV pool's size (server/kv_pool_size.h) against sizes worked out by hand: the defaults,
// the defaults cut to fit 3/4 of the free memory, and flags that do not fit refused with the
// flags named. The binary refusing a pool too big for this machine is in test_server.cpp.
#include <string>

#include <gtest/gtest.h>

#include "nanochat/common/error.h"
#include "server/kv_pool_size.h"

using namespace nanochat;

namespace {

constexpr int64_t GiB = int64_t(1) << 30;
// a d20-like model on CUDA: 20 layers x 10 KV heads x head_dim 128 x bf16, K and V
constexpr int64_t kD20 = 2 * 20 * 10 * 128 * 2;  // 102,400 bytes per position

std::string refusal(bool cuda, int64_t max_batch, int64_t kv_len, int64_t per_position, int64_t pools, int64_t free) {
  try {
    server_kv_pool_size(cuda, max_batch, kv_len, 2048, 20480, per_position, pools, free, "cuda:0");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ServerKVPool, CpuDefaultIsTheModelsLimitWithinTwoGiB) {
  // 8 rows; 2 GiB / (8 x 8 KiB) = 32,768 positions would fit, the model allows 1,280
  KVPoolSize s = server_kv_pool_size(false, 0, 0, 128, 1280, 8192, 1, -1, "cpu");
  EXPECT_EQ(s.rows, 8);
  EXPECT_EQ(s.row_len, 1280);
  EXPECT_EQ(s.bytes, 8 * 1280 * 8192);
  EXPECT_FALSE(s.shrunk);
  // 64 rows of 64 KiB: 2 GiB / 4 MiB = 512 positions, above sequence_len 128
  s = server_kv_pool_size(false, 64, 0, 128, 1280, 65536, 1, -1, "cpu");
  EXPECT_EQ(s.row_len, 512);
  // never below sequence_len, even past 2 GiB
  s = server_kv_pool_size(false, 1024, 0, 128, 1280, 65536, 1, -1, "cpu");
  EXPECT_EQ(s.row_len, 128);
}

TEST(ServerKVPool, CudaDefaultFitsUncut) {
  // 32 rows of 2,048 positions: 6.7 GB of an 80 GB GPU's 70 GB free
  KVPoolSize s = server_kv_pool_size(true, 0, 0, 2048, 20480, kD20, 1, 70 * GiB, "cuda:0");
  EXPECT_EQ(s.rows, 32);
  EXPECT_EQ(s.row_len, 2048);
  EXPECT_EQ(s.bytes, 32LL * 2048 * kD20);
  EXPECT_FALSE(s.shrunk);
}

TEST(ServerKVPool, DefaultsAreCutToThreeQuartersOfTheFreeMemory) {
  // CUDA, 4 GiB free: 3 GiB / (2,048 x 100 KiB) = 15.36 -> 15 rows
  KVPoolSize s = server_kv_pool_size(true, 0, 0, 2048, 20480, kD20, 1, 4 * GiB, "cuda:0");
  EXPECT_EQ(s.rows, 15);
  EXPECT_EQ(s.row_len, 2048);
  EXPECT_EQ(s.bytes, 15LL * 2048 * kD20);
  EXPECT_TRUE(s.shrunk);
  // CPU, 2 workers, 100 MiB available: 75 MiB / (2 x 8 rows x 8 KiB) = 600 positions; the rows stay
  s = server_kv_pool_size(false, 0, 0, 128, 1280, 8192, 2, 100 << 20, "this machine");
  EXPECT_EQ(s.row_len, 600);
  EXPECT_EQ(s.rows, 8);
  EXPECT_EQ(s.bytes, 2 * 8 * 600 * 8192);
  EXPECT_TRUE(s.shrunk);
  // CPU, 10 MiB: positions down to sequence_len 128, then 7.5 MiB / (2 x 128 x 8 KiB) = 3.75 -> 3 rows
  s = server_kv_pool_size(false, 0, 0, 128, 1280, 8192, 2, 10 << 20, "this machine");
  EXPECT_EQ(s.row_len, 128);
  EXPECT_EQ(s.rows, 3);
  // --kv-len given, rows by default: 6 GiB / (8,192 x 100 KiB) = 7.68 -> 7 rows of 8,192
  s = server_kv_pool_size(true, 0, 8192, 2048, 20480, kD20, 1, 8 * GiB, "cuda:0");
  EXPECT_EQ(s.rows, 7);
  EXPECT_EQ(s.row_len, 8192);
}

TEST(ServerKVPool, FlagsThatDoNotFitAreRefusedByName) {
  // 64 x 4,096 x 100 KiB = 25.0 GiB against 3/4 of 8 GiB
  std::string e = refusal(true, 64, 4096, kD20, 1, 8 * GiB);
  EXPECT_NE(e.find("needs 25.0 GiB (64 rows x 4096 positions x 100.0 KiB each)"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda:0 has 8.0 GiB free"), std::string::npos) << e;
  EXPECT_NE(e.find("lower --max-batch (64) or --kv-len (4096)"), std::string::npos) << e;
  // --max-batch alone: the rows at sequence_len cannot shrink further, only the flag can
  e = refusal(true, 64, 0, kD20, 1, 8 * GiB);
  EXPECT_NE(e.find("lower --max-batch (64)"), std::string::npos) << e;
  EXPECT_EQ(e.find("--kv-len"), std::string::npos) << e;
  // CPU workers count as pools
  e = refusal(false, 64, 4096, kD20, 4, 8 * GiB);
  EXPECT_NE(e.find("4 pools x 64 rows"), std::string::npos) << e;
  EXPECT_NE(e.find("--workers (4)"), std::string::npos) << e;
  // the defaults at their smallest: one row of sequence_len
  e = refusal(true, 0, 0, kD20, 1, 100 << 20);
  EXPECT_NE(e.find("too little for even one row"), std::string::npos) << e;
  // unknown free memory: no check
  EXPECT_EQ(refusal(true, 1024, 20480, kD20, 1, -1), "");
}
