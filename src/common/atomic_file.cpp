#include "nanochat/common/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "nanochat/common/error.h"
#include "nanochat/common/files.h"

namespace nanochat {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  make_dirs(parent_dir(path_));
  // pid in the name: two processes writing the same target never share a temp file
  temp_path_ = path_ + ".tmp." + std::to_string(getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) fail("cannot write %s: %s", temp_path_.c_str(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  if (!file_) fail("write to %s after commit", path_.c_str());
  if (n && std::fwrite(data, 1, n, file_) != n) fail("cannot write %s: %s", temp_path_.c_str(), std::strerror(errno));
}

void AtomicFile::commit() {
  if (!file_) fail("%s committed twice", path_.c_str());
  bool ok = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  int err = errno;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (!ok) fail("cannot write %s: %s", temp_path_.c_str(), std::strerror(err));
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("cannot rename %s to %s: %s", temp_path_.c_str(), path_.c_str(), std::strerror(errno));
  committed_ = true;
  fsync_parent_dir(path_);
}

void atomic_write_file(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace nanochat
