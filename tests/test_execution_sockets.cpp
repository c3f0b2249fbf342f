// execution, the host's sockets: a listener on a 0777 named UNIX socket in /tmp and in /run
// (stream and datagram, as a database, X11 or D-Bus would have) hears nothing from the program,
// whichever way it tries (connect, sendto, a datagram socketpair's sendto, a raw socket() with
// the family's upper half set); AF_VSOCK, AF_NETLINK and AF_PACKET sockets are refused; what a
// program legitimately uses (a stream socketpair, an IPv4 socket) still works. No TCP connection
// can be made in a run (a listener's backlog, a self-connect, TCP Fast Open: TCP memory is
// host-wide and no rlimit counts a connection nobody accepted), nor a native AIO context or an
// inotify watch. As root (the program as a uid of its own) and as uid 65534 (bwrap run by that
// user).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>

#include "nanochat/execution.h"
#include "test_execution.h"

using namespace execution_test;
using namespace nanochat;

namespace {

const char* const kSocketAttempts = R"PY(import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        print(f"{name}: ESCAPED {fn()!r}"[:200], flush=True)
    except BaseException as e:
        print(f"{name}: refused ({type(e).__name__}: {e})"[:200], flush=True)
def stream(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s.send(b"stream")
def datagram(path):
    return socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"datagram", path)
def pair(path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    return a.sendto(b"pair", path)
def upper_half(path):
    fd = libc.syscall(41, ctypes.c_long(0x100000000 | socket.AF_UNIX), socket.SOCK_STREAM, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket")
    s = socket.socket(fileno=fd)
    s.connect(path)
    return s.send(b"upper")
for where, d in (("tmp", "@TMP@"), ("run", "@RUN@")):
    attempt(f"stream {where}", lambda: stream(d + "/s"))
    attempt(f"datagram {where}", lambda: datagram(d + "/d"))
    attempt(f"socketpair {where}", lambda: pair(d + "/d"))
    attempt(f"upper half {where}", lambda: upper_half(d + "/s"))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("netlink route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("netlink uevent", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
a, b = socket.socketpair()
a.send(b"ok")
print("stream pair:", b.recv(2).decode())
print("ipv4 socket:", socket.socket().family.name)
)PY";

const std::initializer_list<const char*> kAttempts = {"stream tmp", "datagram tmp",  "socketpair tmp", "upper half tmp",
                                                      "stream run", "datagram run",  "socketpair run", "upper half run",
                                                      "vsock",      "netlink route", "netlink uevent", "packet"};

// the round-5 probe: a loopback listener whose backlog fills with connections never accepted
// (1.3 GB of host TCP memory from 5 descriptors), and the other ways to a TCP connection
const char* const kKernelMemoryAttempts = R"PY(import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):  # the filter's answer is EPERM; the kernel's own would be another
    try:
        print(f"{name}: ESCAPED {fn()!r}"[:200], flush=True)
    except PermissionError as e:
        print(f"{name}: refused ({e})"[:200], flush=True)
    except BaseException as e:
        print(f"{name}: not the filter's answer ({type(e).__name__}: {e})"[:200], flush=True)
def backlog():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    held = []
    for i in range(8):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(s.getsockname())
        held.append(c)
    return "listening"
def accept():
    s = socket.socket()
    s.setblocking(False)
    return s.accept()
def accept4():
    s = socket.socket()
    if libc.accept4(s.fileno(), None, None, 0o4000) < 0:
        raise OSError(ctypes.get_errno(), "accept4")
def self_connect():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.connect(s.getsockname())
    return "connected to itself"
def fast_open():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s.sendto(b"x" * 1000, 0x20000000, s.getsockname())  # MSG_FASTOPEN
def io_setup():
    ctx = ctypes.c_ulong(0)
    if libc.syscall(206, 1024, ctypes.byref(ctx)) != 0:  # x86-64's io_setup
        raise OSError(ctypes.get_errno(), "io_setup")
    return ctx.value
def inotify():
    if libc.inotify_init1(0) < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
attempt("listen", backlog)
attempt("accept", accept)
attempt("accept4", accept4)
attempt("self-connect", self_connect)
attempt("fast open", fast_open)
attempt("io_setup", io_setup)
attempt("inotify", inotify)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 0))
u.sendto(b"ok", u.getsockname())
print("udp to itself:", u.recv(2).decode())
)PY";

