// `nanochat launch`: a small torchrun. One process per local rank, each in its own process
// group so that a signal reaches everything a rank started. The parent multiplexes the
// ranks' stdout/stderr with poll(), prefixing lines with the rank, and turns signals into
// bytes on a self-pipe so that all decisions happen in one loop:
//   - SIGINT/SIGTERM to the launcher: forwarded to every rank;
//   - a rank exits non-zero: SIGTERM to the others, SIGKILL after the grace period;
//   - everyone reaped: return the first failure's code (128 + signal for a signal).
#include "nanochat/launch.h"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nanochat/common/error.h"
#include "nanochat/common/progress.h"

namespace nanochat {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

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

pid_t spawn_rank(const LaunchOptions& o, int local_rank, int world, int port, int out_fd, int err_fd) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // child
  setpgid(0, 0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  int rank = o.node_rank * o.nproc_per_node + local_rank;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
  setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("NANOCHAT_LAUNCHED", "1", 1);  // the launcher prefixes lines with the rank
  std::vector<char*> argv;
  for (auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "error: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
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
  struct sigaction old_int, old_term, old_chld;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGCHLD, &sa, &old_chld);

  std::vector<Rank> ranks(o.nproc_per_node);
  for (int i = 0; i < o.nproc_per_node; i++) {
    Rank& r = ranks[i];
    r.rank = o.node_rank * o.nproc_per_node + i;
    int fds[2][2];
    for (int k = 0; k < 2; k++)
      if (pipe2(fds[k], O_CLOEXEC) != 0) fail("launch: pipe: %s", std::strerror(errno));
    r.pid = spawn_rank(o, i, world, port, fds[0][1], fds[1][1]);
    if (r.pid < 0) fail("launch: fork: %s", std::strerror(errno));
    setpgid(r.pid, r.pid);  // also here, so that no signal can race the child's own setpgid
    r.running = true;
    for (int k = 0; k < 2; k++) {
      close(fds[k][1]);
      r.streams[k].fd = fds[k][0];
      r.streams[k].out = k == 0 ? stdout : stderr;
    }
  }

  auto signal_all = [&](int sig) {
    for (auto& r : ranks) kill(-r.pid, sig);  // the whole process group of each rank
  };
  int result = 0;          // first failure decides the exit code
  bool stopping = false;   // SIGTERM sent; SIGKILL at `kill_at`
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

    unsigned char sig;
    while (read(g_signal_pipe[0], &sig, 1) == 1) {
      if (sig == SIGINT || sig == SIGTERM) {
        std::fprintf(stderr, "launch: got %s, forwarding to all ranks\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        signal_all(sig);
        if (!stopping) kill_at = clock.seconds() + o.kill_grace_seconds;
        stopping = true;
        if (result == 0) result = 128 + sig;
      }
    }
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
      for (auto& r : ranks) {
        if (r.pid != pid) continue;
        r.running = false;
        int code = exit_code_of(status);
        if (code != 0 && result == 0) {
          result = code;
          std::fprintf(stderr, "launch: rank %d exited with code %d; stopping the other ranks\n", r.rank, code);
        }
        if (code != 0 && !stopping) {
          stopping = true;
          kill_at = clock.seconds() + o.kill_grace_seconds;
          signal_all(SIGTERM);
        }
      }
    }
    if (stopping && kill_at > 0 && clock.seconds() > kill_at) {
      signal_all(SIGKILL);
      kill_at = 0;
    }
  }

  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  return result;
}

}  // namespace nanochat
