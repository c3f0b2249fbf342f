// `nanochat launch`: the torchrun variables and rank prefixes, node ranks, a failing rank
// stopping the others, a stubborn rank killed after the grace period, SIGTERM forwarded; and
// the faults an operator meets: SIGTERM during a 2-rank base-train
// whose checkpoint save is slow (a test hook makes it longer than the old 5 s grace) still ends
// with a complete checkpoint and a resume command that works; a second SIGTERM kills at once;
// SIGHUP reaches the ranks; ranks die with a SIGKILLed launcher; a rank that cannot be
// started stops the ranks already running.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "nanochat/common/files.h"
#include "nanochat/common/progress.h"
#include "test_util.h"

namespace {

const std::string kBin = NANOCHAT_BIN;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// `kBin args...` in the background with stdout/stderr to files in `dir`, environment `env` added
pid_t start_launcher(const std::vector<std::string>& args, const std::string& dir,
                     const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::vector<std::string> argv{kBin};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn_to_files(argv, dir + "/out", dir + "/err", env);
}

bool wait_for(const std::function<bool()>& ready, double seconds) {
  auto start = std::chrono::steady_clock::now();
  while (!ready()) {
    if (seconds_since(start) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }
bool alive(pid_t pid) { return kill(pid, 0) == 0; }

// processes whose command line contains `marker`
int processes_with(const std::string& marker) {
  int found = 0;
  DIR* d = opendir("/proc");
  for (dirent* e; d && (e = readdir(d));) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::string cmdline = read_file(std::string("/proc/") + e->d_name + "/cmdline");
    found += cmdline.find(marker) != std::string::npos;
  }
  if (d) closedir(d);
  return found;
}

// ranks as shell scripts: each writes its pid to dir/pid.$RANK, and on SIGTERM writes
// dir/term.$RANK and exits 0 after `term_seconds`
std::string trapping_rank(const std::string& dir, double term_seconds) {
  return "trap 'echo got > " + dir + "/term.$RANK; sleep " + std::to_string(term_seconds) +
         "; exit 0' TERM; echo $$ > " + dir + "/pid.$RANK; while :; do sleep 0.05; done";
}

pid_t rank_pid(const std::string& dir, int rank) { return std::stoi(read_file(dir + "/pid." + std::to_string(rank))); }

}  // namespace

TEST(LaunchFaults, SecondSigtermKillsAtOnce) {
  std::string dir = make_temp_dir();
  pid_t pid = start_launcher(
      {"launch", "--nproc-per-node", "2", "--exec", "--", "/bin/sh", "-c", trapping_rank(dir, 120)}, dir);
  ASSERT_TRUE(wait_for([&] { return exists(dir + "/pid.0") && exists(dir + "/pid.1"); }, 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the traps are set before the pid files
  kill(pid, SIGTERM);
  // the ranks got it and now "save" for 120 s; the launcher waits for them (grace 300 s)
  ASSERT_TRUE(wait_for([&] { return exists(dir + "/term.0") && exists(dir + "/term.1"); }, 10));
  EXPECT_EQ(wait_exit(pid, 1.0), -1) << "the launcher did not wait for the ranks' save";
  auto start = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 10), 128 + SIGTERM);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(read_file(dir + "/err").find("killing all ranks"), std::string::npos) << read_file(dir + "/err");
  EXPECT_FALSE(alive(rank_pid(dir, 0)));
  EXPECT_FALSE(alive(rank_pid(dir, 1)));
  std::system(("rm -rf " + dir).c_str());
}

TEST(LaunchFaults, SighupReachesTheRanksAsSigterm) {
  std::string dir = make_temp_dir();
  pid_t pid = start_launcher(
      {"launch", "--nproc-per-node", "2", "--exec", "--", "/bin/sh", "-c", trapping_rank(dir, 0)}, dir);
  ASSERT_TRUE(wait_for([&] { return exists(dir + "/pid.0") && exists(dir + "/pid.1"); }, 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGHUP);
  EXPECT_EQ(wait_exit(pid, 20), 128 + SIGHUP);
  EXPECT_EQ(read_file(dir + "/term.0"), "got\n");
  EXPECT_EQ(read_file(dir + "/term.1"), "got\n");
  std::system(("rm -rf " + dir).c_str());
}

TEST(LaunchFaults, RanksDieWithAKilledLauncher) {
  std::string dir = make_temp_dir();
  pid_t pid = start_launcher({"launch", "--nproc-per-node", "3", "--exec", "--", "/bin/sh", "-c",
                              "echo $$ > " + dir + "/pid.$RANK; exec sleep 60"},
                             dir);
  ASSERT_TRUE(wait_for([&] { return exists(dir + "/pid.0") && exists(dir + "/pid.1") && exists(dir + "/pid.2"); }, 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the pids are written before exec
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid, 10), 128 + SIGKILL);
  for (int r = 0; r < 3; r++) {
    pid_t rank = rank_pid(dir, r);
    EXPECT_TRUE(wait_for([&] { return !alive(rank); }, 5)) << "rank " << r << " outlived the launcher";
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST(LaunchFaults, SpawnFailureStopsTheRanksAlreadyStarted) {
  // 30 file descriptors: pipes for a few ranks, then pipe2() fails with EMFILE
  const std::string marker = "nanochat_launch_marker_" + std::to_string(getpid());
  CommandResult r = run_shell("ulimit -n 30; exec " + kBin +
                              " launch --nproc-per-node 64 --exec -- /bin/sh -c 'sleep 60; : " + marker + "'");
  EXPECT_NE(r.rc, 0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("cannot start rank (\\d+) \\(pipe\\).*stopped the (\\d+) rank")))
      << r.err;
  EXPECT_GE(std::stoi(m[2]), 1) << "no rank had started: the test shows nothing";
  EXPECT_TRUE(wait_for([&] { return processes_with(marker) == 0; }, 5)) << processes_with(marker) << " ranks left";
}

// ---- the real thing: 2 Gloo ranks of base-train, SIGTERM while saving slowly --------------

TEST(LaunchFaults, SigtermDuringASlowSaveEndsWithACompleteCheckpointThatResumes) {
  // parquet shards of many small row groups, so that both ranks get documents (pyarrow)
  std::string base = make_temp_dir(), corpus_err;
  const std::string data = make_parquet_corpus(NANOCHAT_PYTHON, kBin, base, 7,
                                               "the cat sees a dog under green trees and runs home", 300, corpus_err);
  ASSERT_FALSE(data.empty()) << corpus_err;

  const int delay_ms = 7000;  // longer than the old fixed 5 s between SIGTERM and SIGKILL
  std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--"};
  for (const std::string& a : tiny_base_train_args(data, "graceful", "100000")) args.push_back(a);
  pid_t pid = start_launcher(args, base,
                             {{"NANOCHAT_BASE_DIR", base}, {"NANOCHAT_TEST_SAVE_DELAY_MS", std::to_string(delay_ms)}});
  const std::string ckpt = base + "/base_checkpoints/graceful";
  bool ended = false;  // the launcher exited before the signal (a failed run)
  wait_for(
      [&] {
        ended = ended || waitpid(pid, nullptr, WNOHANG) == pid;
        return ended || read_file(ckpt + "/metrics.jsonl").find("\"step\":2,") != std::string::npos;
      },
      120);
  ASSERT_FALSE(ended) << "launch ended before the signal:\n" << read_file(base + "/err");
  ASSERT_NE(read_file(ckpt + "/metrics.jsonl").find("\"step\":2,"), std::string::npos) << read_file(base + "/err");
  auto signalled = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  int rc = wait_exit(pid, 120);
  double stop_seconds = seconds_since(signalled);
  std::string err = read_file(base + "/err"), out = read_file(base + "/out");
  ASSERT_EQ(rc, 128 + SIGTERM) << out << err;
  EXPECT_GT(stop_seconds, delay_ms / 1000.0) << "the save cannot have happened faster than its delay";

  // the state after the last logged step is saved, completely, by both ranks
  int last = 0;
  std::istringstream lines(read_file(ckpt + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);)
    last = std::max(last, nlohmann::json::parse(line)["step"].get<int>());
  const int saved = last + 1;
  char step[16];
  std::snprintf(step, sizeof step, "%06d", saved);
  ASSERT_TRUE(exists(ckpt + "/done_" + step)) << "no complete checkpoint at step " << saved << "\n" << out << err;
  for (const char* f :
       {"model_%s.safetensors", "meta_%s.json", "optim_%s_rank0.safetensors", "optim_%s_rank1.safetensors"}) {
    char name[64];
    std::snprintf(name, sizeof name, f, step);
    EXPECT_TRUE(exists(ckpt + "/" + name)) << name;
  }
  EXPECT_EQ(err.find("grace period over"), std::string::npos) << err;

  // the launcher's resume command, for one more step
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex("Resume with:\n  ([^\n]+)\n"))) << err;
  std::string resume = m[1];
  EXPECT_NE(resume.find(" launch --nproc-per-node 2 -- base-train "), std::string::npos) << resume;
  EXPECT_NE(resume.find("--resume latest"), std::string::npos) << resume;
  CommandResult again = run_shell("NANOCHAT_BASE_DIR=" + base + " " + resume + " --num-iterations " +
                                  std::to_string(saved + 1));
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_NE((again.out + again.err).find("resuming from"), std::string::npos) << again.out << again.err;
  EXPECT_NE(read_file(ckpt + "/metrics.jsonl").find("\"step\":" + std::to_string(saved) + ","), std::string::npos);
  std::snprintf(step, sizeof step, "%06d", saved + 1);
  EXPECT_TRUE(exists(ckpt + "/done_" + step)) << again.out << again.err;
  std::system(("rm -rf " + base).c_str());
}

// ---- the launcher's basics ----------------------------------------------------------------

TEST(Launch, SetsTorchrunVariablesAndPrefixesEachLineWithTheRank) {
  auto r = run_shell(kBin +
                     " launch --nproc-per-node 3 --exec -- /bin/sh -c "
                     "'echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR\"; echo oops >&2'");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (int rank = 0; rank < 3; rank++) {
    std::string want = "[rank " + std::to_string(rank) + "] " + std::to_string(rank) + "/3/" + std::to_string(rank) +
                       "/3/127.0.0.1\n";
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
    EXPECT_NE(r.err.find("[rank " + std::to_string(rank) + "] oops\n"), std::string::npos) << r.err;
  }
}

TEST(Launch, NodeRankOffsetsGlobalRanks) {
  auto r = run_shell(kBin +
                     " launch --nproc-per-node 2 --nnodes 3 --node-rank 2 --master-port 29999 --exec -- "
                     "/bin/sh -c 'echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_PORT\"'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 4] 4 6 0 29999"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 5] 5 6 1 29999"), std::string::npos) << r.out;
}

TEST(Launch, OneFailingRankStopsTheOthersWithinSeconds) {
  std::string dir = make_temp_dir();
  // ranks 0 and 2 would run for a minute; rank 1 fails after writing its pid
  std::string script = "echo $$ > " + dir + "/pid.$RANK; [ $RANK = 1 ] && { while [ ! -s " + dir +
                       "/pid.0 ] || [ ! -s " + dir + "/pid.2 ]; do sleep 0.05; done; exit 3; }; exec sleep 60";
  nanochat::Timer timer;
  auto r = run_shell(kBin + " launch --nproc-per-node 3 --exec -- /bin/sh -c '" + script + "'");
  double seconds = timer.seconds();
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_LT(seconds, 15.0);
  EXPECT_NE(r.err.find("rank 1 exited with code 3"), std::string::npos) << r.err;
  for (int rank = 0; rank < 3; rank++) {
    pid_t pid = std::stoi(read_file(dir + "/pid." + std::to_string(rank)));
    EXPECT_FALSE(alive(pid)) << "rank " << rank << " still running";
  }
  nanochat::remove_tree(dir);
}

TEST(Launch, StubbornRankIsKilledAfterTheGracePeriod) {
  std::string dir = make_temp_dir();
  std::string script = "trap \"\" TERM; echo $$ > " + dir + "/pid.$RANK; [ $RANK = 0 ] && { while [ ! -s " + dir +
                       "/pid.1 ]; do sleep 0.05; done; exit 1; }; while :; do sleep 0.1; done";
  nanochat::Timer timer;
  auto r = run_shell(kBin + " launch --nproc-per-node 2 --kill-grace 1 --exec -- /bin/sh -c '" + script + "'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_LT(timer.seconds(), 15.0);
  EXPECT_FALSE(alive(std::stoi(read_file(dir + "/pid.1"))));
  nanochat::remove_tree(dir);
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
  nanochat::Timer timer;
  while (!(nanochat::path_exists(dir + "/ready.0") && nanochat::path_exists(dir + "/ready.1")) && timer.seconds() < 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(nanochat::path_exists(dir + "/ready.1"));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_EQ(read_file(dir + "/term.0"), "got\n");
  EXPECT_EQ(read_file(dir + "/term.1"), "got\n");
  nanochat::remove_tree(dir);
}
