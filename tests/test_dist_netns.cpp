// Multi-node without a cluster: two "nodes" as network namespaces on this machine, joined by a
// veth pair (10.231.0.1 <-> 10.231.0.2), one `nanochat launch --nnodes 2` per namespace with one
// rank each, Gloo over the veth addresses (GLOO_SOCKET_IFNAME). Checked: doctor's collective
// self-test; 10 steps of a d2 base-train give the losses of the same run on one node with 2
// ranks; SIGKILL of one node's rank stops the other node with a non-zero exit, and
// `--resume latest` on both nodes then completes. Needs root (ip netns); skipped, with the
// reason, where namespaces cannot be made.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace {

const std::string kBin = NANOCHAT_BIN;

struct Node {
  std::string ns, ifname, addr;
};

// two namespaces and the veth pair between them; `reason` says why not when they cannot be made
struct TwoNodes {
  Node a, b;
  std::string reason;
  TwoNodes() {
    const std::string tag = std::to_string(getpid());
    a = {"nanochat_a_" + tag, "nca" + tag, "10.231.0.1"};
    b = {"nanochat_b_" + tag, "ncb" + tag, "10.231.0.2"};
    CommandResult r = run_shell("ip netns add " + a.ns + " && ip netns add " + b.ns + " && ip link add " + a.ifname +
                                " netns " + a.ns + " type veth peer name " + b.ifname + " netns " + b.ns);
    for (const Node& n : {a, b})
      if (r.rc == 0)
        r = run_shell("ip -n " + n.ns + " addr add " + n.addr + "/24 dev " + n.ifname + " && ip -n " + n.ns +
                      " link set " + n.ifname + " up && ip -n " + n.ns + " link set lo up");
    if (r.rc != 0) reason = "cannot make two network namespaces with a veth pair (needs root and ip netns): " + r.err;
  }
  ~TwoNodes() { run_shell("ip netns del " + a.ns + "; ip netns del " + b.ns); }
};

