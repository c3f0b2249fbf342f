// The parent's choices for a sandboxed run (see bwrap_plan.h). May allocate.
#include "bwrap_plan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <random>
#include <set>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"

namespace nanochat {

namespace {

// a uid range no distribution hands out (useradd stops at 60000, systemd's dynamic users at
// 65519, container sub-uid ranges start at 100000 and rarely go past a few million)
constexpr uid_t kRunUidBase = 1700000000;
constexpr uid_t kRunUidSpan = 1u << 24;

std::mutex g_uid_mutex;
std::set<uid_t> g_uids_held;

// every uid and gid a process on the host holds now (real, effective, saved, filesystem): each
// /proc/<pid>/status read with one read() (a few ms for a few hundred processes)
std::set<uid_t> ids_in_use() {
  std::set<uid_t> used;
  DIR* proc = opendir("/proc");
  if (!proc) return used;
  char path[64], buf[4096];
  for (dirent* d; (d = readdir(proc));) {
    if (d->d_name[0] < '1' || d->d_name[0] > '9') continue;
    std::snprintf(path, sizeof path, "/proc/%.20s/status", d->d_name);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    for (const char* key : {"\nUid:", "\nGid:"}) {
      const char* at = std::strstr(buf, key);
      char* p = at ? const_cast<char*>(at) + 5 : nullptr;
      for (int i = 0; p && i < 4; i++) used.insert((uid_t)std::strtoul(p, &p, 10));
    }
  }
  closedir(proc);
  return used;
}

// can a uid that is neither owner nor in the group read and run `path` (every ancestor searchable)
bool others_can_run(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH) || !(st.st_mode & S_IROTH)) return false;
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    if (stat(path.substr(0, at).c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
  return true;
}

bool is_script(const std::string& path) {
  char head[2] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  const size_t n = std::fread(head, 1, 2, f);
  std::fclose(f);
  return n == 2 && head[0] == '#' && head[1] == '!';
}

std::string real_path(const std::string& path) {
  char real[PATH_MAX];
  return realpath(path.c_str(), real) ? std::string(real) : path;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
}

bool below(const std::string& path, const std::string& dir) { return path.rfind(dir + "/", 0) == 0; }

}  // namespace

std::string bwrap_find(const std::string& name) {
  const std::string path = env_get("PATH").value_or("");
  for (size_t from = 0; from <= path.size();) {
    size_t to = path.find(':', from);
    if (to == std::string::npos) to = path.size();
    const std::string cand = (to > from ? path.substr(from, to - from) : ".") + "/" + name;
    struct stat st {};
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
    from = to + 1;
  }
  return "";
}

std::string bwrap_find_python(const ExecutionOptions& opts, std::string& why_not) {
  std::string p = !opts.python.empty() ? opts.python : env_get("NANOCHAT_EXEC_PYTHON").value_or("python3");
  if (p.find('/') == std::string::npos) {  // the first on PATH that is a binary others can run
    const std::string name = p, path = env_get("PATH").value_or("/usr/bin:/bin");
    p.clear();
    std::string any;
    for (size_t from = 0; from <= path.size() && p.empty();) {
      size_t to = path.find(':', from);
      if (to == std::string::npos) to = path.size();
      const std::string cand = (to > from ? path.substr(from, to - from) : ".") + "/" + name;
      if (access(cand.c_str(), X_OK) == 0 && any.empty()) any = cand;
      if (access(cand.c_str(), X_OK) == 0 && !is_script(cand) && others_can_run(real_path(cand))) p = cand;
      from = to + 1;
    }
    if (p.empty()) p = any;  // (then why_not below says what is wrong with it)
    if (p.empty())
      fail("execute_code: %s not found on PATH (set NANOCHAT_EXEC_PYTHON to a Python 3 interpreter)", name.c_str());
  }
  if (access(p.c_str(), X_OK) != 0)
    fail("execute_code: cannot run %s: %s (set NANOCHAT_EXEC_PYTHON to a Python 3 interpreter)", p.c_str(),
         strerror(errno));
  why_not.clear();
  if (p[0] != '/')
    why_not = strprintf("the interpreter %s is not an absolute path; set NANOCHAT_EXEC_PYTHON to one", p.c_str());
  else if (is_script(p))
    why_not = strprintf("%s is a script (a pyenv shim?), not an interpreter; set NANOCHAT_EXEC_PYTHON to the binary",
                        p.c_str());
  else if (geteuid() == 0 && !others_can_run(real_path(p)))
    why_not = strprintf(
        "the run's own uid cannot reach %s (a directory above it is closed to others, e.g. a 0700 /root); "
        "set NANOCHAT_EXEC_PYTHON to an interpreter others can run, such as /usr/bin/python3",
        real_path(p).c_str());
  return p;
}

uid_t bwrap_pick_uid() {
  const std::set<uid_t> used = ids_in_use();
  std::lock_guard<std::mutex> lock(g_uid_mutex);
  static std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 1000; attempt++) {
    const uid_t uid = kRunUidBase + (uid_t)(rng() % kRunUidSpan);
    if (used.count(uid) || g_uids_held.count(uid)) continue;
    g_uids_held.insert(uid);
    return uid;
  }
  return (uid_t)-1;
}

