// A chat model small enough for tests and the server bench: a BPE tokenizer trained here on
// a few sentences (nanochat's 9 special tokens after 300 ranks) and a random 2-layer GPT
// (n_embd 128, head_dim 64), saved as an SFT checkpoint in a temp NANOCHAT_BASE_DIR; plus
// the real `nanochat chat-web` binary started on a free loopback port.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "nanochat/checkpoint.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/gpt.h"
#include "nanochat/tokenizer.h"

inline nanochat::Tokenizer tiny_chat_tokenizer() {
  using namespace nanochat;
  std::vector<std::string> texts;
  const char* words[] = {"hello", "world", "the",  "model", "talks", "about", "numbers", "and", "cats", "what",
                         "is",    "two",   "plus", "three", "a",     "small", "chat",    "in",  "C++"};
  for (int i = 0; i < 400; i++) {
    std::string s;
    for (int w = 0; w < 8; w++) s += std::string(w ? " " : "") + words[(i * 7 + w * 3 + i / 5) % 19];
    texts.push_back(s + ". 12/60 = 0.2, héllo wörld ✓");
  }
  ThreadPool pool(1);
  BpeTrainer trainer(kPatternNanochat, pool);
  trainer.add_texts(texts);
  std::vector<std::string> ranks = trainer.train(300);
  std::vector<std::pair<std::string, int32_t>> specials;
  for (size_t i = 0; i < kSpecialTokens.size(); i++) specials.push_back({kSpecialTokens[i], 300 + (int32_t)i});
  return Tokenizer(ranks, kPatternNanochat, specials, "<|bos|>");
}

inline nanochat::GPTConfig tiny_chat_config(int64_t vocab) {
  nanochat::GPTConfig c;
  c.sequence_len = 128;  // positions up to 10x this (the rotary tables)
  c.vocab_size = vocab;
  c.n_layer = 2;
  c.n_head = 2;  // head_dim 64
  c.n_kv_head = 2;
  c.n_embd = 128;
  c.window_pattern = "SL";
  return c;
}

// random init, then every parameter perturbed so the logits vary from token to token
inline nanochat::GPT tiny_chat_model(int64_t vocab, uint64_t seed = 3) {
  using namespace nanochat;
  GPT m(tiny_chat_config(vocab));
  gpt_init_weights(m, 42);
  torch::NoGradGuard ng;
  auto gen = gpt_make_generator(torch::kCPU, seed);
  for (auto& [name, p] : gpt_named_parameters(m)) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.3);
  return m;
}

// $base/tokenizer and $base/chatsft_checkpoints/d2/ step 0 (complete); returns base
inline std::string tiny_chat_base_dir() {
  using namespace nanochat;
  char tmpl[] = "/tmp/nanochat_server_XXXXXX";
  std::string base = mkdtemp(tmpl);
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  Tokenizer tok = tiny_chat_tokenizer();
  tokenizer_save(tok, base + "/tokenizer");
  GPT m = tiny_chat_model(tok.vocab_size());
  nlohmann::ordered_json meta;
  meta["step"] = 0;
  meta["model_config"] = gpt_config_to_json(tiny_chat_config(tok.vocab_size()));
  std::string dir = checkpoint_dir("sft", "d2");
  checkpoint_save_model(dir, 0, gpt_named_parameters(m), meta);
  checkpoint_mark_complete(dir, 0, 0);
  return base;
}

// upstream's render_for_completion by hand: <|bos|> (<|user_start|> u <|user_end|>
// <|assistant_start|> a <|assistant_end|>)* ... <|assistant_start|>
inline std::vector<int64_t> tiny_chat_prompt_by_hand(const nanochat::Tokenizer& tok,
                                                     const std::vector<std::string>& turns) {
  std::vector<int64_t> ids = {tok.special_id("<|bos|>")};
  for (size_t i = 0; i < turns.size(); i++) {
    bool user = i % 2 == 0;
    ids.push_back(tok.special_id(user ? "<|user_start|>" : "<|assistant_start|>"));
    for (int32_t t : tok.encode(turns[i])) ids.push_back(t);
    ids.push_back(tok.special_id(user ? "<|user_end|>" : "<|assistant_end|>"));
  }
  ids.push_back(tok.special_id("<|assistant_start|>"));
  return ids;
}

