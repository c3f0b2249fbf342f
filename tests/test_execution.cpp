// execution: the sandbox's limits and guards, each checked by running real Python: the happy
// path, exceptions, timeout, memory limit, destructive calls, stdin, writes confined to the
// temp dir, a scrubbed environment, no network, fresh globals, tricky strings, output caps;
// every case of upstream's tests/test_execution.py; and the escapes past the Python guard: a
// setsid'd spawn outliving the program, a fork loop, posix.unlink / ctypes / a reloaded os
// writing outside the temp dir, a program too long for exec; and the jail (bwrap): every escape a
// hostile program tried (secrets, /proc, metadata outside, device nodes, host name, fork
// bombs, memfd, disk, inherited descriptors, undeletable trees, killing the supervisor), as
// root and as an ordinary user, each refused. Fail-closed cases: test_execution_closed.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "nanochat/common/files.h"
#include "nanochat/common/error.h"
#include "nanochat/execution.h"
#include "test_execution.h"

using namespace nanochat;

// the system's interpreter, which the run's own uid can run (the venv's may live under a 0700 /root)
static ExecutionOptions opts() {
  ExecutionOptions o;
  o.python = execution_test::system_python();
  return o;
}
static ExecutionOptions system_python_opts() { return opts(); }

static double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// a string no other process has in its command line
static std::string unique_marker() {
  static int n = 0;
  return "nanochat_marker_" + std::to_string(getpid()) + "_" + std::to_string(n++);
}

// processes whose command line contains `marker`, from /proc
static int processes_with(const std::string& marker) {
  int found = 0;
  DIR* d = opendir("/proc");
  for (dirent* e; d && (e = readdir(d));) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    found += cmdline.find(marker) != std::string::npos;
  }
  if (d) closedir(d);
  return found;
}

// waits up to 2 s for the kernel to finish killing a tree; the count left
static int processes_left(const std::string& marker) {
  int n = 0;
  for (int i = 0; i < 40 && (n = processes_with(marker)) > 0; i++) usleep(50000);
  return n;
}

// a directory of the test's own, outside any sandbox, holding one file; `open_to_all`: the
// directory 0777 and the file 0666, so that only the jail stands between them and the program
struct Victim {
  std::string dir, file;
  explicit Victim(const std::string& parent = "/tmp", bool open_to_all = false) {
    dir = parent + "/nanochat_exec_victim_" + std::to_string(getpid());
    file = dir + "/keep.txt";
    make_dirs(dir);
    std::ofstream(file) << "precious";
    if (open_to_all) chmod(dir.c_str(), 0777), chmod(file.c_str(), 0666);
  }
  ~Victim() { remove_tree(dir); }
  bool intact() const { return read_file_bytes(file) == "precious"; }
};

TEST(Execution, HappyPathAndExceptions) {
  auto r = execute_code("print('hello')\nprint(sum(range(10)))", opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "hello\n45\n");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.exit_code, 0);
  r = execute_code("def f():\n    raise ValueError('boom')\nf()", opts());
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "ValueError: boom");
  EXPECT_NE(r.stderr_text.find("<llm>"), std::string::npos);  // compiled under upstream's file name
  r = execute_code("assert 1 == 2", opts());
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "AssertionError");
  r = execute_code("def broken(:\n", opts());
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("SyntaxError"), std::string::npos) << r.error;
}

TEST(Execution, TimeoutKillsTheProcessGroup) {
  ExecutionOptions o = opts();
  o.timeout_seconds = 0.5;
  auto r = execute_code("import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.01)", o);
  EXPECT_TRUE(r.timeout);
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "Execution timed out (process killed)");
  EXPECT_EQ(r.stdout_text, "started\n");
}

