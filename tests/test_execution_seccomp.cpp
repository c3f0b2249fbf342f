// execution, the syscall filter alone: loaded in a forked child, with no other layer of the jail,
// it refuses what it lists with the errno it says (a root without it would get another answer or
// succeed), lets the rest through, and kills a syscall of x86-64's x32 ABI; the terminal-control
// ioctls and every socket family but IPv4/IPv6 are refused the same way, and so is each way to
// hold kernel memory no rlimit counts: a TCP listener, accept, connect, TCP Fast Open's sendto,
// native AIO, inotify.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
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

// the terminal ioctls, on /dev/null (where the kernel itself says ENOTTY, so EPERM is the
// filter's), by name and with the request's upper half set (the kernel ignores it); TCGETS
// still gets the kernel's answer
int terminal_ioctls_refused() {
  const int fd = open("/dev/null", O_RDWR);
  if (fd < 0) return 20;
  char c = 'x';
  const unsigned long refused[] = {
      TIOCSTI, TIOCLINUX, TIOCSCTTY, TIOCSPGRP, TIOCCONS, TIOCSETD, TCSETS, TIOCNOTTY, 0x100000000UL | TIOCSTI};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    errno = 0;
    if (syscall(SYS_ioctl, fd, refused[i], &c) != -1 || errno != EPERM) return 21 + (int)i;
  }
  struct termios t;
  errno = 0;
  if (ioctl(fd, TCGETS, &t) != -1 || errno != ENOTTY) return 40;
  int bytes = 0;
  if (ioctl(fd, FIONREAD, &bytes) == -1 && errno == EPERM) return 41;
  close(fd);
  return 0;
}

// socket(): IPv4 and IPv6 only (the kernel would give the others); socketpair(): AF_UNIX
// stream or seqpacket only
int socket_families_refused() {
  const long refused[] = {AF_UNIX, AF_NETLINK, AF_PACKET, 40 /* AF_VSOCK */, 38 /* AF_ALG */, 0x100000000L | AF_UNIX};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    errno = 0;
    if (syscall(SYS_socket, refused[i], SOCK_DGRAM, 0) != -1 || errno != EAFNOSUPPORT) return 50 + (int)i;
  }
  const int inet = socket(AF_INET, SOCK_STREAM, 0), inet6 = socket(AF_INET6, SOCK_DGRAM, 0);
  if (inet < 0 || (inet6 < 0 && errno != EAFNOSUPPORT)) return 60;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 61;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) return 62;
  errno = 0;
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != -1 || errno != EPERM) return 63;
  if (socketpair(AF_UNIX, SOCK_RAW, 0, pair) != -1 || errno != EPERM) return 64;  // the kernel makes it DGRAM
  return 0;
}

// each on a real IPv4 socket of this process's network, where the kernel would say otherwise
// (listen 0, connect to a closed port ECONNREFUSED, accept on a non-listener EINVAL, io_setup 0)
int kernel_memory_holders_refused() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return 70;
  sockaddr_in lo{};
  lo.sin_family = AF_INET;
  lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  lo.sin_port = htons(1);
  errno = 0;
  if (listen(s, 8) != -1 || errno != EPERM) return 71;
  if (accept(s, nullptr, nullptr) != -1 || errno != EPERM) return 72;
  if (accept4(s, nullptr, nullptr, SOCK_CLOEXEC) != -1 || errno != EPERM) return 73;
  if (connect(s, (sockaddr*)&lo, sizeof lo) != -1 || errno != EPERM) return 74;
  if (sendto(s, "x", 1, MSG_FASTOPEN, (sockaddr*)&lo, sizeof lo) != -1 || errno != EPERM) return 75;
  unsigned long ctx = 0;
  if (syscall(SYS_io_setup, 16, &ctx) != -1 || errno != EPERM) return 76;
  if (syscall(SYS_io_submit, 0UL, 0L, nullptr) != -1 || errno != EPERM) return 77;
  if (syscall(SYS_inotify_init1, 0) != -1 || errno != EPERM) return 78;
  // a datagram without MSG_FASTOPEN still goes
  const int u = socket(AF_INET, SOCK_DGRAM, 0);
  if (u < 0 || sendto(u, "x", 1, 0, (sockaddr*)&lo, sizeof lo) != 1) return 79;
  close(u);
  close(s);
  return 0;
}

int x32_getpid() { return (int)syscall(0x40000000 | SYS_getpid) == 0 ? 0 : 9; }

}  // namespace

TEST(ExecutionSeccomp, RefusesWhatItListsAndLetsTheRestThrough) {
  const int status = status_under_filter(listed_calls_refused);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the first check that failed (100: the filter did not load)";
}

TEST(ExecutionSeccomp, RefusesTerminalControl) {
  const int status = status_under_filter(terminal_ioctls_refused);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the first check that failed (21-29: a request in order, 40-41: a kept one)";
}

TEST(ExecutionSeccomp, RefusesSocketFamiliesButIp) {
  const int status = status_under_filter(socket_families_refused);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the first check that failed (50-55: a family in order, 60-64: socketpair)";
}

TEST(ExecutionSeccomp, RefusesWhatHoldsKernelMemory) {
  const int status = status_under_filter(kernel_memory_holders_refused);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the first check that failed (71-78: in order, 79: a plain datagram)";
}

#if defined(__x86_64__)
TEST(ExecutionSeccomp, AnX32SyscallKillsTheProcess) {
  const int status = status_under_filter(x32_getpid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGSYS);
}
#endif
