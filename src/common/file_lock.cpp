#include "nanochat/common/file_lock.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nanochat/common/error.h"

namespace nanochat {

FileLock::FileLock(std::string path, const std::function<void()>& on_wait) : path_(std::move(path)) {
  bool waited = false;
  for (;;) {
    int fd = open(path_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create lock file %s: %s", path_.c_str(), std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) {
        int err = errno;
        close(fd);
        fail("cannot lock %s: %s", path_.c_str(), std::strerror(err));
      }
      if (!waited && on_wait) on_wait();
      waited = true;
      while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
          int err = errno;
          close(fd);
          fail("cannot lock %s: %s", path_.c_str(), std::strerror(err));
        }
      }
    }
    // the previous holder may have deleted the file we waited on: then lock the new one
    struct stat held, now;
    if (fstat(fd, &held) == 0 && stat(path_.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      fd_ = fd;
      return;
    }
    close(fd);
  }
}

FileLock::~FileLock() {
  unlink(path_.c_str());  // while still holding it: waiters see the inode change
  close(fd_);
}

}  // namespace nanochat
