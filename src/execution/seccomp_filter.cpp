// The sandbox's syscall filter, written with libseccomp and exported as BPF once, in the parent
// (libseccomp allocates); bwrap installs it (--seccomp) just before it execs the interpreter.
// What HumanEval never needs and an escape would (mounts, device nodes, tracing, host names,
// anonymous memory files past RLIMIT_AS, SysV IPC objects that outlive the program, namespaces,
// kernel modules, keyrings, io_uring, clocks, ...) fails with EPERM; clone with a namespace flag
// too; clone3 says ENOSYS (glibc then uses clone, whose flags a filter can see).
// So does every way to hold kernel memory that no rlimit of the run counts: a TCP connection
// (listen/accept: a backlog holds connections no descriptor owns; connect and TCP Fast Open's
// sendto make one by a self-connect or a simultaneous open on loopback, and a closed end may
// linger as an orphan with its buffers; neither tool needs a network), native AIO contexts
// (io_setup: a host-wide count, fs.aio-max-nr) and inotify watches. Another architecture, and
// x86-64's x32 numbers, kill the process (libseccomp's bad-arch action).
// Two more doors out are shut by argument: the terminal (every 'T' ioctl but a few that only
// read, so no TIOCSTI typing into the caller's shell, no TIOCSPGRP taking its foreground, no
// TIOCSCTTY, TIOCLINUX, TIOCCONS, ...) and sockets of any family but IPv4/IPv6 (no AF_UNIX
// connect to a host socket, no netlink, vsock, packet, ...; a connected AF_UNIX stream or
// seqpacket pair from socketpair stays, which cannot reach any other socket).
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/filter.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "sandbox.h"

namespace nanochat {

namespace {

// by name: libseccomp knows each architecture's numbers, and skips a name this one lacks
const char* const kDenied[] = {
    "mknod",
    "mknodat",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "sethostname",
    "setdomainname",
    "memfd_create",
    "memfd_secret",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kcmp",
    "pidfd_getfd",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "syslog",
    "vhangup",
    "lookup_dcookie",
    "personality",
    "sysfs",
    "uselib",
    "iopl",
    "ioperm",
    // SysV IPC: a segment outlives its process and counts against no rlimit (the budget's bound)
    "shmget",
    "msgget",
    "semget",
    // TCP: a listener's backlog is memory no descriptor owns; a connection made any other way
    // (a self-connect, a simultaneous open) may leave an orphan holding its buffers
    "listen",
    "accept",
    "accept4",
    "connect",
    // native AIO: each context pins kernel memory and counts against the host-wide fs.aio-max-nr
    "io_setup",
    "io_destroy",
    "io_submit",
    "io_cancel",
    "io_getevents",
    "io_pgetevents",
    // inotify: each watch pins an inode, counted per uid (the caller's, when not root)
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
};

// sendto/sendmsg/sendmmsg with MSG_FASTOPEN connect a TCP socket as they send
constexpr uint64_t kMsgFastOpen = 0x20000000;

// the terminal ioctls ('T', 0x54xx) that stay: they read, or change only the caller's own
// descriptor (python's isatty is TCGETS; shutil.get_terminal_size TIOCGWINSZ)
const uint32_t kTerminalIoctlsKept[] = {
    0x5401 /* TCGETS */,   0x5413 /* TIOCGWINSZ */, 0x541B /* FIONREAD */, 0x5421 /* FIONBIO */,
    0x5450 /* FIONCLEX */, 0x5451 /* FIOCLEX */,    0x5452 /* FIOASYNC */, 0x5460 /* FIOQSIZE */};

const uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

// ioctl's request is an unsigned int: the kernel drops the upper half of the register, so the
// comparison must too (a request of 0x1'00005412 is TIOCSTI). The mask 0xffff also ignores the
// direction and size bits, so every 'T' request is caught whatever its encoding.
bool add_terminal_rules(scmp_filter_ctx ctx) {
  for (uint32_t nr = 0; nr < 256; nr++) {
    const uint32_t request = 0x5400 | nr;
    bool kept = false;
    for (uint32_t k : kTerminalIoctlsKept) kept = kept || k == request;
    if (!kept && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffff, request)) != 0)
      return false;
  }
  return true;
}

// socket(): IPv4 and IPv6 only (the empty network namespace answers them). Each other family
// below 64 is refused by value, and anything above 63 (which covers a family with garbage in
// the register's upper half) as a whole. socketpair(): AF_UNIX stream or seqpacket only; a
// datagram pair could sendto() a host's named socket.
bool add_socket_rules(scmp_filter_ctx ctx) {
  const int refused = EAFNOSUPPORT;
  for (uint64_t family = 0; family < 64; family++) {
    if (family == AF_INET || family == AF_INET6) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(refused), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, family)) != 0)
      return false;
  }
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(refused), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_GT, 63)) != 0) return false;
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(refused), SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0)
    return false;
  for (uint64_t type = 0; type < 16; type++) {  // SOCK_TYPE_MASK; the flags above it may vary
    if (type == SOCK_STREAM || type == SOCK_SEQPACKET) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, type)) !=
        0)
      return false;
  }
  return true;
}

bool add_rules(scmp_filter_ctx ctx) {
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) return false;
  for (const char* name : kDenied) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0) return false;
  }
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0) return false;
  for (uint64_t flag : kNamespaceFlags)  // clone's first argument is its flags
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) != 0)
      return false;
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendto), 1,
                       SCMP_A3(SCMP_CMP_MASKED_EQ, kMsgFastOpen, kMsgFastOpen)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendmsg), 1,
                       SCMP_A2(SCMP_CMP_MASKED_EQ, kMsgFastOpen, kMsgFastOpen)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sendmmsg), 1,
                       SCMP_A3(SCMP_CMP_MASKED_EQ, kMsgFastOpen, kMsgFastOpen)) != 0)
    return false;
  return add_terminal_rules(ctx) && add_socket_rules(ctx);
}

// the filter's BPF instructions, through a memory file (libseccomp 2.5 exports to a descriptor)
std::vector<sock_filter> build_filter() {
  std::unique_ptr<void, decltype(&seccomp_release)> ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  if (!ctx || !add_rules(ctx.get())) return {};
  const int fd = memfd_create("nanochat-seccomp", MFD_CLOEXEC);
  if (fd < 0) return {};
  std::vector<sock_filter> program;
  const off_t bytes = seccomp_export_bpf(ctx.get(), fd) == 0 ? lseek(fd, 0, SEEK_END) : -1;
  if (bytes > 0 && bytes % (off_t)sizeof(sock_filter) == 0) {
    program.resize((size_t)bytes / sizeof(sock_filter));
    if (pread(fd, program.data(), (size_t)bytes, 0) != (ssize_t)bytes) program.clear();
  }
  close(fd);
  return program;
}

}  // namespace

const sock_fprog* sandbox_seccomp_filter() {
  static const std::vector<sock_filter> program = build_filter();
  static const sock_fprog filter{(unsigned short)program.size(), const_cast<sock_filter*>(program.data())};
  return program.empty() ? nullptr : &filter;
}

}  // namespace nanochat
