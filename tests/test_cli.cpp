// The binary as a user runs it: --help, --version, errors and exit codes, and `launch`
// (rank prefixes, a failing rank stopping the rest, signal forwarding, doctor on 2 ranks).
#include <gtest/gtest.h>
#include <cctype>
#include <csignal>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "nanochat/common/files.h"
#include "nanochat/common/progress.h"
#include "test_util.h"

using nanochat::Timer;
using nanochat::path_exists;
using nanochat::remove_tree;

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
    if (lower.rfind("subcommands:", 0) == 0) { in_list = true; continue; }
    if (!in_list) continue;
    if (line.empty()) break;
    // "  name   description" (a long name's description continues on a deeper-indented line)
    if (line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] != ' ') subs.push_back(line.substr(2, line.find(' ', 2) - 2));
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
  auto r = run_shell(kBin + " launch --nproc-per-node 3 --nproc-per-node 2 --exec -- /bin/sh -c 'echo \"ws=$WORLD_SIZE\"'");
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
  std::set<std::string> ops;
  for (auto& k : json["kernels"]) {
    ops.insert(k["op"].get<std::string>());
    EXPECT_TRUE(k["ok"].get<bool>()) << k.dump();
    EXPECT_EQ(k["device"], "cpu");
  }
  EXPECT_EQ(ops.size(), 9u) << json.dump();
}

// NANOCHAT_KERNELS_FAULT perturbs one op's kernel: doctor --kernels names that op alone, exit 1;
// under NANOCHAT_KERNELS=strict a run stops at its first fused op with one error line
TEST(Cli, DoctorKernelsCatchesAPerturbedKernelOfEveryOp) {
  for (const char* op : {"linear_softcap_ce", "mlp_relu_square", "rotary_norm", "residual_norm", "attention",
                         "polar_express", "adamw", "muon", "fp8_linear"}) {
    auto r = run_shell(std::string("NANOCHAT_KERNELS_FAULT=") + op + " " + kBin + " doctor --kernels --device-type cpu");
    EXPECT_EQ(r.rc, 1) << op << "\n" << r.out << r.err;
    auto json = nlohmann::json::parse(last_line(r.out));
    for (auto& k : json["kernels"]) {
      const bool applies = k["applies"].get<bool>();
      EXPECT_EQ(k["ok"].get<bool>(), k["op"] != op || !applies) << op << ": " << k.dump();
    }
    EXPECT_NE(r.err.find(std::string("kernel self-check: ") + op + " on cpu in float32"), std::string::npos)
        << op << "\n" << r.err;
  }
  auto s = run_shell("NANOCHAT_KERNELS=strict NANOCHAT_KERNELS_FAULT=rotary_norm " + kBin +
                     " doctor --kernels --device-type cpu");
  EXPECT_EQ(s.rc, 1) << s.out << s.err;
  EXPECT_NE(s.err.find("rotary_norm on cpu in float32 disagrees with its ATen reference"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("(NANOCHAT_KERNELS=strict)"), std::string::npos) << s.err;
  EXPECT_EQ(count_lines(s.err), 1) << s.err;
}

TEST(Launch, DoctorPassesEveryCollectiveOnTwoRanks) {
  auto r = run_shell(kBin + " launch --nproc-per-node 2 -- doctor --bandwidth-mb 1");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all 7 collectives passed on all 2 ranks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST(Launch, SetsTorchrunVariablesAndPrefixesEachLineWithTheRank) {
  auto r = run_shell(kBin + " launch --nproc-per-node 3 --exec -- /bin/sh -c "
                            "'echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR\"; echo oops >&2'");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (int rank = 0; rank < 3; rank++) {
    std::string want = "[rank " + std::to_string(rank) + "] " + std::to_string(rank) + "/3/" +
                       std::to_string(rank) + "/3/127.0.0.1\n";
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
    EXPECT_NE(r.err.find("[rank " + std::to_string(rank) + "] oops\n"), std::string::npos) << r.err;
  }
}

TEST(Launch, NodeRankOffsetsGlobalRanks) {
  auto r = run_shell(kBin + " launch --nproc-per-node 2 --nnodes 3 --node-rank 2 --master-port 29999 --exec -- "
                            "/bin/sh -c 'echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_PORT\"'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 4] 4 6 0 29999"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 5] 5 6 1 29999"), std::string::npos) << r.out;
}

static bool process_alive(pid_t pid) { return kill(pid, 0) == 0; }

TEST(Launch, OneFailingRankStopsTheOthersWithinSeconds) {
  std::string dir = make_temp_dir();
  // ranks 0 and 2 would run for a minute; rank 1 fails after writing its pid
  std::string script = "echo $$ > " + dir + "/pid.$RANK; [ $RANK = 1 ] && { while [ ! -s " + dir + "/pid.0 ] || [ ! -s " + dir +
                       "/pid.2 ]; do sleep 0.05; done; exit 3; }; exec sleep 60";
  Timer timer;
  auto r = run_shell(kBin + " launch --nproc-per-node 3 --exec -- /bin/sh -c '" + script + "'");
  double seconds = timer.seconds();
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_LT(seconds, 15.0);
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  for (int rank = 0; rank < 3; rank++) {
    pid_t pid = std::stoi(read_file(dir + "/pid." + std::to_string(rank)));
    EXPECT_FALSE(process_alive(pid)) << "rank " << rank << " still running";
  }
  remove_tree(dir);
}

TEST(Launch, StubbornRankIsKilledAfterTheGracePeriod) {
  std::string dir = make_temp_dir();
  std::string script = "trap \"\" TERM; echo $$ > " + dir + "/pid.$RANK; [ $RANK = 0 ] && { while [ ! -s " + dir + "/pid.1 ]; do sleep 0.05; done; exit 1; }; while :; do sleep 0.1; done";
  Timer timer;
  auto r = run_shell(kBin + " launch --nproc-per-node 2 --kill-grace 1 --exec -- /bin/sh -c '" + script + "'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_LT(timer.seconds(), 15.0);
  EXPECT_FALSE(process_alive(std::stoi(read_file(dir + "/pid.1"))));
  remove_tree(dir);
}

TEST(Launch, ForwardsSigtermToEveryRank) {
  std::string dir = make_temp_dir();
  std::string script = "trap \"echo got > " + dir + "/term.\\$RANK; exit 0\" TERM; touch " + dir +
                       "/ready.$RANK; while :; do sleep 0.1; done";
  pid_t pid = fork();
  if (pid == 0) {
    execl(kBin.c_str(), kBin.c_str(), "launch", "--nproc-per-node", "2", "--exec", "--", "/bin/sh", "-c",
          script.c_str(), (char*)nullptr);
    _exit(127);
  }
  Timer timer;
  while (!(path_exists(dir + "/ready.0") && path_exists(dir + "/ready.1")) && timer.seconds() < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(path_exists(dir + "/ready.1"));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_EQ(read_file(dir + "/term.0"), "got\n");
  EXPECT_EQ(read_file(dir + "/term.1"), "got\n");
  remove_tree(dir);
}