struct GreedyReference {
  std::string text;
  int64_t tokens;             // generated, the stop token included
  bool stopped;               // hit <|assistant_end|>/<|bos|> within the budget
  std::vector<int64_t> kept;  // the generated ids before the stop token
};
// greedy with the naive loop (GPT.generate, no KV cache), cut at the first stop token
inline GreedyReference tiny_chat_greedy_reference(nanochat::GPT& model, const nanochat::Tokenizer& tok,
                                                  const std::vector<int64_t>& prompt, int64_t max_tokens) {
  std::vector<int64_t> gen = nanochat::gpt_generate(model, prompt, max_tokens, 0.0);
  GreedyReference r{"", 0, false, {}};
  for (int64_t t : gen) {
    if (t == tok.special_id("<|assistant_end|>") || t == tok.special_id("<|bos|>")) {
      r.stopped = true;
      break;
    }
    r.kept.push_back(t);
  }
  r.tokens = (int64_t)r.kept.size() + r.stopped;
  r.text = tok.decode(std::vector<int32_t>(r.kept.begin(), r.kept.end()));
  return r;
}

// `nanochat chat-web --port 0 ...` as a child; its stdout/stderr go to files in `base`;
// one tiny model's NANOCHAT_BASE_DIR for a whole test binary, removed at exit (after the
// servers, built later, are gone)
inline const std::string& tiny_chat_shared_base_dir() {
  struct BaseDir {
    std::string path = tiny_chat_base_dir();
    ~BaseDir() {
      if (path.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + path).c_str());
    }
  };
  static BaseDir base;
  return base.path;
}

// the port is read from its "listening on" line (the model may still be loading: wait_until_healthy)
class ServerProcess {
 public:
  ServerProcess(const std::string& bin, const std::string& base, const std::vector<std::string>& args)
      : log_(base + "/server_" + std::to_string(counter()++) + ".log") {
    std::vector<std::string> argv = {bin, "chat-web", "--port", "0", "--device-type", "cpu"};
    argv.insert(argv.end(), args.begin(), args.end());
    // everything the child needs is built before fork (only async-signal-safe calls after it)
    std::vector<std::string> env = {"NANOCHAT_BASE_DIR=" + base, "OMP_NUM_THREADS=1"};
    for (char** e = environ; *e; e++)
      if (std::strncmp(*e, "NANOCHAT_BASE_DIR=", 18) != 0 && std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0)
        env.push_back(*e);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    for (auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cargv.push_back(nullptr);
    cenv.push_back(nullptr);
    int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test killed by a timeout
      dup2(fd, 1);
      dup2(fd, 2);
      execve(bin.c_str(), cargv.data(), cenv.data());
      _exit(127);
    }
    close(fd);
    for (int i = 0; i < 3000 && port_ == 0; i++) {  // up to 30 s
      std::string text = log();
      size_t at = text.find("listening on http://127.0.0.1:");
      if (at != std::string::npos) port_ = std::stoi(text.substr(at + 30));
      if (port_ == 0) {
        if (exited()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  ~ServerProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  bool exited() {
    if (reaped_) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return reaped_;
  }
  // waits up to `seconds` for the exit; its code, or -1 if still running
  int wait_exit(double seconds) {
    for (int i = 0; i < seconds * 100; i++) {
      if (exited()) return exit_code_;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exited() ? exit_code_ : -1;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// descriptors `pid` holds now (-1 when /proc cannot say)
inline int open_fds(pid_t pid) {
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// the most descriptors `pid` held, sampled every 20 ms while `run`
struct FdWatch {
  std::atomic<bool> run{true};
  std::atomic<int> peak{0};
  std::thread thread;
  explicit FdWatch(pid_t pid) {
    thread = std::thread([this, pid] {
      for (int i = 0; i < 3000 && run; i++) {  // at most 60 s
        peak = std::max(peak.load(), open_fds(pid));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  int stop() {
    run = false;
    thread.join();
    return peak;
  }
};

// raises this process's soft limit on descriptors to `want` (within the hard one); false if it cannot
inline bool raise_fd_limit(rlim_t want) {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < want) return false;
  r.rlim_cur = std::max<rlim_t>(r.rlim_cur, want);
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}
