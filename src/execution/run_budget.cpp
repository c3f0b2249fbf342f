// The per-run cgroup v2 leaf (see run_budget.h). Parent side: may allocate.
#include "run_budget.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "nanochat/common/error.h"

namespace nanochat {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// 0, or the errno of a failed write
int write_text(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int e = write(fd, text.data(), text.size()) == (ssize_t)text.size() ? 0 : errno;
  close(fd);
  return e;
}

bool has_word(const std::string& list, const std::string& word) {
  std::istringstream in(list);
  for (std::string w; in >> w;)
    if (w == word) return true;
  return false;
}

// this process's cgroup v2 directory, or "" and why not
std::string own_cgroup_dir(std::string& why) {
  std::string rel;
  bool v1_memory = false;
  std::istringstream cg(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(cg, line);) {
    if (line.rfind("0::", 0) == 0) rel = line.substr(3);
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a != std::string::npos && b != std::string::npos && has_word(line.substr(a + 1, b - a - 1), "memory"))
      v1_memory = true;  // hierarchy-id:controllers:path with memory among the controllers: cgroup v1
  }
  std::string mount_point, mount_root;
  std::istringstream mi(read_text("/proc/self/mountinfo"));
  for (std::string line; std::getline(mi, line);) {
    // id parent major:minor root mount-point options ... - fstype source super-options
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line.substr(0, dash));
    std::string id, parent, dev;
    f >> id >> parent >> dev >> mount_root >> mount_point;
    break;
  }
  const char* v1 = v1_memory ? "; the memory controller is bound to a cgroup v1 hierarchy here" : "";
  if (rel.empty() || mount_point.empty()) {
    why = strprintf("no cgroup v2 hierarchy%s", v1);
    return "";
  }
  if (mount_root != "/" && rel.rfind(mount_root, 0) == 0) rel = rel.substr(mount_root.size());
  std::string dir = mount_point + (rel == "/" ? "" : rel);
  const std::string controllers = read_text(dir + "/cgroup.controllers");
  if (!has_word(controllers, "memory") || !has_word(controllers, "pids")) {
    const std::string has = controllers.substr(0, controllers.find('\n'));
    why = strprintf("the cgroup v2 group %s has no memory and pids controllers (only: %s)%s", dir.c_str(),
                    has.empty() ? "none" : has.c_str(), v1);
    return "";
  }
  return dir;
}

// the directory the run leaves go under, memory and pids enabled for its children; found once
const std::string& leaf_parent(std::string& why) {
  static std::mutex mutex;
  static std::string parent, reason;
  static bool done = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done) {
    done = true;
    const std::string dir = own_cgroup_dir(reason);
    const std::string subtree = dir.empty() ? "" : read_text(dir + "/cgroup.subtree_control");
    if (!dir.empty() && has_word(subtree, "memory") && has_word(subtree, "pids")) {
      parent = dir;
    } else if (!dir.empty()) {
      // leave the cgroup to the runs: this process into a leaf of its own, then the controllers on
      const std::string self = dir + "/nanochat";
      int e = mkdir(self.c_str(), 0755) == 0 || errno == EEXIST ? 0 : errno;
      const bool moved = !e && !(e = write_text(self + "/cgroup.procs", "0"));
      if (!e) e = write_text(dir + "/cgroup.subtree_control", "+memory +pids");
      if (!e) parent = dir;
      if (e && moved && write_text(dir + "/cgroup.procs", "0") == 0) rmdir(self.c_str());  // back where it was
      if (e)
        reason = strprintf("cannot enable memory and pids for child groups of %s: %s%s", dir.c_str(), strerror(e),
                           e == EBUSY ? " (other processes share this cgroup; give nanochat one of its own)" : "");
    }
  }
  why = reason;
  return parent;
}

}  // namespace

bool run_budget_open(RunBudget& budget, int64_t memory_bytes, int64_t processes, std::string& why) {
  const std::string& parent = leaf_parent(why);
  if (parent.empty()) return false;
  static std::atomic<unsigned> counter{0};
  const std::string dir = strprintf("%s/nanochat-run-%d-%u", parent.c_str(), (int)getpid(), counter++);
  if (mkdir(dir.c_str(), 0755) != 0) {
    why = strprintf("cannot make %s: %s", dir.c_str(), strerror(errno));
    return false;
  }
  int e = write_text(dir + "/memory.max", std::to_string(memory_bytes));
  if (!e) {
    const int swap = write_text(dir + "/memory.swap.max", "0");
    e = swap == ENOENT ? 0 : swap;  // no swap accounting: nothing to swap to through it
  }
  if (!e) e = write_text(dir + "/pids.max", std::to_string(processes));
  const int fd = e ? -1 : open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (!e && fd < 0) e = errno;
  if (e) {
    why = strprintf("cannot set the limits of %s: %s", dir.c_str(), strerror(e));
    rmdir(dir.c_str());
    return false;
  }
  budget.dir = dir;
  budget.fd = fd;
  return true;
}

std::string run_budget_refused() {
  std::string why;
  return leaf_parent(why).empty() ? why : "";
}

bool run_budget_close(RunBudget& budget) {
  if (budget.dir.empty()) return false;
  close(budget.fd);
  budget.fd = -1;
  write_text(budget.dir + "/cgroup.kill", "1");  // Linux 5.14+; the run's uid was already cleared
  const std::string events = read_text(budget.dir + "/memory.events");
  const size_t at = events.find("oom_kill ");
  const bool oom = at != std::string::npos && std::atol(events.c_str() + at + 9) > 0;
  // a killed process leaves the group once it is reaped: a moment after bwrap
  for (int i = 0; i < 200 && rmdir(budget.dir.c_str()) != 0 && errno == EBUSY; i++) usleep(5000);
  budget.dir.clear();
  return oom;
}

}  // namespace nanochat
