// defines: DocChunk, ChunkReader
// The document stream of one rank (spec §7.1), cut into chunks of documents that keep their
// positions: row groups rank, rank + world, ... of each file, file after file, epoch after
// epoch. Unlike DocIterator it starts at any document of any row group (exact resume) and
// can skip row groups that fail to decode. Internal to the dataloader; no torch in here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nanochat/dataloader.h"

namespace nanochat {

struct DocChunk {
  int64_t seq = 0;         // position in the stream of chunks
  DocRef first;            // the chunk's first document
  int raw_count = 0;       // documents read from the row group (before cleaning)
  std::vector<std::string> docs;           // the text (emptied once tokenized)
  std::vector<int32_t> index;              // row-group index of each kept document
  std::vector<std::vector<int32_t>> tokens;  // [BOS] + ids of each kept document
};

class ChunkReader {
 public:
  // start: the first document to read. full_pass: start is the beginning of a pass, so a
  // pass without any document is an error (a rank with no row groups) instead of a hang.
  ChunkReader(CorpusSplit split, int rank, int world, bool infinite, int chunk_size, bool skip_bad,
              DocRef start, bool full_pass);
  bool next(DocChunk& out);  // false at the end of a finite pass
  int64_t bad_row_groups() const { return bad_row_groups_; }
  // one whole row group (to re-read the documents of a saved buffer); Error names it
  std::vector<std::string> read(int file, int row_group);

 private:
  DocSource& source(int file);
  std::vector<std::string> read_checked(DocSource& src, int row_group);
  bool load_next_row_group();

  CorpusSplit split_;
  int rank_, world_, chunk_size_;
  bool infinite_, skip_bad_;
  int file_, row_group_, epoch_, skip_docs_;
  bool full_pass_, pass_had_data_ = false;
  std::unique_ptr<DocSource> source_;
  int source_index_ = -1;
  std::vector<std::string> pending_;
  size_t pending_at_ = 0;
  DocRef pending_pos_;
  int64_t bad_row_groups_ = 0;
};

}  // namespace nanochat
