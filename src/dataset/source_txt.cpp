// .txt corpora. --txt-split paragraphs: documents are blocks of non-blank lines separated by
// blank lines, lines joined with '\n', grouped docs_per_group to a row group. --txt-split
// file (default): each file is one document; the split's files form one source whose row
// groups are docs_per_group files, so ranks stride over files (one row group per file would
// give every document to rank 0). Empty files are skipped. Invalid UTF-8 is an Error.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "nanochat/common/files.h"
#include "sources.h"

namespace nanochat {

namespace {
class TxtParagraphsSource : public DocSource {
 public:
  TxtParagraphsSource(std::string path, int per_group)
      : path_(std::move(path)), per_group_(per_group), groups_(line_groups_build(path_, per_group_, true)) {}
  int num_row_groups() const override { return (int)groups_.offset.size(); }
  std::string name() const override { return path_; }

  std::vector<std::string> read_row_group(int index) const override {
    if (index < 0 || index >= num_row_groups()) fail("%s: no row group %d", path_.c_str(), index);
    std::vector<std::string> docs;
    std::string doc;
    bool in_doc = false;
    lines_read_from(path_, groups_.offset[index], groups_.line[index], [&](const std::string& s, int64_t line) {
      if (line_is_blank(s)) {
        if (in_doc) docs.push_back(std::move(doc)), doc.clear();
        in_doc = false;
        return (int)docs.size() < per_group_;
      }
      utf8_check(s, strprintf("%s:%lld", path_.c_str(), (long long)line));
      if (in_doc) doc += '\n';
      doc += s;
      in_doc = true;
      return true;
    });
    if (in_doc && (int)docs.size() < per_group_) docs.push_back(std::move(doc));
    return docs;
  }

 private:
  std::string path_;
  int per_group_;
  LineGroups groups_;
};

class TxtFilesSource : public DocSource {
 public:
  TxtFilesSource(std::vector<std::string> files, int per_group) : files_(std::move(files)), per_group_(per_group) {}
  int num_row_groups() const override { return (int)((files_.size() + per_group_ - 1) / per_group_); }
  std::string name() const override { return files_.empty() ? "(no files)" : files_.front() + " .. " + files_.back(); }

  std::vector<std::string> read_row_group(int index) const override {
    if (index < 0 || index >= num_row_groups()) fail("%s: no row group %d", name().c_str(), index);
    std::vector<std::string> docs;
    size_t end = std::min(files_.size(), (size_t)(index + 1) * per_group_);
    for (size_t i = (size_t)index * per_group_; i < end; i++) {
      std::string s = read_file_bytes(files_[i]);
      if (s.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
      size_t bad = utf8_invalid_at(s);
      if (bad != std::string::npos) {
        long long line = 1 + std::count(s.begin(), s.begin() + bad, '\n');
        fail("%s:%lld: invalid UTF-8; the text must be UTF-8 (convert it, e.g. with iconv)", files_[i].c_str(), line);
      }
      docs.push_back(std::move(s));
    }
    return docs;
  }

 private:
  std::vector<std::string> files_;
  int per_group_;
};
}  // namespace

std::unique_ptr<DocSource> txt_paragraphs_source_open(const std::string& path, int docs_per_group) {
  return std::make_unique<TxtParagraphsSource>(path, docs_per_group);
}

std::unique_ptr<DocSource> txt_files_source_open(std::vector<std::string> files, int docs_per_group) {
  return std::make_unique<TxtFilesSource>(std::move(files), docs_per_group);
}

}  // namespace nanochat
