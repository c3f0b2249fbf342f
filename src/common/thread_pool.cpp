#include "nanochat/common/thread_pool.h"

#include <algorithm>

namespace nanochat {

int default_thread_count() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 0; i < std::max(1, num_threads); i++) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push(std::move(job));
  }
  cv_.notify_one();
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop();
    }
    job();  // packaged_task stores exceptions in its future
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(n, size());
  std::vector<std::future<void>> done;
  for (int64_t c = 0; c < chunks; c++) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    done.push_back(submit([&fn, begin, end] { fn(begin, end); }));
  }
  for (auto& f : done) f.wait();  // all chunks finish before any exception escapes
  for (auto& f : done) f.get();
}

}  // namespace nanochat
