// The DocSource kinds behind doc_source_open and corpus_split. Internal to the dataset module.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/common/utf8.h"
#include "nanochat/dataset.h"

namespace nanochat {

std::unique_ptr<DocSource> parquet_source_open(const std::string& path, const std::string& text_column);
std::unique_ptr<DocSource> jsonl_source_open(const std::string& path, const std::string& text_column,
                                             int docs_per_group);
std::unique_ptr<DocSource> txt_paragraphs_source_open(const std::string& path, int docs_per_group);
// many .txt files, one document each; row group i is files [i*n, (i+1)*n)
std::unique_ptr<DocSource> txt_files_source_open(std::vector<std::string> files, int docs_per_group);

// Error "<where>: invalid UTF-8 at byte N" unless s is valid UTF-8
void utf8_check(const std::string& s, const std::string& where);

// Where the row groups of a line-based file begin: a document is a non-blank line (jsonl)
// or a run of non-blank lines (paragraphs); group g starts at document g * docs_per_group.
struct LineGroups {
  std::vector<int64_t> offset;  // byte offset of each group's first line
  std::vector<int64_t> line;    // its 1-based line number, for messages
};
LineGroups line_groups_build(const std::string& path, int docs_per_group, bool paragraphs);

// reads lines from `offset` (line number `line`) calling fn(text, line_number) for each,
// without its '\n' (and '\r'), until fn returns false or the file ends
void lines_read_from(const std::string& path, int64_t offset, int64_t line,
                     const std::function<bool(const std::string&, int64_t)>& fn);

bool line_is_blank(const std::string& s);

}  // namespace nanochat