void bwrap_release_uid(uid_t uid) {
  std::lock_guard<std::mutex> lock(g_uid_mutex);
  g_uids_held.erase(uid);
}

int64_t bwrap_tasks_of(uid_t uid) {
  int64_t n = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  char path[64], buf[4096];
  for (dirent* d; (d = readdir(proc));) {
    struct stat st {};
    if (d->d_name[0] < '1' || d->d_name[0] > '9') continue;
    std::snprintf(path, sizeof path, "/proc/%.20s/status", d->d_name);
    if (stat(path, &st) != 0 || st.st_uid != uid) continue;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0) close(fd);
    if (got <= 0) continue;
    buf[got] = 0;
    const char* at = std::strstr(buf, "\nThreads:");
    n += at ? std::max(1L, std::strtol(at + 9, nullptr, 10)) : 1;
  }
  closedir(proc);
  return n;
}

bool bwrap_nproc_per_user_namespace() {
  utsname u{};
  int major = 0, minor = 0;
  return uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 5 || (major == 5 && minor >= 14));
}

std::vector<std::string> bwrap_command(const std::string& bwrap, const std::string& python, const std::string& tmp_dir,
                                       const std::vector<std::string>& program) {
  std::vector<std::string> a = {bwrap,
                                "--unshare-user",
                                "--unshare-pid",
                                "--unshare-ipc",
                                "--unshare-net",
                                "--unshare-uts",
                                "--unshare-cgroup",
                                "--cap-drop",
                                "ALL",
                                "--new-session",
                                "--die-with-parent",
                                "--ro-bind",
                                "/usr",
                                "/usr"};
  // merged /usr: /bin, /lib, ... are links into it; else their own read-only binds
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st {};
    if (lstat(top, &st) != 0) continue;
    char target[PATH_MAX];
    const ssize_t n = S_ISLNK(st.st_mode) ? readlink(top, target, sizeof target - 1) : -1;
    if (n > 0) a.insert(a.end(), {"--symlink", std::string(target, (size_t)n), top});
    else if (S_ISDIR(st.st_mode)) a.insert(a.end(), {"--ro-bind", top, top});
  }
  a.insert(a.end(), {"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"});
  // the interpreter's prefix (<prefix>/bin/python3) and a venv's own directory, when not in /usr
  std::vector<std::string> dirs = {parent_dir(parent_dir(real_path(python)))};
  const std::string venv = parent_dir(parent_dir(python));
  if (access((venv + "/pyvenv.cfg").c_str(), F_OK) == 0) dirs.push_back(venv);
  for (const std::string& d : dirs)
    if (d != "/" && d != "/usr" && !below(d, "/usr")) a.insert(a.end(), {"--ro-bind", d, d});
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  a.insert(a.end(), {"--bind", tmp_dir + "/tmp", "/tmp", "--bind", tmp_dir + "/shm", "/dev/shm"});
  // bwrap's own root and /dev are tmpfs without a size: read-only, so nothing fills them
  a.insert(a.end(),
           {"--remount-ro", "/", "--remount-ro", "/dev", "--chdir", "/tmp", "--seccomp", "4", "--info-fd", "6"});
  a.insert(a.end(), program.begin(), program.end());
  return a;
}

}  // namespace nanochat
