#include "nanochat/common/log.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <sys/time.h>

#include "nanochat/common/env.h"

namespace nanochat {

static int g_rank = 0, g_world_size = 1;
static std::mutex g_mutex;  // one line at a time from worker threads

void log_set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world_size = world_size;
}
bool log_debug_enabled() {
  static const bool on = env_flag("NANOCHAT_DEBUG");
  return on;
}

static void log_line(FILE* out, const char* level, const char* fmt, va_list args) {
  char stamp[32];
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &local);
  // `nanochat launch` prefixes every line with the rank itself; torchrun and srun don't
  static const bool launched = env_flag("NANOCHAT_LAUNCHED");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world_size > 1 && !launched) std::fprintf(out, "%s [rank %d] %s", stamp, g_rank, level);
  else std::fprintf(out, "%s %s", stamp, level);
  std::vfprintf(out, fmt, args);
  std::fputc('\n', out);
  std::fflush(out);
}

bool log_rank_prints() {
  static const bool env_all = env_flag("NANOCHAT_LOG_ALL_RANKS");
  return g_rank == 0 || env_all;
}

void log_info(const char* fmt, ...) {
  if (!log_rank_prints()) return;
  va_list args;
  va_start(args, fmt);
  log_line(stdout, "", fmt, args);
  va_end(args);
}

void log_debug(const char* fmt, ...) {
  if (!log_debug_enabled() || !log_rank_prints()) return;
  va_list args;
  va_start(args, fmt);
  log_line(stderr, "debug: ", fmt, args);
  va_end(args);
}

void log_warn(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  log_line(stderr, "warning: ", fmt, args);
  va_end(args);
}

void log_error(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  log_line(stderr, "error: ", fmt, args);
  va_end(args);
}

}  // namespace nanochat
