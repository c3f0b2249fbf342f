// defines: LaunchOptions, launch_run
// `nanochat launch`: torchrun for nanochat. Starts --nproc-per-node local ranks with
// torchrun's variables, prefixes each output line with its rank, forwards SIGINT/SIGTERM,
// and when one rank fails stops the others and returns non-zero.
#pragma once
#include <string>
#include <vector>

namespace nanochat {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0: a free port on one node, 29500 on several
  double kill_grace_seconds = 5.0;  // SIGTERM, then SIGKILL after this long
  std::vector<std::string> argv;    // the full command each rank runs
};

// returns the exit code for the launcher: 0 when every rank exited 0, else the first
// failing rank's code (128 + signal for a signal)
int launch_run(const LaunchOptions& opts);

}  // namespace nanochat