TEST(Execution, MemoryLimit) {
  ExecutionOptions o = opts();
  o.max_memory_bytes = 128LL << 20;
  auto r = execute_code("x = bytearray(512 * 1024 * 1024)\nprint(len(x))", o);
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(r.memory_exceeded) << r.stderr_text;
  EXPECT_EQ(r.error, "MemoryError");
  // below the limit is fine
  r = execute_code("x = bytearray(16 * 1024 * 1024)\nprint(len(x))", o);
  EXPECT_TRUE(r.success) << r.stderr_text;
}

TEST(Execution, DestructiveCallsAreDisabled) {
  std::string dir = "/tmp/nanochat_exec_victim_" + std::to_string(getpid());
  make_dirs(dir);
  for (std::string code :
       {"import os\nos.rmdir('" + dir + "')", "import shutil\nshutil.rmtree('" + dir + "')",
        std::string("import os\nos.system('true')"), std::string("import subprocess\nsubprocess.Popen(['true'])"),
        std::string("import os\nos.kill(1, 9)"), std::string("import os\nos.fork()"),
        std::string("import os\nos.getcwd()"), std::string("exit(3)"), std::string("import resource")}) {
    auto r = execute_code(code, opts());
    EXPECT_FALSE(r.success) << code;
    EXPECT_TRUE(r.error.find("TypeError") != std::string::npos || r.error.find("ImportError") != std::string::npos ||
                r.error.find("ModuleNotFoundError") != std::string::npos)
        << code << " -> " << r.error;
  }
  EXPECT_TRUE(is_directory(dir));
  remove_tree(dir);
}

TEST(Execution, StdinIsEmpty) {
  auto r = execute_code("import sys\nprint(repr(sys.stdin.read()))", opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "''\n");
  r = execute_code("input()", opts());
  EXPECT_FALSE(r.success);
  EXPECT_EQ(r.error, "EOFError: EOF when reading a line");
}

TEST(Execution, WritesStayInAnEmptyTempDirThatIsRemoved) {
  const std::set<std::string> before = execution_test::run_dirs_in_tmp();
  auto r = execute_code(
      "import os\nprint(sorted(os.listdir('.')))\nopen('out.txt', 'w').write('x')\n"
      "print(os.readlink('/proc/self/cwd'))",
      opts());
  ASSERT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "[]\n/tmp\n");                            // the sandbox's own /tmp, empty at the start
  EXPECT_TRUE(execution_test::run_dirs_left_since(before).empty());  // its mount point on the host is gone
  // a file may not grow past the size limit
  ExecutionOptions o = opts();
  o.max_file_bytes = 1 << 20;
  r = execute_code("open('big', 'wb').write(b'x' * (4 << 20))", o);
  EXPECT_FALSE(r.success);
}