// `nanochat launch --nnodes 2 --node-rank <rank> ... -- <args>` inside `node`'s namespace, in
// the background, output to dir/node<rank>.out/.err; the pid is the launcher's (ip execs it)
pid_t start_node(const TwoNodes& nodes, int node_rank, int port, const std::string& base,
                 const std::vector<std::string>& args, const std::string& dir) {
  const Node& node = node_rank == 0 ? nodes.a : nodes.b;
  std::vector<std::string> argv = {"ip",
                                   "netns",
                                   "exec",
                                   node.ns,
                                   kBin,
                                   "launch",
                                   "--nnodes",
                                   "2",
                                   "--node-rank",
                                   std::to_string(node_rank),
                                   "--nproc-per-node",
                                   "1",
                                   "--master-addr",
                                   nodes.a.addr,
                                   "--master-port",
                                   std::to_string(port),
                                   "--kill-grace",
                                   "2",
                                   "--"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string prefix = dir + "/node" + std::to_string(node_rank);
  return spawn_to_files(argv, prefix + ".out", prefix + ".err",
                        {{"GLOO_SOCKET_IFNAME", node.ifname}, {"NANOCHAT_BASE_DIR", base}});
}

// wait_exit, and a run past its time killed
int wait_or_kill(pid_t pid, double seconds) {
  int rc = wait_exit(pid, seconds);
  if (rc == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return rc;
}

// both nodes of one run; their exit codes
std::pair<int, int> run_two_nodes(const TwoNodes& nodes, int port, const std::string& base,
                                  const std::vector<std::string>& args, const std::string& dir) {
  pid_t n0 = start_node(nodes, 0, port, base, args, dir), n1 = start_node(nodes, 1, port, base, args, dir);
  int rc1 = wait_or_kill(n1, 300);
  return {wait_or_kill(n0, 300), rc1};
}

std::string outputs(const std::string& dir) {
  std::string s;
  for (const char* f : {"/node0.out", "/node0.err", "/node1.out", "/node1.err"}) s += read_file(dir + f);
  return s;
}

std::map<int, double> losses(const std::string& metrics) {
  std::map<int, double> out;
  std::istringstream in(read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss_raw")) out[j["step"].get<int>()] = j["loss_raw"].get<double>();
  }
  return out;
}

}  // namespace

TEST(TwoNodeNamespaces, CollectivesTrainingAndALostNode) {
  TwoNodes nodes;
  if (!nodes.reason.empty()) GTEST_SKIP() << nodes.reason;
  std::string base = make_temp_dir(), dir = make_temp_dir();
  std::string err;
  const std::string data = make_parquet_corpus(NANOCHAT_PYTHON, kBin, base, 11,
                                               "a cat and a dog see the green trees near home", 280, err);
  ASSERT_FALSE(data.empty()) << err;

  // doctor's collective self-test across the veth
  auto [d0, d1] = run_two_nodes(nodes, 29611, base, {"doctor", "--bandwidth-mb", "1"}, dir);
  ASSERT_EQ(d0, 0) << outputs(dir);
  ASSERT_EQ(d1, 0) << outputs(dir);
  EXPECT_NE(outputs(dir).find("collectives passed on all 2 ranks"), std::string::npos) << outputs(dir);

  // 10 steps on two nodes = 10 steps on one node with 2 ranks
  CommandResult one = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin + " launch --nproc-per-node 2 -- " + [&] {
    std::string s;
    for (auto& a : tiny_base_train_args(data, "one", "10")) s += a + " ";
    return s;
  }());
  ASSERT_EQ(one.rc, 0) << one.out << one.err;
  auto [t0, t1] = run_two_nodes(nodes, 29612, base, tiny_base_train_args(data, "two", "10"), dir);
  ASSERT_EQ(t0, 0) << outputs(dir);
  ASSERT_EQ(t1, 0) << outputs(dir);
  auto l1 = losses(base + "/base_checkpoints/one/metrics.jsonl");
  auto l2 = losses(base + "/base_checkpoints/two/metrics.jsonl");
  ASSERT_EQ(l1.size(), 10u);
  ASSERT_EQ(l2.size(), 10u);
  for (auto& [step, loss] : l1) EXPECT_NEAR(l2[step], loss, 1e-6 * std::fabs(loss)) << "step " << step;
  EXPECT_LT(l1[9], l1[0]);  // the loss moved, so the comparison means something

  // SIGKILL of node 1's rank mid-run: node 0 must stop, non-zero
  std::vector<std::string> args = tiny_base_train_args(data, "lost", "200");
  args.insert(args.end(), {"--save-every", "3"});
  pid_t n0 = start_node(nodes, 0, 29613, base, args, dir), n1 = start_node(nodes, 1, 29613, base, args, dir);
  const std::string ckpt = base + "/base_checkpoints/lost";
  auto start = std::chrono::steady_clock::now();
  while (read_file(ckpt + "/metrics.jsonl").find("\"step\":7,") == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(180))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::string children = read_file("/proc/" + std::to_string(n1) + "/task/" + std::to_string(n1) + "/children");
  ASSERT_FALSE(children.empty()) << "node 1's rank not found\n" << outputs(dir);
  kill(std::stoi(children), SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  int rc1 = wait_or_kill(n1, 60), rc0 = wait_or_kill(n0, 120);
  const std::string err0 = read_file(dir + "/node0.err");
  std::printf("node 0 exited with %d %.1f s after node 1's rank was killed; its last words: %s\n", rc0,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count(),
              err0.substr(err0.rfind('\n', err0.size() - 2) + 1).c_str());
  EXPECT_EQ(rc1, 128 + SIGKILL) << outputs(dir);
  EXPECT_NE(rc0, 0) << outputs(dir);
  EXPECT_NE(rc0, -1) << "node 0 did not stop within 2 minutes of losing node 1\n" << outputs(dir);

  // and both nodes resume from the last complete checkpoint to the end
  args = tiny_base_train_args(data, "lost", "12");
  args.insert(args.end(), {"--save-every", "3", "--resume", "latest"});
  auto [r0, r1] = run_two_nodes(nodes, 29614, base, args, dir);
  EXPECT_EQ(r0, 0) << outputs(dir);
  EXPECT_EQ(r1, 0) << outputs(dir);
  EXPECT_NE(outputs(dir).find("resuming from"), std::string::npos) << outputs(dir);
  EXPECT_EQ(access((ckpt + "/done_000012").c_str(), F_OK), 0) << outputs(dir);
  EXPECT_EQ(losses(ckpt + "/metrics.jsonl").size(), 12u);
  std::system(("rm -rf " + base + " " + dir).c_str());
}
