// The waiting room's turns (see wait_queues.h).
#include "engine/wait_queues.h"

namespace nanochat {

void WaitQueues::push(std::shared_ptr<WaitingRequest> r) {
  r->seq = ++seq_;
  count_++;
  rows_ += r->rows_needed;
  keys_[r->key].queue.push_back(std::move(r));
}

void WaitQueues::pop_back(const std::string& key) {
  auto k = keys_.find(key);
  if (k == keys_.end()) return;
  count_--;
  rows_ -= k->second.queue.back()->rows_needed;
  k->second.queue.pop_back();
  if (k->second.queue.empty()) keys_.erase(k);
}

const std::string* WaitQueues::turn(const std::map<std::string, size_t>& taken,
                                    const std::map<std::string, uint64_t>& served, const Admissible& admissible) const {
  const std::string* best = nullptr;
  uint64_t best_served = 0, best_seq = 0;
  for (const auto& [key, k] : keys_) {
    auto t = taken.find(key);
    const size_t at = t == taken.end() ? 0 : t->second;
    if (at >= k.queue.size() || (admissible && !admissible(*k.queue[at]))) continue;
    auto s = served.find(key);
    auto past = served_.find(key);
    const uint64_t when = s != served.end() ? s->second : past != served_.end() ? past->second : 0;
    const uint64_t seq = k.queue[at]->seq;
    if (!best || when < best_served || (when == best_served && seq < best_seq)) {
      best = &key;
      best_served = when;
      best_seq = seq;
    }
  }
  return best;
}

std::shared_ptr<WaitingRequest> WaitQueues::next(const Admissible& admissible) const {
  const std::string* key = turn({}, {}, admissible);
  return key ? keys_.at(*key).queue.front() : nullptr;
}

std::shared_ptr<WaitingRequest> WaitQueues::pop_next(const Admissible& admissible) {
  const std::string* key = turn({}, {}, admissible);
  if (!key) return nullptr;
  auto k = keys_.find(*key);
  std::shared_ptr<WaitingRequest> r = k->second.queue.front();
  k->second.queue.pop_front();
  if (served_.size() >= kMaxRemembered) served_.clear();
  served_[*key] = ++tick_;
  count_--;
  rows_ -= r->rows_needed;
  if (k->second.queue.empty()) keys_.erase(k);
  return r;
}

int64_t WaitQueues::blocked(const std::string& key, int64_t free_rows) const {
  std::map<std::string, size_t> taken;
  std::map<std::string, uint64_t> served;
  uint64_t tick = tick_;
  while (const std::string* k = turn(taken, served)) {
    const WaitingRequest& r = *keys_.at(*k).queue[taken[*k]];
    if (r.rows_needed > free_rows) break;
    free_rows -= r.rows_needed;
    taken[*k]++;
    served[*k] = ++tick;
  }
  auto k = keys_.find(key);
  if (k == keys_.end()) return 0;
  return (int64_t)k->second.queue.size() - (int64_t)taken[key];
}

std::deque<std::shared_ptr<WaitingRequest>> WaitQueues::take_all() {
  return remove_if([](const WaitingRequest&) { return true; });
}

}  // namespace nanochat