TEST(Execution, EnvironmentIsScrubbed) {
  setenv("NANOCHAT_SECRET_TOKEN", "hunter2", 1);
  auto r = execute_code("import os\nprint(sorted(os.environ.items()))", opts());
  unsetenv("NANOCHAT_SECRET_TOKEN");
  ASSERT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("hunter2"), std::string::npos);
  EXPECT_EQ(r.stdout_text.find("HOME"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("('PATH', '/usr/bin:/bin')"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("('OMP_NUM_THREADS', '1')"), std::string::npos) << r.stdout_text;
}

TEST(Execution, NetworkIsRefused) {
  // a listening socket of this process, on loopback: reachable from here, not from the child
  // when it runs in its own network namespace
  auto r = execute_code(
      "import socket\ns = socket.socket()\ns.settimeout(2)\ntry:\n    s.connect(('1.1.1.1', 53))\n    print('connected')\n"
      "except OSError as e:\n    print('refused', type(e).__name__)\n",
      opts());
  ASSERT_TRUE(r.success) << r.stderr_text;
  if (!r.network_isolated)
    GTEST_SKIP() << "no network namespace here (not root, no user namespaces): documented fallback";
  EXPECT_EQ(r.stdout_text.rfind("refused", 0), 0u) << r.stdout_text;
  // only a loopback device (from /proc/net/dev: netlink, which if_nameindex uses, is refused)
  r = execute_code("print([l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])", opts());
  EXPECT_EQ(r.stdout_text, "['lo']\n") << r.stderr_text;
}

TEST(Execution, FreshGlobalsAndTrickyStrings) {
  auto r = execute_code("print(__name__, sorted(k for k in globals() if not k.startswith('__')))", opts());
  EXPECT_EQ(r.stdout_text, "__main__ []\n") << r.stderr_text;
  std::string tricky = "s = '''quotes ' \" \\\\ \\n and {braces} and \\x00 and é 你好'''\nprint(len(s))";
  r = execute_code(tricky, opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "42\n");  // counted by hand: the escapes are one character each
}

TEST(Execution, OutputIsCapped) {
  ExecutionOptions o = opts();
  o.max_output_bytes = 1000;
  auto r = execute_code("print('x' * 100000)", o);
  EXPECT_TRUE(r.success);
  EXPECT_EQ(r.stdout_text.size(), 1000u);
  EXPECT_TRUE(r.output_truncated);
}

TEST(Execution, MissingInterpreterIsAnError) {
  ExecutionOptions o = opts();
  o.python = "/nonexistent/python3";
  EXPECT_THROW(execute_code("print(1)", o), Error);
}

// ---- upstream's tests/test_execution.py, case by case ----------------------------------------

TEST(ExecutionUpstream, HappyPathAndException) {
  auto r = execute_code("print('hello world')", opts());
  EXPECT_TRUE(r.success);
  EXPECT_EQ(r.stdout_text, "hello world\n");
  r = execute_code("1/0", opts());
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("ZeroDivisionError"), std::string::npos) << r.error;
}

TEST(ExecutionUpstream, TimeoutKillsAnInfiniteLoop) {
  ExecutionOptions o = opts();
  o.timeout_seconds = 2.0;
  auto start = std::chrono::steady_clock::now();
  auto r = execute_code("while True: pass", o);
  EXPECT_TRUE(r.timeout);
  EXPECT_FALSE(r.success);
  EXPECT_LT(seconds_since(start), 5.0);
}

TEST(ExecutionUpstream, OneGigabyteAgainstTheDefaultLimit) {
  auto r = execute_code("x = bytearray(1024 * 1024 * 1024)", opts());
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(r.memory_exceeded) << r.stderr_text;
}

TEST(ExecutionUpstream, DestructiveFunctionsDisabled) {
  for (const char* evil :
       {"import os; os.system('echo pwned')", "import shutil; shutil.rmtree('/tmp')",
        "import subprocess; subprocess.Popen(['ls'])", "import os; os.kill(1, 9)", "import os; os.fork()"}) {
    auto r = execute_code(evil, opts());
    EXPECT_FALSE(r.success) << evil;
    EXPECT_EQ(r.stdout_text.find("pwned"), std::string::npos) << evil;
  }
  EXPECT_TRUE(is_directory("/tmp"));
}

TEST(ExecutionUpstream, StdinDisabled) { EXPECT_FALSE(execute_code("input()", opts()).success); }

TEST(ExecutionUpstream, WritesGoToTheTempDir) {
  std::string name = "landmine_" + std::to_string(getpid()) + ".txt";
  auto r = execute_code("open('" + name + "', 'w').write('x'); print(open('" + name + "').read())", opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "x\n");
  EXPECT_FALSE(path_exists(name)) << "file leaked into the test's working directory";
}

TEST(ExecutionUpstream, EnvironmentIsScrubbed) {
  setenv("FAKE_SECRET_KEY", "hunter2", 1);
  auto r = execute_code("import os; print('FAKE_SECRET_KEY' in os.environ)", opts());
  unsetenv("FAKE_SECRET_KEY");
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "False\n");
}

TEST(ExecutionUpstream, TrickyStringContent) {
  // upstream's string: 'it\'s "quoted" \\ {braces} \n' is 26 characters (each escape one)
  auto r = execute_code("s = 'it\\'s \"quoted\" \\\\ {braces} \\n'; print(len(s))", opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "26\n");
}

