#include "nanochat/common/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nanochat/common/error.h"

namespace nanochat {

bool path_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parent_dir(const std::string& path) {
  size_t end = path.find_last_not_of('/');
  if (end == std::string::npos) return "/";
  size_t slash = path.rfind('/', end);
  if (slash == std::string::npos) return ".";
  size_t keep = path.find_last_not_of('/', slash);
  return keep == std::string::npos ? "/" : path.substr(0, keep + 1);
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  std::string parent = parent_dir(path);
  if (parent != path) make_dirs(parent);
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    fail("cannot create directory %s: %s", path.c_str(), std::strerror(errno));
  if (!is_directory(path)) fail("cannot create directory %s: a file is in the way", path.c_str());
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* dir = opendir(path.c_str())) {
      while (dirent* e = readdir(dir)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") remove_tree(path + "/" + name);
      }
      closedir(dir);
    }
    rmdir(path.c_str());
  } else {
    unlink(path.c_str());
  }
}

void fsync_parent_dir(const std::string& path) {
  int fd = open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

std::string read_file_bytes(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot read %s: %s", path.c_str(), std::strerror(errno));
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("cannot read %s", path.c_str());
  return s;
}

}  // namespace nanochat
