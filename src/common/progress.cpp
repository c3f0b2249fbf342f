#include "nanochat/common/progress.h"

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

Progress::Progress(std::string label, int64_t total, std::string unit, double every_seconds)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total),
      every_seconds_(every_seconds), tty_(isatty(fileno(stdout))) {}

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
    s += strprintf("%lld/%lld%s  %5.1f%%", (long long)done_, (long long)total_, unit.c_str(),
                   100.0 * done_ / total_);
  } else {
    s += strprintf("%lld%s", (long long)done_, unit.c_str());
  }
  s += strprintf("  %.1f%s/s", rate, unit.c_str());
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
