// One memory and process budget for a whole sandboxed run (internal to the execution module):
// a cgroup v2 leaf per run, made under this process's own cgroup, with memory.max,
// memory.swap.max = 0 and pids.max. The child that execs bwrap is cloned straight into it (clone3's
// CLONE_INTO_CGROUP), so everything the program forks is counted together. Without it the run
// is held to the looser execution_memory_bound() (rlimits on the run's own uid).
//
// To hand controllers to child groups, a cgroup may hold no process itself (cgroup v2's "no
// internal processes" rule): the first time, when this process's cgroup does not yet pass
// memory and pids down, this process moves into a leaf of its own below it (<cgroup>/nanochat)
// and enables them there. Where that is refused (no cgroup v2, the controllers bound to a
// cgroup v1 hierarchy, other processes sharing the cgroup, no write access), `why` says so.
#pragma once
#include <cstdint>
#include <string>

namespace nanochat {

struct RunBudget {
  std::string dir;  // the leaf, "" when none
  int fd = -1;      // its directory, for CLONE_INTO_CGROUP
};

// makes the leaf; false and `why` (one phrase) when the budget cannot be had here
bool run_budget_open(RunBudget& budget, int64_t memory_bytes, int64_t processes, std::string& why);

// "" when run_budget_open can make leaves here, else why not
std::string run_budget_refused();

// kills what is left in the leaf and removes it; true when the kernel's OOM killer acted in it
// (the run went past its memory)
bool run_budget_close(RunBudget& budget);

}  // namespace nanochat