// "" when every attempt above was refused and a datagram to itself still works
std::string kernel_memory_held(const std::string& python) {
  ExecutionOptions o;
  o.python = python;
  const ExecutionResult r = execute_code(kKernelMemoryAttempts, o);
  std::string failed;
  if (!r.success) failed += "the run failed: " + r.error + "; ";
  failed += not_refused(r.stdout_text,
                        {"listen", "accept", "accept4", "self-connect", "fast open", "io_setup", "inotify"});
  if (r.stdout_text.find("udp to itself: ok\n") == std::string::npos)
    failed += "a datagram to itself did not work: " + r.stdout_text;
  return failed;
}

// a 0777 directory holding a stream listener `s` and a datagram socket `d`, both 0777
struct HostSockets {
  std::string dir;
  int stream = -1, dgram = -1;
  HostSockets(const std::string& parent, const char* tag) {
    dir = parent + "/nanochat_host_sockets_" + tag + "_" + std::to_string(getpid());
    mkdir(dir.c_str(), 0777);
    chmod(dir.c_str(), 0777);
    stream = bind_at("s", SOCK_STREAM);
    dgram = bind_at("d", SOCK_DGRAM);
    if (stream >= 0) listen(stream, 8);
  }
  int bind_at(const char* name, int type) {
    const int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s/%s", dir.c_str(), name);
    unlink(a.sun_path);
    if (fd < 0 || bind(fd, (sockaddr*)&a, sizeof a) != 0) return -1;
    chmod(a.sun_path, 0777);
    return fd;
  }
  // what arrived: "" when nothing did
  std::string heard() {
    std::string got;
    const int c = accept(stream, nullptr, nullptr);
    if (c >= 0) got += "a stream connection; ", close(c);
    char buf[64];
    const ssize_t n = recv(dgram, buf, sizeof buf, 0);
    if (n > 0) got += "a datagram '" + std::string(buf, (size_t)n) + "'; ";
    return got;
  }
  ~HostSockets() {
    close(stream), close(dgram);
    unlink((dir + "/s").c_str()), unlink((dir + "/d").c_str()), rmdir(dir.c_str());
  }
};

// runs the attempts; "" when every one was refused, nothing arrived, and the rest worked
std::string host_sockets_reached(const std::string& python, HostSockets& tmp, HostSockets& run) {
  ExecutionOptions o;
  o.python = python;
  const std::string code = replace_all(replace_all(kSocketAttempts, "@TMP@", tmp.dir), "@RUN@", run.dir);
  const ExecutionResult r = execute_code(code, o);
  std::string failed;
  if (!r.success) failed += "the run failed: " + r.error + "; ";
  failed += not_refused(r.stdout_text, kAttempts);
  if (r.stdout_text.find("stream pair: ok\nipv4 socket: AF_INET\n") == std::string::npos)
    failed += "a stream socketpair or an IPv4 socket did not work: " + r.stdout_text + "; ";
  const std::string heard = tmp.heard() + run.heard();
  if (!heard.empty()) failed += "the host's listeners got: " + heard;
  return failed;
}

}  // namespace

TEST(ExecutionJail, HostUnixSocketsAreUnreachable) {
  if (geteuid() != 0) {
    HostSockets tmp("/tmp", "tmp"), run(access("/run", W_OK) == 0 ? "/run" : "/tmp", "run");
    EXPECT_EQ(host_sockets_reached(system_python(), tmp, run), "");
    return;
  }
  HostSockets tmp("/tmp", "tmp"), run("/run", "run");
  ASSERT_GE(tmp.stream, 0);
  ASSERT_GE(run.stream, 0);
  {
    SCOPED_TRACE("as root: the program as a uid of its own");
    EXPECT_EQ(host_sockets_reached(system_python(), tmp, run), "");
  }
  {
    SCOPED_TRACE("as uid 65534: bwrap run by that user");
    EXPECT_EQ(as_nobody([&]() { return host_sockets_reached(system_python(), tmp, run); }), "");
  }
}

TEST(ExecutionJail, NoTcpConnectionNorAioInARun) {
  EXPECT_EQ(kernel_memory_held(system_python()), "");
  if (geteuid() == 0) {
    SCOPED_TRACE("as uid 65534: bwrap run by that user");
    EXPECT_EQ(as_nobody([]() { return kernel_memory_held(system_python()); }), "");
  }
}
