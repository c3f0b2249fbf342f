// An exclusive flock on "<something>.lock" between processes and threads (each FileLock
// opens its own descriptor, so two threads of one process exclude each other too). The
// holder deletes the lock file on release; a waiter that then wakes up on the deleted file
// notices (inode check) and locks the new one, so no stale lock files pile up.
#pragma once
#include <functional>
#include <string>

namespace nanochat {

class FileLock {
 public:
  // blocks until the lock is held; on_wait runs once if someone else holds it first
  explicit FileLock(std::string path, const std::function<void()>& on_wait = {});
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace nanochat
