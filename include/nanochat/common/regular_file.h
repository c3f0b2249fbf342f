// The files an import or a checkpoint load reads must be what they claim: links are followed
// (a Hub snapshot is symlinks into a blob store) but the target must be a regular file, so a
// config.json that is /dev/zero, a FIFO or a directory is refused before a byte is read, and
// JSON files are refused past a size cap rather than parsed into memory without bound.
// Inline, in common: the checkpoint and tokenizer modules read files through it (the
// tokenizer's readers are also built alone for the fuzz replay).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "nanochat/common/error.h"

namespace nanochat {

constexpr int64_t kMaxJsonFileBytes = 16 << 20;  // configs, metas, indexes, tokenizer.json: far below

// an fd of PATH (links followed) open for reading, or Error naming it when it is not a regular
// file of at most max_bytes (-1: any size). O_NONBLOCK: opening a FIFO must not wait for a writer.
inline int open_regular_file(const std::string& path, int64_t max_bytes, int64_t* size_out = nullptr) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("cannot open %s: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat %s: %s", path.c_str(), std::strerror(e));
  }
  const char* kind = S_ISREG(st.st_mode)                          ? nullptr
                     : S_ISDIR(st.st_mode)                        ? "a directory"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                  : "not a regular file";
  if (kind) {
    ::close(fd);
    fail("%s is %s, not a regular file: refused without reading", path.c_str(), kind);
  }
  if (max_bytes >= 0 && st.st_size > max_bytes) {
    ::close(fd);
    fail("%s is %lld bytes, over the %lld-byte limit for this file: refused without reading", path.c_str(),
         (long long)st.st_size, (long long)max_bytes);
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size_out) *size_out = st.st_size;
  return fd;
}

// the whole of a regular file of at most max_bytes (a file that grows while read is cut there)
inline std::string read_regular_file(const std::string& path, int64_t max_bytes = kMaxJsonFileBytes) {
  int64_t size = 0;
  int fd = open_regular_file(path, max_bytes, &size);
  std::string out((size_t)size, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      fail("cannot read %s: %s", path.c_str(), std::strerror(e));
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace nanochat
