// Task views, TaskMixture, TaskSequence and render_mc (upstream tasks/common.py).
#include "nanochat/common/error.h"
#include "nanochat/common/py_random.h"
#include "nanochat/tasks.h"

#include <algorithm>
#include <numeric>

namespace nanochat {

Task::Task(TaskSlice slice) : slice_(slice) {
  if (slice.start < 0) fail("task view: start must be >= 0, got %lld", (long long)slice.start);
  if (slice.stop >= 0 && slice.stop < slice.start)
    fail("task view: stop (%lld) must be >= start (%lld)", (long long)slice.stop, (long long)slice.start);
  if (slice.step < 1) fail("task view: step must be >= 1, got %lld", (long long)slice.step);
}

int Task::evaluate(const nlohmann::json&, const std::string&) const {
  fail("task %s has no evaluation (it is for training only)", name().c_str());
}

int64_t Task::size() const {
  // a stop past the end is clamped (upstream would fail on the first missing row; SFT's
  // val mixture asks for MMLU[:5200] and GSM8K[:420], which small datasets do not have)
  int64_t stop = slice_.stop < 0 ? num_examples() : std::min(slice_.stop, num_examples());
  int64_t n = (stop - slice_.start + slice_.step - 1) / slice_.step;  // ceil_div
  if (n < 0)
    fail("task %s: view start %lld is past its %lld examples", name().c_str(), (long long)slice_.start,
         (long long)stop);
  return n;
}

nlohmann::json Task::at(int64_t i) const {
  if (i < 0 || i >= size())
    fail("task %s: index %lld out of range (size %lld)", name().c_str(), (long long)i, (long long)size());
  return get_example(slice_.start + i * slice_.step);
}

std::vector<int64_t> tasks_py_shuffled_range(uint64_t seed, int64_t n) {
  std::vector<int64_t> p(n > 0 ? n : 0);
  std::iota(p.begin(), p.end(), 0);
  PyRandom rng((int64_t)seed);
  rng.shuffle(p);
  return p;
}

TaskMixture::TaskMixture(std::vector<TaskPtr> tasks, TaskSlice slice, PermutationFn permutation)
    : Task(slice), tasks_(std::move(tasks)) {
  std::vector<std::pair<int32_t, int64_t>> ordered;
  for (size_t t = 0; t < tasks_.size(); t++) {
    int64_t n = tasks_[t]->size();
    for (int64_t i = 0; i < n; i++) ordered.emplace_back((int32_t)t, i);
  }
  // Random(42).shuffle(index_map) moves elements without looking at them, so it is the
  // same permutation as shuffling range(n)
  std::vector<int64_t> p = permutation ? permutation((int64_t)ordered.size())
                                       : tasks_py_shuffled_range(42, (int64_t)ordered.size());
  if (p.size() != ordered.size())
    fail("TaskMixture: the permutation has %zu entries for %zu examples", p.size(), ordered.size());
  index_map_.resize(ordered.size());
  for (size_t i = 0; i < p.size(); i++) {
    if (p[i] < 0 || p[i] >= (int64_t)ordered.size())
      fail("TaskMixture: permutation entry %lld out of range", (long long)p[i]);
    index_map_[i] = ordered[(size_t)p[i]];
  }
}

std::pair<int, int64_t> TaskMixture::locate(int64_t index) const {
  if (index < 0 || index >= num_examples())
    fail("TaskMixture: index %lld out of range for %lld conversations", (long long)index, (long long)num_examples());
  return index_map_[(size_t)index];
}

nlohmann::json TaskMixture::get_example(int64_t index) const {
  auto [t, i] = locate(index);
  return tasks_[(size_t)t]->at(i);
}

TaskSequence::TaskSequence(std::vector<TaskPtr> tasks, TaskSlice slice) : Task(slice), tasks_(std::move(tasks)) {
  for (auto& t : tasks_) total_ += t->size();
}

nlohmann::json TaskSequence::get_example(int64_t index) const {
  if (index < 0 || index >= total_)
    fail("TaskSequence: index %lld out of range for %lld conversations", (long long)index, (long long)total_);
  for (auto& t : tasks_) {
    if (index < t->size()) return t->at(index);
    index -= t->size();
  }
  fail("TaskSequence: index out of range");
}

std::string render_mc(const std::string& question, const std::vector<std::string>& letters,
                      const std::vector<std::string>& choices) {
  std::string q = "Multiple Choice question: " + question + "\n";
  // zip(): stops at the shorter list
  for (size_t i = 0; i < letters.size() && i < choices.size(); i++) q += "- " + choices[i] + "=" + letters[i] + "\n";
  q += "\nRespond only with the letter of the correct answer.";
  return q;
}

}  // namespace nanochat
