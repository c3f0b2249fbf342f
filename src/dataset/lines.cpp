// Line-based files (jsonl, txt paragraphs) as row groups: one scan finds where every group of
// documents starts, so a rank reads only its groups, and a group's error names file:line.
// Plus the UTF-8 check those files get (parquet strings are UTF-8 by the format).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/stat.h>

#include "sources.h"

namespace nanochat {

void utf8_check(const std::string& s, const std::string& where) {
  size_t bad = utf8_invalid_at(s);
  if (bad != std::string::npos)
    fail("%s: invalid UTF-8 at byte %zu; the text must be UTF-8 (convert it, e.g. with iconv)", where.c_str(), bad);
}

bool line_is_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

void lines_read_from(const std::string& path, int64_t offset, int64_t line,
                     const std::function<bool(const std::string&, int64_t)>& fn) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot read %s: %s", path.c_str(), std::strerror(errno));
  if (fseeko(f, offset, SEEK_SET) != 0) {
    std::fclose(f);
    fail("cannot seek in %s", path.c_str());
  }
  char* buf = nullptr;
  size_t cap = 0;
  ssize_t n;
  try {
    while ((n = getline(&buf, &cap, f)) >= 0) {
      std::string s(buf, (size_t)n);
      if (!s.empty() && s.back() == '\n') s.pop_back();
      if (!s.empty() && s.back() == '\r') s.pop_back();
      if (!fn(s, line++)) break;
    }
  } catch (...) {
    std::free(buf);
    std::fclose(f);
    throw;
  }
  std::free(buf);
  std::fclose(f);
}

// The index of a file is kept for the life of the process (keyed by path, size and mtime):
// an infinite walk reopens every file each epoch, and a scan of a large jsonl is a full read.
static std::mutex g_index_mutex;
static std::map<std::string, LineGroups> g_index_cache;

static LineGroups line_groups_scan(const std::string& path, int docs_per_group, bool paragraphs);

LineGroups line_groups_build(const std::string& path, int docs_per_group, bool paragraphs) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) fail("cannot read %s: %s", path.c_str(), std::strerror(errno));
  std::string key = strprintf("%s|%lld|%lld.%09ld|%d|%d", path.c_str(), (long long)st.st_size,
                              (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec, docs_per_group, (int)paragraphs);
  {
    std::lock_guard<std::mutex> g(g_index_mutex);
    auto it = g_index_cache.find(key);
    if (it != g_index_cache.end()) return it->second;
  }
  LineGroups groups = line_groups_scan(path, docs_per_group, paragraphs);
  std::lock_guard<std::mutex> g(g_index_mutex);
  return g_index_cache[key] = groups;
}

static LineGroups line_groups_scan(const std::string& path, int docs_per_group, bool paragraphs) {
  LineGroups g;
  int64_t docs = 0, offset = 0;
  bool in_doc = false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot read %s: %s", path.c_str(), std::strerror(errno));
  char* buf = nullptr;
  size_t cap = 0;
  ssize_t n;
  for (int64_t line = 1; (n = getline(&buf, &cap, f)) >= 0; line++) {
    bool blank = line_is_blank(std::string(buf, (size_t)n - (n > 0 && buf[n - 1] == '\n')));
    bool starts_doc = !blank && (!paragraphs || !in_doc);
    in_doc = !blank;
    if (starts_doc) {
      if (docs % docs_per_group == 0) {
        g.offset.push_back(offset);
        g.line.push_back(line);
      }
      docs++;
    }
    offset += n;
  }
  std::free(buf);
  std::fclose(f);
  return g;
}

}  // namespace nanochat
