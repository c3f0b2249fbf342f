#include "nanochat/common/progress.h"

#include <cmath>
#include <cstdio>
#include <unistd.h>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"

namespace nanochat {

std::string format_duration(double s) {
  if (s < 0) s = 0;
  if (s < 60) return strprintf("%.1fs", s);
  long t = (long)(s + 0.5);
  if (t < 3600) return strprintf("%ldm%02lds", t / 60, t % 60);
  return strprintf("%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

std::string format_thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_count(double x) {
  double a = std::abs(x);
  if (a >= 1e9) return strprintf("%.2fG", x / 1e9);
  if (a >= 1e6) return strprintf("%.2fM", x / 1e6);
  if (a >= 1e5) return strprintf("%.1fk", x / 1e3);
  if (x == (double)(int64_t)x) return strprintf("%lld", (long long)x);
  return strprintf("%.1f", x);
}

Progress::Progress(std::string label, int64_t total, std::string unit, double every_seconds)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      every_seconds_(every_seconds),
      tty_(isatty(fileno(stdout))) {}

Progress::~Progress() {
  if (!finished_) finish();
}

void Progress::update(int64_t delta) { set(done_ + delta); }

void Progress::set(int64_t done) {
  done_ = done;
  maybe_print(false);
}

void Progress::set_total(int64_t total) { total_ = total; }

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  maybe_print(true);
  if (tty_ && log_rank_prints()) std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string Progress::line() const {
  double elapsed = timer_.seconds();
  double rate = elapsed > 0 ? done_ / elapsed : 0.0;
  std::string unit = unit_.empty() ? "" : " " + unit_;
  std::string s = label_ + "  ";
  if (total_ > 0) {
    s += strprintf("%s/%s%s  %5.1f%%", format_count((double)done_).c_str(), format_count((double)total_).c_str(),
                   unit.c_str(), 100.0 * done_ / total_);
  } else {
    s += format_count((double)done_) + unit;
  }
  s += strprintf("  %s%s/s", format_count(rate < 100 ? std::round(rate * 10) / 10 : std::round(rate)).c_str(),
                 unit.c_str());
  if (finished_) s += "  done in " + format_duration(elapsed);
  else if (total_ > 0 && rate > 0) s += "  ETA " + format_duration((total_ - done_) / rate);
  return s;
}

void Progress::maybe_print(bool force) {
  double now = timer_.seconds();
  double every = tty_ ? 0.1 : every_seconds_;
  if (!force && now - last_print_ < every) return;
  last_print_ = now;
  if (!log_rank_prints()) return;
  if (tty_) {
    std::printf("\r\033[K%s", line().c_str());  // redraw one line in place
    std::fflush(stdout);
  } else {
    log_info("%s", line().c_str());
  }
}

}  // namespace nanochat
