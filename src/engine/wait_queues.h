// The scheduler's waiting room: one queue per key (Scheduler::submit's queue_key), first come first
// served within a key; free rows go to the front request of the key served least recently (a
// key with nobody served yet first, then the oldest request), so a key that floods waits
// behind everyone else's turn and is the one refused when its own queue is full. Not
// thread-safe: the scheduler holds its lock.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace nanochat {

struct WaitingRequest {
  std::string key;
  int64_t rows_needed = 1;  // rows it needs at once
  uint64_t seq = 0;         // arrival order (set by push)
  virtual ~WaitingRequest() = default;
};

class WaitQueues {
 public:
  void push(std::shared_ptr<WaitingRequest> r);
  // takes back the last request pushed for `key` (refused after all)
  void pop_back(const std::string& key);
  // which requests may have rows now (the scheduler's per-key row cap); a key whose front
  // request may not is passed over
  using Admissible = std::function<bool(const WaitingRequest&)>;
  // the request the next free rows go to; null when none waits
  std::shared_ptr<WaitingRequest> next(const Admissible& admissible = nullptr) const;
  // removes next(admissible) and counts its key as served now
  std::shared_ptr<WaitingRequest> pop_next(const Admissible& admissible = nullptr);
  // whether a key other than `key` has requests waiting
  bool others_wait(const std::string& key) const {
    return keys_.size() > 1 || (keys_.size() == 1 && keys_.begin()->first != key);
  }
  // requests of `key` that `free_rows` would not take if admission ran now (it stops at the
  // first request in turn that does not fit, as the scheduler's does)
  int64_t blocked(const std::string& key, int64_t free_rows) const;
  // removes (and returns) every request for which pred is true
  template <class Pred>
  std::deque<std::shared_ptr<WaitingRequest>> remove_if(Pred pred);
  std::deque<std::shared_ptr<WaitingRequest>> take_all();
  int64_t size() const { return count_; }
  int64_t rows() const { return rows_; }

 private:
  struct Key {
    std::deque<std::shared_ptr<WaitingRequest>> queue;
  };
  // the key whose turn it is, among `keys` with `from[key]` requests already taken
  const std::string* turn(const std::map<std::string, size_t>& taken, const std::map<std::string, uint64_t>& served,
                          const Admissible& admissible = nullptr) const;
  std::map<std::string, Key> keys_;  // keys with requests waiting
  // when each key's last request got rows (a key never served: 0), kept after its queue
  // empties, so a key that sends one request at a time does not count as new each time
  // (forgotten all at once past kMaxRemembered keys)
  std::map<std::string, uint64_t> served_;
  static constexpr size_t kMaxRemembered = 4096;
  uint64_t seq_ = 0, tick_ = 0;
  int64_t count_ = 0, rows_ = 0;
};

template <class Pred>
std::deque<std::shared_ptr<WaitingRequest>> WaitQueues::remove_if(Pred pred) {
  std::deque<std::shared_ptr<WaitingRequest>> out;
  for (auto k = keys_.begin(); k != keys_.end();) {
    auto& q = k->second.queue;
    for (auto it = q.begin(); it != q.end();) {
      if (!pred(**it)) {
        ++it;
        continue;
      }
      count_--;
      rows_ -= (*it)->rows_needed;
      out.push_back(*it);
      it = q.erase(it);
    }
    k = q.empty() ? keys_.erase(k) : std::next(k);
  }
  return out;
}

}  // namespace nanochat