TEST(ExecutionUpstream, FreshGlobals) {
  auto r = execute_code("print('GUARD' in dir(), '_nanochat_code' in dir())", opts());
  EXPECT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "False False\n");
}

// ---- escapes past the Python guard ----------------------------------------------------------

// os.posix_spawn(..., setsid=True) leaves the program's process group and session; the deadline
// and the program's exit must still take it down (bwrap's PID namespace)
TEST(ExecutionEscape, SetsidSpawnDiesWithTheProgram) {
  {
    ExecutionOptions o = opts();
    o.timeout_seconds = 2.0;
    std::string marker = unique_marker();
    std::string spawn = "import os\nos.posix_spawn('/bin/sh', ['sh', '-c', 'sleep 60; : " + marker +
                        "'], {}, setsid=True)\nprint('spawned', flush=True)\n";
    // the program exits at once: the spawned shell is killed with it, not waited for
    auto start = std::chrono::steady_clock::now();
    auto r = execute_code(spawn, o);
    EXPECT_LT(seconds_since(start), o.timeout_seconds + 1.0);
    EXPECT_TRUE(r.success) << r.stderr_text;
    EXPECT_EQ(r.stdout_text, "spawned\n");
    EXPECT_EQ(processes_left(marker), 0);
    EXPECT_TRUE(r.isolation & kExecPidNamespace) << r.isolation;
    // the program runs on: the deadline kills both
    marker = unique_marker();
    spawn = "import os, time\nos.posix_spawn('/bin/sh', ['sh', '-c', 'sleep 60; : " + marker +
            "'], {}, setsid=True)\nwhile True: time.sleep(0.01)\n";
    start = std::chrono::steady_clock::now();
    r = execute_code(spawn, o);
    EXPECT_TRUE(r.timeout);
    EXPECT_LT(seconds_since(start), o.timeout_seconds + 1.0);
    EXPECT_EQ(processes_left(marker), 0);
  }
}

// posix.fork (the guard only disables os.fork) in a loop: RLIMIT_NPROC stops it once the
// program's uid runs max_processes processes; everything forked dies with the program
TEST(ExecutionEscape, ForkLoopIsBounded) {
  ExecutionOptions o = system_python_opts();
  o.max_processes = 16;
  o.timeout_seconds = 5.0;
  std::string marker = unique_marker();
  auto r = execute_code(
      "import posix, time\nn = 0\ntry:\n    while n < 1000:\n        if posix.fork() == 0:\n"
      "            time.sleep(60)  # " +
          marker +
          "\n            posix._exit(0)\n        n += 1\n"
          "except OSError as e:\n    print(n, type(e).__name__, flush=True)\n",
      o);
  EXPECT_EQ(processes_left(marker), 0);
  EXPECT_TRUE(r.isolation & kExecProcessLimit) << execution_isolation_describe(r.isolation);
  EXPECT_TRUE(r.success) << r.stderr_text;
  int forked = std::atoi(r.stdout_text.c_str());
  EXPECT_GE(forked, 1) << r.stdout_text;
  EXPECT_LT(forked, 16) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("BlockingIOError"), std::string::npos) << r.stdout_text;  // EAGAIN
}

