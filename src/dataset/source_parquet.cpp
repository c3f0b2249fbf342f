// .parquet corpora (ClimbMix shards, or any files with a string column): row groups are the
// file's own; null values are dropped.
#include "nanochat/parquet.h"
#include "sources.h"

namespace nanochat {

namespace {
class ParquetSource : public DocSource {
 public:
  ParquetSource(const std::string& path, std::string column) : file_(path), column_(std::move(column)) {
    auto names = file_.top_level_names();
    bool found = false;
    std::string list;
    for (auto& n : names) {
      found = found || n == column_;
      list += (list.empty() ? "" : ", ") + n;
    }
    if (!found)
      fail("%s has no column '%s' (columns: %s); pass --text-column to pick another", path.c_str(), column_.c_str(),
           list.c_str());
  }
  int num_row_groups() const override { return file_.num_row_groups(); }
  std::string name() const override { return file_.path(); }

  std::vector<std::string> read_row_group(int index) const override {
    std::vector<uint8_t> nulls;
    std::vector<std::string> docs = file_.read_column_strings(index, column_, &nulls);
    size_t kept = 0;
    for (size_t i = 0; i < docs.size(); i++) {
      if (i < nulls.size() && nulls[i]) continue;
      if (kept != i) docs[kept] = std::move(docs[i]);  // (a self-move would empty the string)
      kept++;
    }
    docs.resize(kept);
    return docs;
  }

 private:
  ParquetFile file_;
  std::string column_;
};
}  // namespace

std::unique_ptr<DocSource> parquet_source_open(const std::string& path, const std::string& text_column) {
  return std::make_unique<ParquetSource>(path, text_column);
}

}  // namespace nanochat
