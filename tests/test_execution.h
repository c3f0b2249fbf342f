// Helpers shared by the execution tests' parts
#pragma once
#include <dirent.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <set>
#include <string>

namespace execution_test {

inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// the system's interpreter, which the run's own uid can run (the venv's may live under a 0700 /root)
inline std::string system_python() {
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : NANOCHAT_PYTHON;
}

// the run directories (nanochat_exec_*: the root run's tmpfs mount point) /tmp holds
inline std::set<std::string> run_dirs_in_tmp() {
  std::set<std::string> names;
  DIR* d = opendir("/tmp");
  for (dirent* e; d && (e = readdir(d));) {
    const std::string n = e->d_name;
    if (n.rfind("nanochat_exec_", 0) == 0 && n.rfind("nanochat_exec_victim", 0) != 0) names.insert(n);
  }
  if (d) closedir(d);
  return names;
}

// the run directories made since `before` that are still there 10 s later: a run's left-overs.
// Other test processes (ctest -j) run programs meanwhile; theirs go when their runs end.
inline std::set<std::string> run_dirs_left_since(const std::set<std::string>& before) {
  std::set<std::string> left;
  for (const std::string& n : run_dirs_in_tmp())
    if (!before.count(n)) left.insert(n);
  for (int i = 0; i < 100 && !left.empty(); i++) {
    usleep(100 * 1000);
    const std::set<std::string> now = run_dirs_in_tmp();
    for (auto it = left.begin(); it != left.end();) it = now.count(*it) ? std::next(it) : left.erase(it);
  }
  return left;
}

// `body` in a forked child turned into uid/gid 65534 (as root), its answer through a pipe;
// "cannot become uid 65534" or "the child died" when it could not answer
inline std::string as_nobody(const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    std::string answer = "cannot become uid 65534";
    if (setgroups(0, nullptr) == 0 && setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0)
      answer = body();
    (void)!write(fds[1], answer.data(), answer.size());
    _exit(0);
  }
  close(fds[1]);
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) answer.append(buf, (size_t)n);
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) answer += " (the child died)";
  return answer;
}

// "" when every "<name>: " line of a program's report says "refused", else the lines that did not
inline std::string not_refused(const std::string& report, const std::initializer_list<const char*>& names) {
  std::string failed;
  for (const char* name : names) {
    const std::string head = std::string(name) + ": ";
    const size_t at = report.find(head);
    if (at == std::string::npos) failed += std::string(name) + ": no answer; ";
    else if (report.compare(at + head.size(), 7, "refused") != 0)
      failed += report.substr(at, report.find('\n', at) - at) + "; ";
  }
  return failed;
}

}  // namespace execution_test