// the ways past the guard to a file outside the temp dir: posix.unlink, a reloaded os, ctypes,
// plain open() for writing, rename. Each is refused (read-only binds, or not even visible) and
// the file survives. The file is open to every uid, in the test's working directory.
TEST(ExecutionEscape, FilesOutsideTheTempDirCannotBeChanged) {
  char cwd[4096];
  ASSERT_TRUE(getcwd(cwd, sizeof cwd));
  {
    ExecutionOptions o = opts();
    Victim v(cwd, true);
    const std::string f = "'" + v.file + "'";
    const std::string d = "'" + v.dir + "'";
    std::vector<std::string> escapes = {
        "import posix\nposix.unlink(" + f + ")",
        "import importlib, os\nimportlib.reload(os)\nassert os.unlink is not None\nos.unlink(" + f + ")",
        "import importlib, os\nimportlib.reload(os)\nassert os.system('echo gone > " + v.file +
            "') != 0\n"
            "raise PermissionError('refused')",
        "import ctypes, ctypes.util\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.unlink(" +
            f + ".encode()) != 0: raise PermissionError(ctypes.get_errno(), 'unlink')",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.rename(" +
            f + ".encode(), b'" + v.dir + "/moved') != 0: raise PermissionError(ctypes.get_errno(), 'rename')",
        "open(" + f + ", 'w').write('overwritten')",
        "open(" + d + " + '/new.txt', 'w').write('x')",
        "import posix\nposix.rename(" + f + ", " + d + " + '/moved')",
        "import posix\nposix.truncate(" + f + ", 0)",
    };
    uint32_t isolation = 0;
    for (const std::string& code : escapes) {
      auto r = execute_code(code, o);
      isolation = r.isolation;
      EXPECT_FALSE(r.success) << code;
      // the victim is not even visible: only the interpreter's files are
      const bool hidden = r.error.find("FileNotFoundError") != std::string::npos;
      EXPECT_TRUE(r.error.find("PermissionError") != std::string::npos ||
                  r.error.find("OSError") != std::string::npos || hidden)
          << code << " -> " << r.error;
      EXPECT_TRUE(v.intact()) << code;
      EXPECT_FALSE(path_exists(v.dir + "/new.txt")) << code;
      EXPECT_FALSE(path_exists(v.dir + "/moved")) << code;
    }
    EXPECT_TRUE(isolation & kExecReadOnlyMounts) << execution_isolation_describe(isolation);
    // inside the temp dir everything still works, the Python guard aside
    auto r = execute_code(
        "import posix\nopen('a', 'w').write('x')\nposix.rename('a', 'b')\nposix.mkdir('d')\n"
        "posix.unlink('b')\nposix.rmdir('d')\n"
        "print(sorted(posix.listdir('.')))",
        o);
    EXPECT_TRUE(r.success) << r.stderr_text;
    EXPECT_EQ(r.stdout_text, "[]\n");
  }
}

// as root, the program runs as a uid and gid of its own (the same number, from the reserved
// range), no supplementary group, and each run gets another
TEST(ExecutionEscape, RootRunsAsAUidOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "not running as root";
  const std::string code = "import posix\nprint(posix.getuid(), posix.getgid(), posix.getgroups())";
  auto r = execute_code(code, opts());
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_TRUE(r.isolation & kExecUidDropped);
  unsigned long uid = 0, gid = 0;
  ASSERT_EQ(std::sscanf(r.stdout_text.c_str(), "%lu %lu", &uid, &gid), 2) << r.stdout_text;
  EXPECT_GE(uid, 1700000000ul);
  EXPECT_EQ(gid, uid);
  EXPECT_NE(r.stdout_text.find(" []"), std::string::npos) << r.stdout_text;
  auto r2 = execute_code(code, opts());
  EXPECT_NE(r2.stdout_text, r.stdout_text);  // 1 in 16 million to collide
}

// one program's failure to start is that sample's failure, never an exception for the caller
TEST(ExecutionEscape, ProgramTooLongForExecFailsOnlyThatSample) {
  std::string code;
  while (code.size() < 200000) code += "x = 1\n";  // a single argument is capped at 128 KiB
  ExecutionResult r;
  EXPECT_NO_THROW(r = execute_code(code, opts()));
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.error.find("E2BIG"), std::string::npos) << r.error;
  // and the next sample runs as usual
  EXPECT_TRUE(execute_code("print(1)", opts()).success);
}

// ---- the jail ------------------------------------------------------------------------------------

