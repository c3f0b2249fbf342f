// The binary as a user runs it: --help, --version, errors and exit codes, and `launch`
// (rank prefixes, a failing rank stopping the rest, signal forwarding, doctor on 2 ranks).
#include <gtest/gtest.h>
#include <cctype>
#include <csignal>
#include <set>
#include <sstream>
#include <fstream>
#include <thread>

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "nanochat/common/files.h"
#include "nanochat/common/progress.h"
#include "nanochat/common/device.h"  // cuda_built
#include "test_util.h"

using nanochat::path_exists;
using nanochat::remove_tree;
using nanochat::Timer;

static const std::string kBin = NANOCHAT_BIN;

static std::string last_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = out.rfind('\n', end);
  return out.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(Cli, HelpListsEverySubcommand) {
  auto r = run_shell(kBin + " --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("doctor"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("launch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("download"), std::string::npos) << r.out;
}

// every subcommand that --help lists has its section in docs/ (a heading that is its name in
// backquotes, "## `sft`") and a row in the README's table
TEST(Cli, EverySubcommandOfHelpIsDocumented) {
  auto r = run_shell(kBin + " --help");
  ASSERT_EQ(r.rc, 0);
  std::vector<std::string> subs;
  std::istringstream help(r.out);
  bool in_list = false;
  for (std::string line; std::getline(help, line);) {
    std::string lower = line;
    for (char& c : lower) c = (char)std::tolower((unsigned char)c);
    if (lower.rfind("subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.empty()) break;
    // "  name   description" (a long name's description continues on a deeper-indented line)
    if (line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] != ' ')
      subs.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  ASSERT_GE(subs.size(), 15u) << "no subcommand list in:\n" << r.out;
  std::string headings;  // the text of every heading of docs/*.md, one per line
  const std::string docs = std::string(NANOCHAT_SOURCE_DIR) + "/docs";
  auto ls = run_shell("ls " + docs + "/*.md");
  std::istringstream files(ls.out);
  for (std::string f; std::getline(files, f);) {
    std::istringstream text(read_file(f));
    for (std::string line; std::getline(text, line);)
      if (line.rfind("#", 0) == 0 && line.find_first_not_of("# ") != std::string::npos)
        headings += "\n" + line.substr(line.find_first_not_of("# ")) + "\n";
  }
  ASSERT_FALSE(headings.empty()) << "no markdown in " << docs;
  const std::string readme = read_file(std::string(NANOCHAT_SOURCE_DIR) + "/README.md");
  for (const std::string& sub : subs) {
    EXPECT_NE(headings.find("\n`" + sub + "`\n"), std::string::npos) << "no heading '## `" << sub << "`' in docs/*.md";
    EXPECT_NE(readme.find("| `" + sub + "` |"), std::string::npos) << "no row of the README's table for " << sub;
  }
}

TEST(Cli, VersionNamesLibTorchCudaNcclAndThreads) {
  auto r = run_shell(kBin + " --version");
  EXPECT_EQ(r.rc, 0);
  for (const char* needle : {"nanochat 0.", "LibTorch 2.", "CUDA: ", "NCCL: ", "CPU threads: "})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " in\n" << r.out;
}

TEST(Cli, BadFlagsAndSubcommandsExit2WithOneLine) {
  for (const char* args : {"--bogus", "frob", "", "doctor --nope", "launch --nproc-per-node 0 -- doctor",
                           "launch --nproc-per-node two -- doctor"}) {
    auto r = run_shell(kBin + " " + args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << args << ":\n" << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
  }
  EXPECT_NE(run_shell(kBin + " frob").err.find("unknown subcommand 'frob'"), std::string::npos);
}

TEST(Cli, RepeatedFlagsTakeTheLastValueLikeArgparse) {
  // launch runs the command on as many ranks as the last --nproc-per-node says
  auto r = run_shell(kBin +
                     " launch --nproc-per-node 3 --nproc-per-node 2 --exec -- /bin/sh -c 'echo \"ws=$WORLD_SIZE\"'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1] ws=2\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 2]"), std::string::npos) << r.out;
  // a training flag given twice is parsed (the run then fails for want of a tokenizer, exit 1)
  r = run_shell("NANOCHAT_BASE_DIR=" + temp_dir() + " " + kBin +
                " base-train --device-type cpu --device-batch-size 4 --device-batch-size 2 --num-iterations 1");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(r.err.find("At Most"), std::string::npos) << r.err;
}

TEST(Cli, RuntimeErrorsExit1WithOneLine) {
  auto r = run_shell("NANOCHAT_DTYPE=float8 " + kBin + " doctor");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: NANOCHAT_DTYPE='float8' is not one of bfloat16, float16, float32\n");
  r = run_shell("NANOCHAT_BASE_DIR=/proc/nanochat_nope " + kBin + " doctor");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("NANOCHAT_BASE_DIR"), std::string::npos) << r.err;
  r = run_shell(kBin + " launch --nproc-per-node 2 -- frob");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'frob' is not a nanochat subcommand"), std::string::npos) << r.err;
}

TEST(Cli, DoctorOnOneRank) {
  auto r = run_shell(kBin + " doctor --device-type cpu");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("base dir: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute dtype float32"), std::string::npos) << r.out;
}

