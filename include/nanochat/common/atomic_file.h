// Every file nanochat writes goes through here: bytes go to "<path>.tmp.<pid>", which is
// flushed, fsynced and renamed over <path> only on commit(). A crash, a kill or an
// exception before commit leaves the old <path> exactly as it was.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

namespace nanochat {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates parent dirs; Error if the temp file can't be opened
  ~AtomicFile();                          // not committed -> temp file removed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);  // Error on short write (disk full, ...)
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();  // fflush + fsync + rename + fsync(dir)
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_, temp_path_;
  FILE* file_ = nullptr;
  bool committed_ = false;
};

void atomic_write_file(const std::string& path, const std::string& bytes);

}  // namespace nanochat
