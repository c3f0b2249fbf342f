// .jsonl corpora: one JSON object per line, the document in a string field ("text" or
// --text-column). Blank lines are skipped; a malformed line, a missing field or invalid
// UTF-8 is an Error naming file:line (a corpus with holes would silently train on less).
#include <nlohmann/json.hpp>

#include "sources.h"

namespace nanochat {

namespace {
class JsonlSource : public DocSource {
 public:
  JsonlSource(std::string path, std::string column, int per_group)
      : path_(std::move(path)),
        column_(std::move(column)),
        per_group_(per_group),
        groups_(line_groups_build(path_, per_group_, false)) {}
  int num_row_groups() const override { return (int)groups_.offset.size(); }
  std::string name() const override { return path_; }

  std::vector<std::string> read_row_group(int index) const override {
    if (index < 0 || index >= num_row_groups()) fail("%s: no row group %d", path_.c_str(), index);
    std::vector<std::string> docs;
    lines_read_from(path_, groups_.offset[index], groups_.line[index], [&](const std::string& s, int64_t line) {
      if (line_is_blank(s)) return true;
      std::string where = strprintf("%s:%lld", path_.c_str(), (long long)line);
      utf8_check(s, where);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(s);
      } catch (const nlohmann::json::parse_error& e) {
        fail("%s: malformed JSON (byte %zu); each line must be one JSON object", where.c_str(), e.byte);
      }
      auto it = j.is_object() ? j.find(column_) : j.end();
      if (it == j.end() || !it->is_string()) {
        std::string fields;
        if (j.is_object())
          for (auto& kv : j.items()) fields += (fields.empty() ? "" : ", ") + kv.key();
        fail("%s: no string field '%s' (fields: %s); pass --text-column to pick another", where.c_str(),
             column_.c_str(), fields.empty() ? "none" : fields.c_str());
      }
      docs.push_back(it->get<std::string>());
      return (int)docs.size() < per_group_;
    });
    return docs;
  }

 private:
  std::string path_, column_;
  int per_group_;
  LineGroups groups_;
};
}  // namespace

std::unique_ptr<DocSource> jsonl_source_open(const std::string& path, const std::string& text_column,
                                             int docs_per_group) {
  return std::make_unique<JsonlSource>(path, text_column, docs_per_group);
}

}  // namespace nanochat