// doctor --kernels: a table, then one JSON line; every op passes on this CPU
TEST(Cli, DoctorKernelsChecksEveryOpAndEndsWithJson) {
  auto r = run_shell(kBin + " doctor --kernels --device-type cpu");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("kernel self-check on cpu"), std::string::npos) << r.out;
  auto json = nlohmann::json::parse(last_line(r.out));
  ASSERT_TRUE(json.contains("kernels")) << r.out;
  // every op of the module's files is checked; a check that is not an op names the op it is part of
  const std::vector<std::string> files = kernel_ops();
  const std::set<std::string> want(files.begin(), files.end());
  std::set<std::string> ops;
  for (auto& k : json["kernels"]) {
    ops.insert(k.value("part_of", k["op"].get<std::string>()));
    EXPECT_TRUE(k["ok"].get<bool>()) << k.dump();
    EXPECT_EQ(k["device"], "cpu");
  }
  EXPECT_EQ(ops, want) << json.dump();
}

// NANOCHAT_KERNELS_FAULT perturbs one op's kernel: doctor --kernels names that op alone, exit 1;
// under NANOCHAT_KERNELS=strict a run stops at its first fused op with one error line
TEST(Cli, DoctorKernelsCatchesAPerturbedKernelOfEveryOp) {
  for (const std::string& op : kernel_ops()) {
    auto r = run_shell("NANOCHAT_KERNELS_FAULT=" + op + " " + kBin + " doctor --kernels --device-type cpu");
    EXPECT_EQ(r.rc, 1) << op << "\n" << r.out << r.err;
    auto json = nlohmann::json::parse(last_line(r.out));
    for (auto& k : json["kernels"]) {
      const bool applies = k["applies"].get<bool>();
      EXPECT_EQ(k["ok"].get<bool>(), k["op"] != op || !applies) << op << ": " << k.dump();
    }
    EXPECT_NE(r.err.find("kernel self-check: " + op + " on cpu in float32"), std::string::npos) << op << "\n" << r.err;
  }
  auto s = run_shell("NANOCHAT_KERNELS=strict NANOCHAT_KERNELS_FAULT=rotary_norm " + kBin +
                     " doctor --kernels --device-type cpu");
  EXPECT_EQ(s.rc, 1) << s.out << s.err;
  EXPECT_NE(s.err.find("rotary_norm on cpu in float32 disagrees with its ATen reference"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("(NANOCHAT_KERNELS=strict)"), std::string::npos) << s.err;
  EXPECT_EQ(count_lines(s.err), 1) << s.err;
}

// doctor --kernels names each op before its check runs: a kernel that kills the process (a lost
// CUDA context) is the last name in the log
TEST(Cli, DoctorKernelsNamesEachOpBeforeItsCheck) {
  auto r = run_shell(kBin + " doctor --kernels --device-type cpu");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const size_t table = r.out.find("kernel self-check on cpu");
  for (const std::string& op : kernel_ops()) {
    const size_t named = r.out.find("kernel self-check: " + op + " on cpu in float32...");
    EXPECT_NE(named, std::string::npos) << op << "\n" << r.out;
    EXPECT_LT(named, table) << op;
  }
}

// a fault on rank 1 alone: the ranks agree on the verdicts, so rank 0's table fails the op too
// ("failed on another rank") and doctor exits 1
TEST(Launch, DoctorKernelsAgreesOnAFaultOfOneRank) {
  auto r = run_shell("NANOCHAT_KERNELS_FAULT=mlp_relu_square NANOCHAT_KERNELS_FAULT_RANK=1 " + kBin +
                     " launch --nproc-per-node 2 -- doctor --kernels --device-type cpu --bandwidth-mb 1");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  const size_t at = r.out.rfind("[rank 0] {\"kernels\"");  // rank 0's JSON line, under launch's prefix
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t start = r.out.find('{', at), end = r.out.find('\n', start);
  auto json = nlohmann::json::parse(r.out.substr(start, end == std::string::npos ? std::string::npos : end - start));
  ASSERT_TRUE(json.contains("kernels")) << r.out;
  for (auto& k : json["kernels"]) {
    EXPECT_EQ(k["ok"].get<bool>(), k["op"] != "mlp_relu_square" || !k["applies"].get<bool>()) << k.dump();
    if (k["op"] == "mlp_relu_square" && k["applies"].get<bool>()) {
      EXPECT_EQ(k["detail"], "failed on another rank");
    }
  }
}

// a machine with an NVIDIA driver whose GPUs LibTorch cannot use (here: no GPU at all, a fake
// driver file): training, eval and serving stop with one line naming the driver and the fix,
// unless --device-type cpu is explicit; doctor says the same and goes on on the CPU
TEST(Cli, ADriverWithoutAUsableGpuIsNeverASilentCpuRun) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees a GPU here";
  const std::string dir = make_temp_dir();
  {
    std::ofstream f(dir + "/version");
    f << "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
         "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
  }
  const std::string env = "NANOCHAT_NVIDIA_DRIVER_FILE=" + dir + "/version NANOCHAT_BASE_DIR=" + dir + "/base ";
  for (const std::string cmd : {"base-train --depth 2 --num-iterations 1 --core-metric-every -1",
                                "base-eval --eval bpb", "chat-web", "sft", "chat-eval -i sft"}) {
    auto r = run_shell(env + kBin + " " + cmd);
    EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("NVIDIA driver 550.54.15"), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("runs/setup.sh"), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("--device-type cpu"), std::string::npos) << cmd << "\n" << r.err;
    // the CUDA this LibTorch needs, or that it has none
    const bool cpu_build = r.err.find("no CUDA (a CPU build)") != std::string::npos;
    EXPECT_TRUE(cpu_build || r.err.find("needs CUDA ") != std::string::npos) << r.err;
  }
  auto r = run_shell(env + kBin + " doctor");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("NVIDIA driver: 550.54.15 (runs CUDA 12.x at most); LibTorch's CUDA: "), std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("warning: the GPU is not used: "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("device: cpu"), std::string::npos) << r.out;
  // explicit: the CPU run goes ahead
  r = run_shell(env + kBin + " doctor --device-type cpu");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("the GPU is not used"), std::string::npos) << r.err;
  // asked for CUDA: the same reason
  r = run_shell(env + kBin + " base-train --device-type cuda --depth 2 --num-iterations 1 --core-metric-every -1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--device-type=cuda: NVIDIA driver 550.54.15"), std::string::npos) << r.err;
}

