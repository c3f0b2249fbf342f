// The rank-strided walk of spec §7.1 for the loader: chunks of documents with positions.
#include "reader.h"

#include "nanochat/common/log.h"

namespace nanochat {

ChunkReader::ChunkReader(CorpusSplit split, int rank, int world, bool infinite, int chunk_size, bool skip_bad,
                         DocRef start, bool full_pass)
    : split_(std::move(split)), rank_(rank), world_(world), chunk_size_(chunk_size), infinite_(infinite),
      skip_bad_(skip_bad), file_(start.file), row_group_(start.row_group), epoch_(start.epoch),
      skip_docs_(start.doc), full_pass_(full_pass) {
  if (world < 1 || rank < 0 || rank >= world) fail("dataloader: rank %d of %d is not a valid rank", rank, world);
  if (chunk_size < 1) fail("dataloader: tokenizer batch size must be at least 1, not %d", chunk_size);
  if (split_.num_sources < 1) fail("dataloader: the split has no files");
  if (start.file < 0 || start.row_group < 0 || start.doc < 0 || start.epoch < 1 ||
      start.row_group % world != rank)
    fail("dataloader: start position (epoch %d, file %d, row group %d, document %d) is not one of rank %d of %d",
         start.epoch, start.file, start.row_group, start.doc, rank, world);
}

DocSource& ChunkReader::source(int file) {
  if (source_index_ != file) {
    source_.reset();
    source_ = split_.open(file);  // its Error names the file (e.g. no text column)
    source_index_ = file;
  }
  return *source_;
}

std::vector<std::string> ChunkReader::read_checked(DocSource& src, int row_group) {
  try {
    return src.read_row_group(row_group);
  } catch (const std::exception& e) {
    // the parquet reader's messages already name the file and row group; others get both
    std::string what = e.what(), where = strprintf("%s: row group %d", src.name().c_str(), row_group);
    if (what.find(where) != std::string::npos) throw Error(what);
    fail("%s: %s", where.c_str(), what.c_str());
  }
}

std::vector<std::string> ChunkReader::read(int file, int row_group) {
  if (file < 0 || file >= split_.num_sources) fail("dataloader: no file %d in the split", file);
  DocSource& src = source(file);
  if (row_group >= src.num_row_groups())
    fail("%s has no row group %d (it has %d); the data changed since the state was saved", src.name().c_str(),
         row_group, src.num_row_groups());
  return read_checked(src, row_group);
}

bool ChunkReader::load_next_row_group() {
  for (;;) {
    if (file_ >= split_.num_sources) {
      if (!infinite_) return false;
      if (full_pass_ && !pass_had_data_)
        fail("rank %d of %d gets no documents: no row group %d, %d, ... of this split holds any (or all were "
             "skipped); use fewer ranks or more data", rank_, world_, rank_, rank_ + world_);
      epoch_++;
      file_ = 0;
      row_group_ = rank_;
      pass_had_data_ = false;
      full_pass_ = true;
    }
    DocSource& src = source(file_);
    if (row_group_ >= src.num_row_groups()) {
      file_++;
      row_group_ = rank_;
      continue;
    }
    int rg = row_group_;
    row_group_ += world_;
    try {
      pending_ = read_checked(src, rg);
    } catch (const Error& e) {
      if (!skip_bad_) throw;
      bad_row_groups_++;
      log_warn("skipping a bad row group (%lld so far): %s", (long long)bad_row_groups_, e.what());
      skip_docs_ = 0;
      continue;
    }
    pending_at_ = std::min((size_t)skip_docs_, pending_.size());
    skip_docs_ = 0;
    pending_pos_ = DocRef{epoch_, file_, rg, 0};
    if (pending_at_ >= pending_.size()) continue;  // empty, or resumed at its end
    pass_had_data_ = true;
    return true;
  }
}

bool ChunkReader::next(DocChunk& out) {
  if (pending_at_ >= pending_.size() && !load_next_row_group()) return false;
  size_t n = std::min(pending_.size() - pending_at_, (size_t)chunk_size_);
  out.first = pending_pos_;
  out.first.doc = (int32_t)pending_at_;
  out.raw_count = (int)n;
  out.docs.assign(std::make_move_iterator(pending_.begin() + (long)pending_at_),
                  std::make_move_iterator(pending_.begin() + (long)(pending_at_ + n)));
  out.index.clear();
  out.tokens.clear();
  pending_at_ += n;
  return true;
}

}  // namespace nanochat
