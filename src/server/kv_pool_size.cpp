#include "server/kv_pool_size.h"

#include <algorithm>
#include <string>
#include <vector>

#include "nanochat/common/error.h"

namespace nanochat {

namespace {

std::string bytes_text(int64_t b) {
  if (b >= (int64_t(1) << 30)) return strprintf("%.1f GiB", b / double(int64_t(1) << 30));
  if (b >= (1 << 20)) return strprintf("%.1f MiB", b / double(1 << 20));
  return strprintf("%.1f KiB", b / 1024.0);
}

}  // namespace

KVPoolSize server_kv_pool_size(bool cuda, int64_t max_batch, int64_t kv_len, int64_t sequence_len,
                               int64_t max_positions, int64_t per_position, int64_t pools, int64_t free_bytes,
                               const std::string& where) {
  const int64_t min_len = std::min(sequence_len, max_positions);  // a default row holds at least a whole sequence
  KVPoolSize s;
  s.rows = max_batch > 0 ? max_batch : cuda ? 32 : 8;
  if (kv_len > 0) {
    s.row_len = std::min(kv_len, max_positions);
  } else if (cuda) {
    s.row_len = min_len;
  } else {
    // on the CPU the model's whole limit (10 x sequence_len) while one pool stays within 2 GiB
    const int64_t fit = (int64_t(2) << 30) / (s.rows * per_position);
    s.row_len = std::min(max_positions, std::max(min_len, fit));
  }
  auto total = [&] { return pools * s.rows * s.row_len * per_position; };
  s.bytes = total();
  if (free_bytes < 0) return s;
  const int64_t budget = free_bytes / 4 * 3;
  if (s.bytes <= budget) return s;

  // the defaults give way: positions down to sequence_len, then rows down to one
  const int64_t asked = s.bytes;
  if (kv_len == 0) s.row_len = std::max(min_len, std::min(s.row_len, budget / (pools * s.rows * per_position)));
  if (max_batch == 0) s.rows = std::max<int64_t>(1, std::min(s.rows, budget / (pools * s.row_len * per_position)));
  s.bytes = total();
  s.shrunk = s.bytes < asked;
  if (s.bytes <= budget) return s;

  std::vector<std::string> remedies;
  if (max_batch > 1) remedies.push_back(strprintf("--max-batch (%lld)", (long long)max_batch));
  if (kv_len > 0 && s.row_len > min_len) remedies.push_back(strprintf("--kv-len (%lld)", (long long)s.row_len));
  if (!cuda && pools > 1) remedies.push_back(strprintf("--workers (%lld)", (long long)pools));
  std::string remedy;
  for (size_t i = 0; i < remedies.size(); i++)
    remedy += (i ? i + 1 == remedies.size() ? " or " : ", " : "") + remedies[i];
  fail(
      "the KV pool needs %s (%s%lld rows x %lld positions x %s each) but %s has %s free, of which the pool may "
      "take 3/4 (the rest is for the forward); %s",
      bytes_text(s.bytes).c_str(), pools > 1 ? strprintf("%lld pools x ", (long long)pools).c_str() : "",
      (long long)s.rows, (long long)s.row_len, bytes_text(per_position).c_str(), where.c_str(),
      bytes_text(free_bytes).c_str(),
      remedy.empty() ? "the model leaves too little for even one row of its sequence length"
                     : ("lower " + remedy).c_str());
}

}  // namespace nanochat