// without the /proc file, nvidia-smi answers (a container); a machine with neither has no driver
TEST(Cli, DoctorReadsTheDriverFromNvidiaSmi) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "LibTorch sees a GPU here";
  const std::string dir = make_temp_dir();
  {
    std::ofstream f(dir + "/nvidia-smi");
    f << "#!/bin/sh\n[ \"$1\" = --query-gpu=driver_version ] && echo 580.65.06 && echo 580.65.06\n";
  }
  chmod((dir + "/nvidia-smi").c_str(), 0755);
  const std::string env = "NANOCHAT_NVIDIA_DRIVER_FILE=" + dir + "/none PATH=" + dir + ":$PATH ";
  auto r = run_shell(env + kBin + " doctor");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA driver: 580.65.06 (runs CUDA 13.x at most)"), std::string::npos) << r.out;
  if (path_exists("/usr/bin/nvidia-smi") || path_exists("/bin/nvidia-smi")) return;  // a real one
  r = run_shell("NANOCHAT_NVIDIA_DRIVER_FILE=" + dir + "/none PATH=/usr/bin:/bin " + kBin + " doctor");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("NVIDIA driver: none; LibTorch's CUDA: "), std::string::npos) << r.out;
}

TEST(Launch, DoctorPassesEveryCollectiveOnTwoRanks) {
  auto r = run_shell(kBin + " launch --nproc-per-node 2 -- doctor --bandwidth-mb 1");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all 7 collectives passed on all 2 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
}
