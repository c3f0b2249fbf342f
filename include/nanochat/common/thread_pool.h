// A fixed set of worker threads with a FIFO queue. submit() returns a future; parallel_for
// splits [0, n) into contiguous chunks, one per worker, and rethrows the first exception.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace nanochat {

int default_thread_count();  // hardware threads, at least 1

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads = default_thread_count());
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return (int)workers_.size(); }

  template <class F>
  auto submit(F&& f) -> std::future<decltype(f())> {
    using R = decltype(f());
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(f));
    std::future<R> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

  // calls fn(begin, end) on disjoint chunks covering [0, n), waits for all of them
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void enqueue(std::function<void()> job);
  void worker_loop();

  std::vector<std::thread> workers_;
  std::queue<std::function<void()>> jobs_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace nanochat
