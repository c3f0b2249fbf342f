// execution, the syscall filter alone: loaded in a forked child, with no other layer of the jail,
// it refuses what it lists with the errno it says (a root without it would get another answer or
// succeed), lets the rest through, and kills a syscall of x86-64's x32 ABI.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/seccomp.h>

#include <cerrno>

#include "../src/execution/sandbox.h"  // sandbox_seccomp_filter

namespace {

// runs `body` in a child under the filter; its wait status
int status_under_filter(int (*body)()) {
  const struct sock_fprog* filter = nanochat::sandbox_seccomp_filter();  // built here, in the parent
  if (!filter) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter, 0, 0) != 0)
      _exit(100);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// 0 when every answer is the filter's, else the number of the first check that was not
int listed_calls_refused() {
  errno = 0;
  if (syscall(SYS_mount, "none", "/no/such/dir", "tmpfs", 0, nullptr) != -1 || errno != EPERM) return 1;  // else ENOENT
  if (syscall(SYS_memfd_create, "x", 0) != -1 || errno != EPERM) return 2;
  if (syscall(SYS_unshare, CLONE_NEWUTS) != -1 || errno != EPERM) return 3;
  if (syscall(SYS_clone3, nullptr, 0) != -1 || errno != ENOSYS) return 4;  // else EFAULT or EINVAL
  const long child = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0);
  if (child == 0) _exit(0);
  if (child != -1 || errno != EPERM) return 5;
  const long plain = syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0);  // a plain fork passes
  if (plain == 0) _exit(0);
  if (plain <= 0) return 6;
  if (syscall(SYS_getpid) != getpid()) return 7;
  return 0;
}

int x32_getpid() { return (int)syscall(0x40000000 | SYS_getpid) == 0 ? 0 : 9; }

}  // namespace

TEST(ExecutionSeccomp, RefusesWhatItListsAndLetsTheRestThrough) {
  const int status = status_under_filter(listed_calls_refused);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the first check that failed (100: the filter did not load)";
}

#if defined(__x86_64__)
TEST(ExecutionSeccomp, AnX32SyscallKillsTheProcess) {
  const int status = status_under_filter(x32_getpid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}
#endif
