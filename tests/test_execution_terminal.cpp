// execution, the caller's terminal: the sandbox driver (execute_code as chat-eval runs it) is
// started from a real pseudo-terminal that is its controlling terminal, stdin and stderr, as a
// person's shell would start it. The program tries every way back to that terminal: typing a
// command into it (TIOCSTI, also with the request's upper half set), taking its foreground
// process group (tcsetpgrp with SIGTTOU ignored) and reading what the person types, through
// /dev/tty, every /dev/pts/N, its inherited descriptors and its supervisor's
// (/proc/<pid>/fd). The test then checks from the terminal's side: nothing was typed into the
// input, the foreground group is the shell's, and what the person typed is still there, unread.
// As root (the program as a uid of its own) and as an ordinary user owning the terminal (bwrap
// run by that user: the program as that uid, in a user namespace).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "nanochat/execution.h"
#include "test_execution.h"

using namespace execution_test;

namespace {

const char* const kTerminalAttack = R"PY(import ctypes, fcntl, posix, select, signal, termios
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGTTOU, signal.SIG_IGN)
signal.signal(signal.SIGTTIN, signal.SIG_IGN)
def attempt(name, fn):
    try:
        print(f"{name}: ESCAPED {fn()!r}"[:200], flush=True)
    except BaseException as e:
        print(f"{name}: refused ({type(e).__name__}: {e})"[:200], flush=True)
tried = []
def terminals():
    fds = []
    paths = ["/dev/tty", "/proc/1/fd/0", "/proc/1/fd/2", f"/proc/{posix.getppid()}/fd/0"]
    try:
        paths += ["/dev/pts/" + n for n in posix.listdir("/dev/pts") if n.isdigit()]
    except OSError as e:
        tried.append(f"/dev/pts: {e.strerror}")
    for path in paths:
        for mode in (posix.O_RDWR, posix.O_RDONLY):  # a read-only mount refuses a write open
            try:
                fd = posix.open(path, mode | posix.O_NOCTTY)
                if posix.isatty(fd):
                    fds.append((path, fd))
                else:  # (the sandbox's own /dev/null as bwrap's stdin)
                    tried.append(f"{path}: not a terminal")
                    posix.close(fd)
                break
            except OSError as e:
                tried.append(f"{path}: {e.strerror}")
    for fd in (0, 1, 2):
        if posix.isatty(fd):
            fds.append((f"fd {fd}", fd))
    if not fds:
        raise PermissionError("no terminal: " + "; ".join(tried))
    return fds
def inject():
    done = []
    for name, fd in terminals():
        try:
            for c in b"touch @MARK@\n":
                fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
            done.append(name)
        except OSError as e:
            tried.append(f"TIOCSTI {name}: {e.strerror}")
        c = ctypes.c_char(b"#")
        if libc.syscall(16, fd, ctypes.c_ulong(0x100000000 | termios.TIOCSTI), ctypes.byref(c)) == 0:
            done.append(name + " (upper half)")
    if done:
        return done
    raise PermissionError("; ".join(tried))
def take_foreground():
    done = []
    for name, fd in terminals():
        try:
            posix.tcsetpgrp(fd, posix.getpgrp())
            done.append(name)
        except OSError as e:
            tried.append(f"tcsetpgrp {name}: {e.strerror}")
        try:
            fcntl.ioctl(fd, termios.TIOCSCTTY, 1)
            done.append(name + " TIOCSCTTY")
        except OSError as e:
            tried.append(f"TIOCSCTTY {name}: {e.strerror}")
    if done:
        return done
    raise PermissionError("; ".join(tried))
def read_terminal():
    for name, fd in terminals():
        try:
            posix.tcsetpgrp(fd, posix.getpgrp())
        except OSError:
            pass
        try:
            if select.select([fd], [], [], 2)[0]:
                return (name, posix.read(fd, 100))
        except OSError as e:
            tried.append(f"read {name}: {e.strerror}")
    raise PermissionError("; ".join(tried) or "nothing to read")
attempt("inject", inject)
attempt("take the foreground", take_foreground)
attempt("read the terminal", read_terminal)
)PY";

struct TerminalRun {
  std::string program_out;  // the program's report (the driver's stdout)
  std::string terminal;     // what the terminal showed (the driver's stderr)
  std::string input_left;   // what the shell found to read on the terminal afterwards
  bool foreground_kept = false;
  int driver_status = -1;
  std::string failure;  // the harness itself went wrong
};

