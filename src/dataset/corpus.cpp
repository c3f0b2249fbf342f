// A corpus is a directory of one kind of file: the ClimbMix shards by default, or --data DIR
// of .parquet, .jsonl or .txt files. Files are sorted by name; the last is the validation
// split and the rest are train (upstream's rule, so the same folder splits the same way).
#include <algorithm>
#include <dirent.h>

#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "sources.h"

namespace nanochat {

static std::string extension_kind(const std::string& name) {
  for (const char* kind : {"parquet", "jsonl", "txt"}) {
    std::string ext = std::string(".") + kind;
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) return kind;
  }
  return "";
}

std::unique_ptr<DocSource> doc_source_open(const std::string& path, const CorpusOptions& opts) {
  std::string kind = extension_kind(path);
  if (kind == "parquet") return parquet_source_open(path, opts.text_column);
  if (kind == "jsonl") return jsonl_source_open(path, opts.text_column, opts.docs_per_group);
  if (kind == "txt") {
    if (opts.txt_split == "paragraphs") return txt_paragraphs_source_open(path, opts.docs_per_group);
    return txt_files_source_open({path}, opts.docs_per_group);
  }
  fail("%s: not a .parquet, .jsonl or .txt file", path.c_str());
}

Corpus corpus_open(const CorpusOptions& opts) {
  if (opts.txt_split != "file" && opts.txt_split != "paragraphs")
    fail("--txt-split '%s' is not one of: file, paragraphs", opts.txt_split.c_str());
  if (opts.docs_per_group < 1) fail("documents per row group must be at least 1, not %d", opts.docs_per_group);
  Corpus c;
  c.opts = opts;
  if (opts.data_dir.empty()) {
    c.dir = dataset_dir();
    c.kind = "parquet";
    c.files = dataset_list_parquet_files(c.dir);
    if (c.files.empty())
      fail("no shards in %s; run `nanochat download -n 8` first, or pass --data DIR with your own corpus",
           c.dir.c_str());
    return c;
  }
  c.dir = opts.data_dir;
  while (c.dir.size() > 1 && c.dir.back() == '/') c.dir.pop_back();
  if (!is_directory(c.dir)) fail("--data %s: not a directory", opts.data_dir.c_str());
  DIR* d = opendir(c.dir.c_str());
  if (!d) fail("--data %s: cannot list it", c.dir.c_str());
  std::vector<std::string> kinds;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name, kind = extension_kind(name);
    if (name[0] == '.' || kind.empty()) continue;  // hidden files, README, *.tmp of a download
    c.files.push_back(c.dir + "/" + name);
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  closedir(d);
  if (kinds.empty()) fail("--data %s holds no .parquet, .jsonl or .txt files", c.dir.c_str());
  std::sort(kinds.begin(), kinds.end());
  if (kinds.size() > 1)
    fail("--data %s mixes .%s and .%s files; keep one kind of file per corpus folder", c.dir.c_str(), kinds[0].c_str(),
         kinds[1].c_str());
  c.kind = kinds[0];
  if (opts.txt_split == "paragraphs" && c.kind != "txt")
    fail("--txt-split paragraphs applies to .txt corpora, and %s holds .%s files", c.dir.c_str(), c.kind.c_str());
  std::sort(c.files.begin(), c.files.end());
  return c;
}

std::vector<std::string> corpus_split_files(const Corpus& c, const std::string& split) {
  if (split == "val") return {c.files.back()};
  if (split != "train") fail("split '%s' is not train or val", split.c_str());
  if (c.files.size() < 2)
    fail("%s holds one file (%s), which is the validation split; training needs at least two files (%s)", c.dir.c_str(),
         c.files[0].c_str(),
         c.opts.data_dir.empty() ? "run `nanochat download -n 8`" : "split the corpus into several");
  return std::vector<std::string>(c.files.begin(), c.files.end() - 1);
}

CorpusSplit corpus_split(const Corpus& c, const std::string& split) {
  std::vector<std::string> files = corpus_split_files(c, split);
  CorpusOptions opts = c.opts;
  CorpusSplit s;
  if (c.kind == "txt" && opts.txt_split == "file") {
    s.num_sources = 1;
    s.open = [files, opts](int) { return txt_files_source_open(files, opts.docs_per_group); };
  } else {
    s.num_sources = (int)files.size();
    s.open = [files, opts](int i) { return doc_source_open(files.at(i), opts); };
  }
  return s;
}

}  // namespace nanochat
