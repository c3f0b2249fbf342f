// `nanochat launch`: a small torchrun. One process per local rank, each in its own process
// group so that a signal reaches everything a rank started. The parent multiplexes the
// ranks' stdout/stderr with poll(), prefixing lines with the rank, and turns signals into
// bytes on a self-pipe so that all decisions happen in one loop:
//   - SIGINT/SIGTERM to the launcher: forwarded to every rank, SIGKILL after grace_seconds
//     (a save of a large model takes minutes); a second one: SIGKILL at once;
//   - SIGHUP: forwarded as SIGTERM (the ranks' graceful stop), with the same grace;
//   - a rank exits non-zero: SIGTERM to the others, SIGKILL after kill_grace_seconds;
//   - everyone reaped: return the first failure's code (128 + signal for a signal).
// Each rank is started with PR_SET_PDEATHSIG = SIGKILL, so that it dies with the launcher
// whatever kills the launcher; a rank that cannot be started stops those already running.
#include "nanochat/dist/launch.h"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nanochat/common/error.h"
#include "nanochat/common/progress.h"

extern char** environ;

namespace nanochat {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

const int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

struct Stream {
  int fd = -1;
  FILE* out = nullptr;
  std::string pending;  // a line not yet terminated
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];  // stdout, stderr
};

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 29500;
  if (s >= 0 && bind(s, (sockaddr*)&addr, sizeof addr) == 0 && getsockname(s, (sockaddr*)&addr, &len) == 0)
    port = ntohs(addr.sin_port);
  if (s >= 0) close(s);
  return port;
}

void emit_lines(Rank& r, Stream& st, const char* data, size_t n, bool eof) {
  st.pending.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = st.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    std::fprintf(st.out, "[rank %d] %.*s\n", r.rank, (int)(nl - start), st.pending.data() + start);
  st.pending.erase(0, start);
  if (eof && !st.pending.empty()) {
    std::fprintf(st.out, "[rank %d] %s\n", r.rank, st.pending.c_str());
    st.pending.clear();
  }
  std::fflush(st.out);
}

// the environment of one rank: the launcher's, plus torchrun's variables
std::vector<std::string> rank_environment(const LaunchOptions& o, int local_rank, int world, int port) {
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"NANOCHAT_LAUNCHED", "1"},  // the launcher prefixes lines with the rank
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; e++) {
    bool replaced = false;
    for (auto& [name, value] : vars)
      replaced |= std::strncmp(*e, name, std::strlen(name)) == 0 && (*e)[std::strlen(name)] == '=';
    if (!replaced) env.push_back(*e);
  }
  for (auto& [name, value] : vars) env.push_back(std::string(name) + "=" + value);
  return env;
}

// fork + exec of one rank; everything is built before the fork, so that the child (of a
// process that may have threads) only makes async-signal-safe calls. -1 and errno on failure.
pid_t spawn_rank(const LaunchOptions& o, const std::vector<std::string>& env_strings, int out_fd, int err_fd) {
  std::vector<char*> argv, envp;
  for (auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t launcher = getpid();
  // no signal handler of the launcher may run in the child before exec
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  const pid_t pid = fork();
  if (pid != 0) {
    const int saved = errno;
    sigprocmask(SIG_SETMASK, &old, nullptr);
    errno = saved;
    return pid;
  }
  // child
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : kForwarded) sigaction(sig, &dfl, nullptr);
  sigaction(SIGCHLD, &dfl, nullptr);
  sigaction(SIGPIPE, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  setpgid(0, 0);
  // dies with the launcher; if the launcher is already gone, do not start at all
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != launcher) _exit(127);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  execvpe(argv[0], argv.data(), envp.data());
  const char* what = std::strerror(errno);
  for (const char* s : {"error: cannot run ", (const char*)argv[0], ": ", what, "\n"})
    (void)!write(2, s, std::strlen(s));
  _exit(127);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP"; }

// one poll over the signal pipe and every open rank stream (100 ms at most), then each ready
// stream's bytes out as prefixed lines; a stream at its end is closed
void pump_streams(std::vector<Rank>& ranks) {
  std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
  std::vector<std::pair<Rank*, Stream*>> owners{{nullptr, nullptr}};
  for (auto& r : ranks)
    for (auto& st : r.streams)
      if (st.fd >= 0) {
        fds.push_back({st.fd, POLLIN, 0});
        owners.push_back({&r, &st});
      }
  int rc = poll(fds.data(), fds.size(), 100);
  if (rc < 0 && errno != EINTR) fail("launch: poll: %s", std::strerror(errno));
  for (size_t i = 1; i < fds.size(); i++) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    ssize_t n = read(fds[i].fd, buf, sizeof buf);
    auto [r, st] = owners[i];
    if (n > 0) {
      emit_lines(*r, *st, buf, (size_t)n, false);
    } else if (n == 0 || errno != EINTR) {
      emit_lines(*r, *st, buf, 0, true);
      close(st->fd);
      st->fd = -1;
    }
  }
}

}  // namespace

