// Rank-aware logging. Info lines print on rank 0 only (like nanochat's print0) unless
// NANOCHAT_LOG_ALL_RANKS=1; warnings and errors print on every rank. Each line starts with
// a timestamp, and with the rank when there is more than one.
#pragma once

namespace nanochat {

void log_set_rank(int rank, int world_size);
bool log_debug_enabled();  // NANOCHAT_DEBUG=1
bool log_rank_prints();    // does log_info print on this rank?

void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace nanochat
