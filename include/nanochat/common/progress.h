// Progress of a long job: count, rate and ETA. On a terminal one line is redrawn at most
// 10 times a second; otherwise (logs, CI) a plain line is printed every `every_seconds`.
// Only rank 0 prints.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace nanochat {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);  // "1h02m", "3m07s", "12.3s"
std::string format_count(double x);           // "950", "12.5", "250.0k", "3.20M", "2.00G"
std::string format_thousands(int64_t n);      // 1234567 -> "1,234,567"

class Progress {
 public:
  // total <= 0: unknown total (no ETA); unit names what is counted ("docs", "MB")
  Progress(std::string label, int64_t total, std::string unit = "", double every_seconds = 10.0);
  ~Progress();  // finish() if not done
  void update(int64_t delta = 1);
  void set(int64_t done);
  void set_total(int64_t total);  // when the total is only known (or estimated) on the way
  void finish();
  // the text of the current line, e.g. "tokenizing  420/1000 docs  42.0%  35.1 docs/s  ETA 16.5s"
  std::string line() const;

 private:
  void maybe_print(bool force);
  std::string label_, unit_;
  int64_t total_, done_ = 0;
  double every_seconds_, last_print_ = -1e9;
  bool tty_, finished_ = false;
  Timer timer_;
};

}  // namespace nanochat
