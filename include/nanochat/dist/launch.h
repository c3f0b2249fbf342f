// `nanochat launch`: torchrun for nanochat. Starts --nproc-per-node local ranks with
// torchrun's variables, prefixes each output line with its rank, and stops them as an
// operator expects:
//   - SIGINT/SIGTERM to the launcher: forwarded to every rank, which then has grace_seconds
//     to finish (base-train saves a checkpoint); a second SIGINT/SIGTERM kills them at once;
//   - SIGHUP (the terminal or ssh session went away): forwarded as SIGTERM, so ranks save;
//   - one rank fails: SIGTERM to the others, SIGKILL after kill_grace_seconds (they cannot
//     finish a collective save without it);
//   - the launcher dies, even by SIGKILL: every rank gets SIGKILL (PR_SET_PDEATHSIG), no
//     orphan keeps the GPUs;
//   - a rank cannot be started: the ranks already started are killed.
#pragma once
#include <string>
#include <vector>

namespace nanochat {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;              // 0: a free port on one node, 29500 on several
  double grace_seconds = 300.0;     // after a forwarded signal: long enough to save a large model
  double kill_grace_seconds = 5.0;  // after a rank failed: SIGTERM, then SIGKILL this long after
  std::vector<std::string> argv;    // the full command each rank runs
  std::string resume_command;       // printed when a forwarded signal stopped every rank cleanly
};

// returns the exit code for the launcher: 0 when every rank exited 0, 128 + the signal after
// a forwarded signal, else the first failing rank's code (128 + signal for a signal)
int launch_run(const LaunchOptions& opts);

}  // namespace nanochat
