#include "nanochat/common/base_dir.h"

#include <sys/statvfs.h>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"

namespace nanochat {

static std::string base_dir_unchecked() {
  if (auto dir = env_get("NANOCHAT_BASE_DIR")) return *dir;
  auto home = env_get("HOME");
  if (!home) fail("neither NANOCHAT_BASE_DIR nor HOME is set; set NANOCHAT_BASE_DIR to a writable directory");
  return *home + "/.cache/nanochat";
}

std::string base_dir() {
  std::string dir = base_dir_unchecked();
  try {
    make_dirs(dir);
  } catch (const Error& e) {
    fail("%s; set NANOCHAT_BASE_DIR to a writable directory", e.what());
  }
  return dir;
}

std::string base_dir_path(const std::string& sub) { return base_dir() + "/" + sub; }

int64_t free_disk_bytes(const std::string& path) {
  struct statvfs st;
  if (statvfs(path.c_str(), &st) != 0) return -1;
  return (int64_t)st.f_bavail * (int64_t)st.f_frsize;
}

}  // namespace nanochat
