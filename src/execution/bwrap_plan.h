// What a sandboxed run is made of, decided in the parent (internal to the execution module):
// where bwrap and the interpreter are, the run's own uid, and bwrap's command line.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "nanochat/execution.h"

namespace nanochat {

// `name` on $PATH, "" when absent
std::string bwrap_find(const std::string& name);

// the interpreter (ExecutionOptions::python, $NANOCHAT_EXEC_PYTHON, else the first python3 on
// PATH that is a binary readable by others: a pyenv shim is a script that would run host tools).
// Throws when none can be found at all. `why_not` gets why the run's uid cannot run the one
// chosen ("" when it can).
std::string bwrap_find_python(const ExecutionOptions& opts, std::string& why_not);

// root: a uid (and gid, the same number) that no process on the host uses now and no other run
// of this process holds, from a high range no distribution hands out; (uid_t)-1 when none found
uid_t bwrap_pick_uid();
void bwrap_release_uid(uid_t uid);

// how many tasks (threads: what RLIMIT_NPROC counts) run as `uid` now
int64_t bwrap_tasks_of(uid_t uid);

// does this kernel count RLIMIT_NPROC per user namespace and uid (Linux 5.14 and later), so that
// a run in a user namespace of its own is counted apart from its caller
bool bwrap_nproc_per_user_namespace();

// bwrap's arguments for one run: every namespace, --cap-drop ALL, --new-session,
// --die-with-parent, its own /proc and /dev, /usr (and the interpreter's prefix, and a venv)
// read-only, /tmp and /dev/shm the run's tmpfs (`tmp_dir`'s "tmp" and "shm"), the rest read-only,
// the seccomp filter from fd 4, the sandbox's pid 1 written to fd 6, then the interpreter
std::vector<std::string> bwrap_command(const std::string& bwrap, const std::string& python, const std::string& tmp_dir,
                                       const std::vector<std::string>& program);

}  // namespace nanochat
