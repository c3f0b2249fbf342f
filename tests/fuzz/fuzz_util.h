// What the libFuzzer targets share: an input handed to a reader as a real file path. A
// memfd (/proc/self/fd/N) needs no disk and no clean-up; a reader that wants a directory
// (the tokenizer) gets a per-process directory under $TMPDIR (or /dev/shm).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

struct FuzzFile {
  int fd = -1;
  std::string path;
  FuzzFile(const uint8_t* data, size_t size, const char* name = "fuzz") {
    fd = memfd_create(name, 0);
    if (fd < 0) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += (size_t)n;
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~FuzzFile() { close(fd); }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;
};

inline const std::string& fuzz_temp_dir() {
  static char made[512];  // outlives every static std::string, for the exit handler
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR")           ? std::getenv("TMPDIR")
                       : access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                                                       : "/tmp";
    std::snprintf(made, sizeof made, "%s/nanochat-fuzz-XXXXXX", base);
    if (!mkdtemp(made)) std::abort();
    std::atexit([] { std::system((std::string("rm -rf ") + made).c_str()); });
    return std::string(made);
  }();
  return dir;
}

// FUZZ_VERBOSE=1: print each refusal (to check what a corpus file exercises)
inline void fuzz_note(const char* what) {
  static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "refused: %s\n", what);
}

inline void fuzz_write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}
