// dist: environment parsing, every collective with 1, 2 and 3 real Gloo processes (values, and
// the clear refusal of a tensor on the wrong device type or of a dtype Gloo cannot take), and the
// kernels' self-check verdicts agreed across 2 ranks
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "nanochat/common/error.h"
#include "nanochat/dist.h"
#include "test_util.h"
#include "../src/kernels/op_dispatch.h"  // kernels_cpu_supported

extern char** environ;
using namespace nanochat;

static const char* kDistVars[] = {"RANK",          "WORLD_SIZE",           "LOCAL_RANK",   "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR",   "MASTER_PORT",          "SLURM_PROCID", "SLURM_NTASKS",
                                  "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};

struct ScopedEnv {
  ScopedEnv() {
    for (auto v : kDistVars) unsetenv(v);
  }
  ~ScopedEnv() {
    for (auto v : kDistVars) unsetenv(v);
  }
};

TEST(DistEnv, NoVariablesMeansOneProcess) {
  ScopedEnv env;
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
}

TEST(DistEnv, TorchrunVariables) {
  ScopedEnv env;
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "16", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "1234", 1);
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.master_addr, "10.1.2.3");
  EXPECT_EQ(e.master_port, 1234);
}

TEST(DistEnv, BadValuesAreErrorsNamingTheVariable) {
  struct Case {
    const char *rank, *world, *local, *port, *needle;
  };
  for (Case c : {Case{"0", "two", "0", "29500", "WORLD_SIZE"}, Case{"2", "2", "0", "29500", "RANK=2"},
                 Case{"-1", "2", "0", "29500", "RANK"}, Case{"0", "2", "0", "70000", "MASTER_PORT"},
                 Case{"0", "2", "x", "29500", "LOCAL_RANK"}, Case{"0", "0", "0", "29500", "WORLD_SIZE"}}) {
    ScopedEnv env;
    setenv("RANK", c.rank, 1);
    setenv("WORLD_SIZE", c.world, 1);
    setenv("LOCAL_RANK", c.local, 1);
    setenv("MASTER_PORT", c.port, 1);
    try {
      dist_env_from_environment();
      ADD_FAILURE() << "accepted " << c.needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
}

TEST(DistEnv, PartialVariablesAreAnError) {
  ScopedEnv env;
  setenv("RANK", "0", 1);
  EXPECT_THROW(dist_env_from_environment(), Error);
}

TEST(DistEnv, SlurmVariablesUnderSrun) {
  ScopedEnv env;
  setenv("SLURM_PROCID", "9", 1);
  setenv("SLURM_NTASKS", "16", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NTASKS_PER_NODE", "8", 1);
  try {
    dist_env_from_environment();
    ADD_FAILURE() << "accepted srun without MASTER_ADDR";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
  setenv("MASTER_ADDR", "node001", 1);
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.rank, 9);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.master_addr, "node001");
  setenv("RANK", "3", 1);  // torchrun's variables win over Slurm's
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(dist_env_from_environment().rank, 3);
}

using Range = std::pair<int64_t, int64_t>;

TEST(DistShard, CeilChunksCoverEveryRowOnce) {
  // 10 rows over 3 ranks: chunks of 4 -> [0,4) [4,8) [8,10)
  EXPECT_EQ(dist_shard_range(10, 3, 0), (Range{0, 4}));
  EXPECT_EQ(dist_shard_range(10, 3, 1), (Range{4, 8}));
  EXPECT_EQ(dist_shard_range(10, 3, 2), (Range{8, 10}));
  // 1 row over 3 ranks: the last two own nothing
  EXPECT_EQ(dist_shard_range(1, 3, 1), (Range{1, 1}));
  EXPECT_EQ(dist_shard_range(1, 3, 2), (Range{1, 1}));
}

// starts `world` dist_worker processes with torchrun's variables and returns their exit codes
static std::vector<int> run_workers(int world, int port, const std::vector<std::string>& extra_env = {},
                                    const char* mode = nullptr, int deadline_s = 600) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; rank++) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; e++) {
      bool overridden = false;  // by extra_env: getenv would find the inherited one first
      for (const std::string& x : extra_env) overridden |= std::string(*e).rfind(x.substr(0, x.find('=') + 1), 0) == 0;
      if (!overridden) env_strings.push_back(*e);
    }
    if (world > 1) {
      env_strings.push_back("RANK=" + std::to_string(rank));
      env_strings.push_back("WORLD_SIZE=" + std::to_string(world));
      env_strings.push_back("LOCAL_RANK=" + std::to_string(rank));
      env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
      env_strings.push_back("MASTER_ADDR=127.0.0.1");
      env_strings.push_back("MASTER_PORT=" + std::to_string(port));
      env_strings.push_back("NANOCHAT_DIST_TIMEOUT=60");
    }
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>(NANOCHAT_DIST_WORKER), const_cast<char*>(mode), nullptr};
    pid_t pid;
    EXPECT_EQ(posix_spawn(&pid, NANOCHAT_DIST_WORKER, nullptr, nullptr, argv, envp.data()), 0);
    pids.push_back(pid);
  }
  // a rank still running past the deadline is hung: killed, its code 124 (as timeout(1))
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  std::vector<int> codes(pids.size(), -1);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t i = 0; i < pids.size(); i++) {
      int status = 0;
      if (codes[i] != -1 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      left--;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); i++)
        if (codes[i] == -1) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          codes[i] = 124;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchHandComputedValues) {
  ScopedEnv env;
  int world = GetParam();
  int port = 20000 + (getpid() * 7 + world * 131) % 20000;
  std::vector<int> codes = run_workers(world, port);
  for (int rank = 0; rank < world; rank++) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

INSTANTIATE_TEST_SUITE_P(Worlds, Collectives, ::testing::Values(1, 2, 3));

// a kernel that fails its self-check on rank 1 alone: the ranks agree (MIN of the verdicts), and
// both run the op's reference (dist_worker kernels checks each rank's path and verdicts)
TEST(KernelVerdicts, AFaultOnOneRankMakesEveryRankFallBack) {
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  ScopedEnv env;
  const int port = 20000 + (getpid() * 7 + 977) % 20000;
  std::vector<int> codes = run_workers(
      2, port, {"NANOCHAT_KERNELS_FAULT=mlp_relu_square", "NANOCHAT_KERNELS_FAULT_RANK=1", "NANOCHAT_KERNELS=1"},
      "kernels");
  for (int rank = 0; rank < 2; rank++) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

// the chat-eval shape (`launch --nproc-per-node 2 -- chat-eval -x 1`: rank 1 has no problem):
// one rank meets a dtype the other meets later, or not at all; the checks ran at start, so both
// finish (gloo's "collective mismatch" before, a hang on NCCL), well inside 90 s
TEST(KernelVerdicts, ARankMeetingADtypeAloneFinishesWithoutACollective) {
  ScopedEnv env;
  const int port = 20000 + (getpid() * 7 + 1181) % 20000;
  std::vector<int> codes = run_workers(2, port, {"NANOCHAT_KERNELS=1"}, "late_dtype", /*deadline_s=*/90);
  for (int rank = 0; rank < 2; rank++) EXPECT_EQ(codes[rank], 0) << "rank " << rank << " (124: hung, killed)";
}

// a Dist's destruction ends with a barrier: rank 0, destroyed at once, returns only after rank
// 1 (which sleeps 300 ms first) has begun its own destruction. Without the barrier rank 0 would
// be gone 300 ms before rank 1 arrived; both groups are then shut down without a complaint.
TEST(DistShutdown, DestructionWaitsForEveryRank) {
  ScopedEnv env;
  const int port = 20000 + (getpid() * 7 + 1511) % 20000;
  using Clock = std::chrono::steady_clock;
  Clock::time_point rank0_done, rank1_begins;
  auto rank_main = [&](int rank) {
    DistEnv e;
    e.rank = rank;
    e.world_size = 2;
    e.local_rank = rank;
    e.local_world_size = 2;
    e.master_port = port;
    {
      Dist dist(e, torch::Device(torch::kCPU));
      torch::Tensor t = torch::ones({4});
      dist.all_reduce(t, ReduceOp::SUM);
      EXPECT_EQ(t.sum().item<double>(), 8.0);
      if (rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        rank1_begins = Clock::now();
      }
    }
    if (rank == 0) rank0_done = Clock::now();
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  EXPECT_GE(rank0_done.time_since_epoch().count(), rank1_begins.time_since_epoch().count());
}
