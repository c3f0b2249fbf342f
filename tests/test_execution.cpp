// execution: the sandbox's limits and guards, each checked by running real Python: the happy
// path, exceptions, timeout, memory limit, destructive calls, stdin, writes confined to the
// temp dir, a scrubbed environment, no network, fresh globals, tricky strings, output caps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "nanochat/common/files.h"
#include "nanochat/common/error.h"
#include "nanochat/execution.h"

using namespace nanochat;

static ExecutionOptions opts() {
  ExecutionOptions o;
  o.python = NANOCHAT_PYTHON;
  return o;
}

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
  for (std::string code : {"import os\nos.rmdir('" + dir + "')", "import shutil\nshutil.rmtree('" + dir + "')",
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
  auto r = execute_code(
      "import os\nprint(sorted(os.listdir('.')))\nopen('out.txt', 'w').write('x')\nprint(os.readlink('/proc/self/cwd') + '/out.txt')",
      opts());
  ASSERT_TRUE(r.success) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.substr(0, r.stdout_text.find('\n')), "[]");
  std::string path = r.stdout_text.substr(r.stdout_text.find('\n') + 1);
  path.pop_back();
  EXPECT_EQ(path.rfind("/tmp/nanochat_exec_", 0), 0u) << path;
  EXPECT_FALSE(path_exists(path));
  EXPECT_FALSE(path_exists(parent_dir(path)));  // the whole temp dir is gone
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
  if (!r.network_isolated) GTEST_SKIP() << "no network namespace here (not root, no user namespaces): documented fallback";
  EXPECT_EQ(r.stdout_text.rfind("refused", 0), 0u) << r.stdout_text;
  r = execute_code("import socket\nprint(socket.if_nameindex())", opts());
  EXPECT_EQ(r.stdout_text, "[(1, 'lo')]\n");  // only a loopback device, and it is down
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