// Each attempt prints "<name>: refused (...)" or "<name>: ESCAPED <what it got>". @HOSTPID@ is
// the caller's pid (outside the sandbox), @VICTIM@ a file of the caller's outside the temp dir.
static const char* kEscapes = R"PY(import ctypes, os, posix, signal, stat, time
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, fn):
    try:
        print(f"{name}: ESCAPED {fn()!r}"[:160], flush=True)
    except BaseException as e:
        print(f"{name}: refused ({type(e).__name__}: {e})"[:160], flush=True)
def check(rc):
    if rc != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return rc
def other_processes():
    pids = [p for p in posix.listdir("/proc") if p.isdigit()]
    if len(pids) > 2:
        return pids
    raise PermissionError(f"only the sandbox's own: {pids}")
def open_descriptors():
    found = []
    for fd in range(3, 70000):
        try:
            posix.fstat(fd)
            found.append(fd)
        except OSError:
            pass
    if found:
        return found
    raise OSError("none above 2")
def deep_tree():
    posix.mkdir("deep")
    fd = posix.open("deep", posix.O_RDONLY)
    for i in range(30):
        posix.mkdir("d" * 200, dir_fd=fd)
        nfd = posix.open("d" * 200, posix.O_RDONLY, dir_fd=fd)
        posix.close(fd)
        fd = nfd
    posix.close(posix.open("leaf", posix.O_CREAT | posix.O_WRONLY, dir_fd=fd))
    print("workdir:", posix.getcwd(), flush=True)
    raise PermissionError("made 6000 bytes deep; the clean-up is checked outside")
def fill_disk():
    total, chunk = 0, b"x" * (1 << 20)
    try:
        for i in range(24):
            with open(f"f{i}", "wb") as f:
                for _ in range(8):
                    f.write(chunk)
                    total += len(chunk)
    except OSError as e:
        pass
    for i in range(24):
        try:
            posix.unlink(f"f{i}")
        except OSError:
            pass
    if total > (100 << 20):
        return f"{total >> 20} MB"
    raise OSError(f"stopped at {total >> 20} MB")
def fork_bomb():
    n = 0
    try:
        for i in range(100):
            if posix.fork() == 0:
                time.sleep(60)
                posix._exit(0)
            n += 1
    except OSError:
        pass
    if n >= 64:
        return f"{n} processes"
    raise OSError(f"fork failed after {n}")
