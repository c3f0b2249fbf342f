// The bytes of request bodies being read and parsed at once, all connections together: each
// costs its body and its document while it is parsed, so many large bodies at once would take
// the server's memory with them. A request takes its share before it reads its body and gives
// it back once its request is parsed; past the budget it waits, then is refused (503).
// Internal to the server module.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace nanochat {

class ParseBudget {
 public:
  explicit ParseBudget(int64_t bytes) : bytes_(bytes) {}
  void set_bytes(int64_t bytes) { bytes_ = bytes; }
  // takes n bytes of the budget, waiting up to `wait` for them; false when they did not come. A
  // request larger than the whole budget gets it while nobody else parses.
  bool take(int64_t n, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, wait, [&] { return in_use_ == 0 || in_use_ + n <= bytes_; }) && (in_use_ += n, true);
  }
  void give_back(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= n;
    }
    cv_.notify_all();
  }
  int64_t in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }

 private:
  int64_t bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t in_use_ = 0;
};

// a share of the budget, given back when it goes out of scope
class ParseShare {
 public:
  ParseShare(ParseBudget& budget, int64_t n, std::chrono::milliseconds wait)
      : budget_(budget), n_(n), held_(budget.take(n, wait)) {}
  ~ParseShare() {
    if (held_) budget_.give_back(n_);
  }
  ParseShare(const ParseShare&) = delete;
  ParseShare& operator=(const ParseShare&) = delete;
  bool held() const { return held_; }

 private:
  ParseBudget& budget_;
  int64_t n_;
  bool held_;
};

}  // namespace nanochat