int launch_run(const LaunchOptions& o) {
  if (o.nproc_per_node < 1) fail("--nproc-per-node must be at least 1");
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes)
    fail("--node-rank=%d must be in [0, --nnodes=%d)", o.node_rank, o.nnodes);
  if (o.argv.empty()) fail("launch: no command given after --");
  // one node: any free port; several nodes must agree on one, so it must be given
  int port = o.master_port > 0 ? o.master_port : (o.nnodes == 1 ? free_port() : 29500);
  int world = o.nnodes * o.nproc_per_node;

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) fail("launch: pipe: %s", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  struct sigaction old_forwarded[3], old_chld;
  for (int i = 0; i < 3; i++) sigaction(kForwarded[i], &sa, &old_forwarded[i]);
  sigaction(SIGCHLD, &sa, &old_chld);
  auto restore_signals = [&]() {
    for (int i = 0; i < 3; i++) sigaction(kForwarded[i], &old_forwarded[i], nullptr);
    sigaction(SIGCHLD, &old_chld, nullptr);
    close(g_signal_pipe[0]);
    close(g_signal_pipe[1]);
  };

  std::vector<Rank> ranks(o.nproc_per_node);
  auto signal_all = [&](int sig) {
    for (auto& r : ranks)
      if (r.pid > 0) kill(-r.pid, sig);  // the whole process group of each rank
  };
  for (int i = 0; i < o.nproc_per_node; i++) {
    Rank& r = ranks[i];
    r.rank = o.node_rank * o.nproc_per_node + i;
    int fds[2][2] = {{-1, -1}, {-1, -1}};
    bool piped = pipe2(fds[0], O_CLOEXEC) == 0 && pipe2(fds[1], O_CLOEXEC) == 0;
    if (piped) r.pid = spawn_rank(o, rank_environment(o, i, world, port), fds[0][1], fds[1][1]);
    if (!piped || r.pid < 0) {
      // the ranks already started would wait for this one at the rendezvous forever
      const std::string why = std::strerror(errno);
      for (auto& fd : fds)
        for (int end : fd)
          if (end >= 0) close(end);
      signal_all(SIGKILL);
      for (auto& started : ranks)
        if (started.pid > 0) waitpid(started.pid, nullptr, 0);
      for (auto& started : ranks)
        for (auto& st : started.streams)
          if (st.fd >= 0) close(st.fd);
      restore_signals();
      fail("launch: cannot start rank %d (%s): %s; stopped the %d rank(s) already started", r.rank,
           piped ? "fork" : "pipe", why.c_str(), i);
    }
    setpgid(r.pid, r.pid);  // also here, so that no signal can race the child's own setpgid
    r.running = true;
    for (int k = 0; k < 2; k++) {
      close(fds[k][1]);
      r.streams[k].fd = fds[k][0];
      r.streams[k].out = k == 0 ? stdout : stderr;
    }
  }

  int result = 0;         // first failure decides the exit code
  int stop_signal = 0;    // the first forwarded signal
  bool stopping = false;  // SIGTERM sent; SIGKILL at `kill_at`
  bool any_rank_failed = false;
  Timer clock;
  double kill_at = 0, reaped_at = -1;

  for (;;) {
    int running = 0, open_streams = 0;
    for (auto& r : ranks) {
      running += r.running;
      for (auto& st : r.streams) open_streams += st.fd >= 0;
    }
    if (running == 0) {
      // all ranks gone; leftover writers (orphaned grandchildren) get a short grace
      if (reaped_at < 0) reaped_at = clock.seconds();
      if (open_streams == 0 || clock.seconds() - reaped_at > 1.0) break;
    }

    pump_streams(ranks);  // waits up to 100 ms for output or a signal

    unsigned char sig;
    while (read(g_signal_pipe[0], &sig, 1) == 1) {
      if (sig == SIGCHLD) continue;
      if (stop_signal == 0) {
        stop_signal = sig;
        const int forward = sig == SIGHUP ? SIGTERM : sig;
        std::fprintf(stderr,
                     "launch: got %s, forwarding %s to all ranks; they have %.0f s to finish "
                     "(send SIGINT/SIGTERM again to kill them now)\n",
                     signal_name(sig), signal_name(forward), o.grace_seconds);
        signal_all(forward);
        kill_at = clock.seconds() + o.grace_seconds;  // a long save outlasts a rank-failure grace
        stopping = true;
        if (result == 0) result = 128 + sig;
      } else if (sig != SIGHUP) {
        std::fprintf(stderr, "launch: got %s again, killing all ranks\n", signal_name(sig));
        signal_all(SIGKILL);
        kill_at = 0;
      }
    }
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (auto& r : ranks) {
        if (r.pid != pid) continue;
        r.running = false;
        int code = exit_code_of(status);
        if (code == 0) continue;
        any_rank_failed = true;
        if (result == 0) {
          result = code;
          std::fprintf(stderr, "launch: rank %d exited with code %d; stopping the other ranks\n", r.rank, code);
        }
        if (!stopping) {
          stopping = true;
          kill_at = clock.seconds() + o.kill_grace_seconds;
          signal_all(SIGTERM);
        }
      }
    }
    if (stopping && kill_at > 0 && clock.seconds() > kill_at) {
      std::fprintf(stderr, "launch: grace period over, killing the ranks still running\n");
      signal_all(SIGKILL);
      kill_at = 0;
    }
  }

  restore_signals();
  if (stop_signal && !any_rank_failed && !o.resume_command.empty())
    std::fprintf(stderr, "launch: every rank stopped cleanly. Resume with:\n  %s\n", o.resume_command.c_str());
  return result;
}

}  // namespace nanochat