// The driver started from a new pseudo-terminal's session leader (the "shell"), which waits for
// it and then looks at its terminal. The person types `secret` before the program starts.
TerminalRun run_from_terminal(const std::string& python, bool as_nobody, const std::string& code,
                              const std::string& secret) {
  TerminalRun run;
  int out[2], report[2], go[2];
  if (pipe(out) || pipe(report) || pipe(go)) return run.failure = "pipe", run;
  int master = -1;
  char tty_name[256] = {0};
  const pid_t shell = forkpty(&master, tty_name, nullptr, nullptr);
  if (shell < 0) return run.failure = std::string("forkpty: ") + strerror(errno), run;
  if (shell == 0) {
    close(out[0]), close(report[0]), close(go[1]);
    // input as typed, unechoed, readable byte by byte: what is queued is what was typed
    termios t{};
    tcgetattr(0, &t);
    t.c_lflag &= ~(ICANON | ECHO);
    tcsetattr(0, TCSANOW, &t);
    std::string fail;
    if (as_nobody && (fchown(0, 65534, 65534) != 0 || setgroups(0, nullptr) != 0 ||
                      setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0))
      fail = "cannot become uid 65534";
    (void)!write(1, "\x01", 1);  // ready for the person to type
    char c;
    (void)!read(go[0], &c, 1);
    const pid_t driver = fail.empty() ? fork() : -1;
    if (driver == 0) {
      dup2(out[1], 1);
      close(out[1]);
      execl(NANOCHAT_SANDBOX_DRIVER, "sandbox_driver", python.c_str(), code.c_str(), (char*)nullptr);
      _exit(126);
    }
    close(out[1]);
    int status = -1;
    if (driver > 0) waitpid(driver, &status, 0);
    const bool fg = tcgetpgrp(0) == getpgrp();
    std::string left;
    fcntl(0, F_SETFL, O_NONBLOCK);
    usleep(100 * 1000);
    char buf[256];
    for (ssize_t n; (n = read(0, buf, sizeof buf)) > 0;) left.append(buf, (size_t)n);
    const std::string msg = fail + "\n" + std::to_string(status) + "\n" + (fg ? "1" : "0") + "\n" + left;
    (void)!write(report[1], msg.data(), msg.size());
    _exit(0);
  }
  close(out[1]), close(report[1]), close(go[0]);
  // wait for the shell to be ready, type the secret, let the driver start
  const auto start = std::chrono::steady_clock::now();
  std::string shown;
  auto read_master = [&]() {
    char buf[4096];
    const ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) shown.append(buf, (size_t)n);
    return n;
  };
  while (shown.find('\x01') == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) > 0 && read_master() <= 0) break;
  }
  (void)!write(master, secret.data(), secret.size());
  (void)!write(go[1], "g", 1);
  close(go[1]);
  std::string answer;
  bool out_open = true, report_open = true, master_open = true;
  while ((out_open || report_open) && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    pollfd p[3] = {{out[0], (short)(out_open ? POLLIN : 0), 0},
                   {report[0], (short)(report_open ? POLLIN : 0), 0},
                   {master, (short)(master_open ? POLLIN : 0), 0}};
    if (poll(p, 3, 200) <= 0) continue;
    char buf[4096];
    if (p[0].revents) {
      const ssize_t n = read(out[0], buf, sizeof buf);
      if (n > 0) run.program_out.append(buf, (size_t)n);
      else out_open = false;
    }
    if (p[1].revents) {
      const ssize_t n = read(report[0], buf, sizeof buf);
      if (n > 0) answer.append(buf, (size_t)n);
      else report_open = false;
    }
    if (p[2].revents && read_master() <= 0) master_open = false;  // EIO once the shell is gone
  }
  close(out[0]), close(report[0]), close(master);
  int status = 0;
  if (waitpid(shell, &status, WNOHANG) == 0) kill(shell, SIGKILL), waitpid(shell, &status, 0);
  run.terminal = shown;
  // fail \n status \n fg \n left
  size_t a = answer.find('\n'), b = answer.find('\n', a + 1), c = answer.find('\n', b + 1);
  if (a == std::string::npos || b == std::string::npos || c == std::string::npos)
    return run.failure = "no answer from the shell: " + answer, run;
  run.failure = answer.substr(0, a);
  run.driver_status = std::atoi(answer.c_str() + a + 1);
  run.foreground_kept = answer.compare(b + 1, 1, "1") == 0;
  run.input_left = answer.substr(c + 1);
  return run;
}

void expect_no_way_back(const std::string& python, bool as_nobody) {
  const std::string mark = "nanochat_typed_" + std::to_string(getpid()) + (as_nobody ? "_nobody" : "_root");
  const std::string secret = "hunter2-" + mark + "\n";
  const std::string code = replace_all(kTerminalAttack, "@MARK@", mark);
  const TerminalRun run = run_from_terminal(python, as_nobody, code, secret);
  if (run.failure.rfind("forkpty", 0) == 0) GTEST_SKIP() << "no pseudo-terminal here: " << run.failure;
  ASSERT_EQ(run.failure, "");
  EXPECT_EQ(run.driver_status, 0) << "terminal: " << run.terminal;
  EXPECT_EQ(not_refused(run.program_out, {"inject", "take the foreground", "read the terminal"}), "")
      << run.program_out << "\nterminal: " << run.terminal;
  // from the terminal's side, whatever the program says
  EXPECT_EQ(run.input_left.find("touch"), std::string::npos) << "typed into the terminal: " << run.input_left;
  EXPECT_EQ(run.input_left, secret) << "the person's input was read or added to";
  EXPECT_TRUE(run.foreground_kept) << "the program took the terminal's foreground";
  EXPECT_EQ(run.program_out.find("hunter2"), std::string::npos) << run.program_out;
  EXPECT_NE(run.terminal.find("own session"), std::string::npos) << run.terminal;  // the isolation line
}

}  // namespace

TEST(ExecutionTerminal, NoWayBackToTheCallersTerminalAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "not root (the ordinary-user case runs as this user)";
  expect_no_way_back(system_python(), false);
}

TEST(ExecutionTerminal, NoWayBackToTheCallersTerminalAsAnOrdinaryUser) {
  // the user owns the terminal: in a user namespace the program is that uid, and could open it
  // by name if the jail showed the host's /dev
  expect_no_way_back(system_python(), geteuid() == 0);
}