attempt("read /etc/shadow", lambda: open("/etc/shadow").read(12))
attempt("server environ", lambda: open("/proc/@HOSTPID@/environ", "rb").read(40))
attempt("server cmdline", lambda: open("/proc/@HOSTPID@/cmdline", "rb").read(40))
attempt("see other processes", other_processes)
attempt("signal the server", lambda: posix.kill(@HOSTPID@, 0))
attempt("chmod outside", lambda: posix.chmod("@VICTIM@", 0o777))
attempt("chown outside", lambda: posix.chown("@VICTIM@", 65534, 65534))
attempt("touch outside", lambda: posix.utime("@VICTIM@", (0, 0)))
attempt("create outside", lambda: open("@VICTIM@.new", "w").write("x"))
attempt("sethostname", lambda: check(libc.sethostname(b"pwned", 5)))
attempt("mknod", lambda: posix.mknod("null2", 0o666 | stat.S_IFCHR, posix.makedev(1, 3)))
attempt("mount", lambda: check(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
attempt("ptrace", lambda: check(libc.ptrace(16, posix.getppid(), 0, 0)))
attempt("unshare", lambda: check(libc.unshare(0x10000000)))
attempt("memfd_create", lambda: posix.memfd_create("big"))
attempt("inherited descriptors", open_descriptors)
attempt("deep tree", deep_tree)
attempt("fill the disk", fill_disk)
attempt("fork bomb", fork_bomb)
def kill_supervisor():
    posix.kill(posix.getppid(), signal.SIGTERM)
    posix.kill(posix.getppid(), signal.SIGKILL)
    time.sleep(0.3)
    raise PermissionError("still supervised")
attempt("kill the supervisor", kill_supervisor)
)PY";

static const char* const kEscapeNames[] = {"read /etc/shadow",
                                           "server environ",
                                           "server cmdline",
                                           "see other processes",
                                           "signal the server",
                                           "chmod outside",
                                           "chown outside",
                                           "touch outside",
                                           "create outside",
                                           "sethostname",
                                           "mknod",
                                           "mount",
                                           "ptrace",
                                           "unshare",
                                           "memfd_create",
                                           "inherited descriptors",
                                           "deep tree",
                                           "fill the disk",
                                           "fork bomb",
                                           "kill the supervisor"};

static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// the escapes run with a descriptor of ours open at 5000 (no CLOEXEC); what failed, "" if none
static std::string escapes_that_worked(const ExecutionOptions& o, const std::string& victim) {
  const int fd = open(victim.c_str(), O_RDONLY);
  dup2(fd, 5000);
  close(fd);
  const std::string code = replace_all(replace_all(kEscapes, "@HOSTPID@", std::to_string(getpid())), "@VICTIM@",
                                       victim);
  const std::set<std::string> run_dirs = execution_test::run_dirs_in_tmp();
  const ExecutionResult r = execute_code(code, o);
  close(5000);
  std::string failed;
  if (!r.success) failed += "the run failed (" + r.error + "); ";
  const uint32_t jail = kExecUserNamespace | kExecPidNamespace | kExecNetworkNamespace | kExecReadOnlyMounts |
                        kExecTmpfs | kExecFreshProc | kExecCapsDropped | kExecSeccomp | kExecProcessLimit |
                        kExecOwnSession | kExecPrivateDev | kExecHostDirsHidden;
  if ((r.isolation & jail) != jail)
    failed += "layers not in force: " + execution_isolation_describe(jail & ~r.isolation) + "; ";
  for (const char* name : kEscapeNames) {
    const std::string want = std::string(name) + ": refused";
    const size_t at = r.stdout_text.find(std::string(name) + ": ");
    if (at == std::string::npos) failed += std::string(name) + ": no answer; ";
    else if (r.stdout_text.compare(at, want.size(), want) != 0)
      failed += r.stdout_text.substr(at, r.stdout_text.find('\n', at) - at) + "; ";
  }
  // the tree deeper than PATH_MAX went with the run's tmpfs (its mount point on the host too)
  if (r.stdout_text.find("workdir: /tmp\n") == std::string::npos)
    failed += "the program's working directory is not /tmp; ";
  if (!execution_test::run_dirs_left_since(run_dirs).empty()) failed += "a run's directory is left in /tmp; ";
  return failed;
}

TEST(ExecutionJail, EscapesFailAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "not root (EscapesFailAsAnOrdinaryUser runs as this user)";
  Victim v;  // root's file
  EXPECT_EQ(escapes_that_worked(opts(), v.file), "");
  const ExecutionResult r = execute_code("import posix\nprint(posix.getuid())", opts());
  EXPECT_GE(std::atol(r.stdout_text.c_str()), 1700000000l) << r.stderr_text;
}

TEST(ExecutionJail, EscapesFailAsAnOrdinaryUser) {
  if (geteuid() != 0) {
    Victim v;
    EXPECT_EQ(escapes_that_worked(system_python_opts(), v.file), "");
    return;
  }
  // as root: a child turned into uid 65534 with a file of its own (as_nobody)
  const std::string dir = "/tmp/nanochat_exec_victim_user_" + std::to_string(getpid());
  make_dirs(dir);
  std::ofstream(dir + "/keep.txt") << "precious";
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  ASSERT_EQ(chown((dir + "/keep.txt").c_str(), 65534, 65534), 0);
  const std::string failed = execution_test::as_nobody(
      [&] { return escapes_that_worked(system_python_opts(), dir + "/keep.txt"); });
  EXPECT_EQ(failed, "");
  EXPECT_EQ(read_file_bytes(dir + "/keep.txt"), "precious");
  remove_tree(dir);
}
