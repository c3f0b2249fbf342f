// The document walk of spec §2.3/§7.1: file after file, row groups start, start+step, ... of
// each, every batch tagged with (file, row group, epoch) so a checkpoint can save where the
// walk is and a resumed run continues with the next row group.
#include "nanochat/dataset.h"

namespace nanochat {

DocIterator::DocIterator(CorpusSplit split, int start, int step, bool infinite, const DocPosition* resume,
                         int batch_size)
    : split_(std::move(split)), start_(start), step_(step), batch_size_(batch_size), infinite_(infinite) {
  if (step < 1 || start < 0 || start >= step) fail("document iterator: rank %d of %d is not a valid rank", start, step);
  if (split_.num_sources < 1) fail("document iterator: the split has no files");
  row_group_ = start;
  full_pass_ = resume == nullptr;
  if (resume) {
    if (resume->file < 0 || resume->row_group < 0 || resume->epoch < 1)
      fail("resume position (file %d, row group %d, epoch %d) is invalid", resume->file, resume->row_group,
           resume->epoch);
    // the next row group of this rank after the saved one (upstream's rule); past the end of
    // that file, advance() moves on to the next file
    file_ = resume->file;
    row_group_ = (resume->row_group / step + 1) * step + start;
    epoch_ = resume->epoch;
  }
}

bool DocIterator::advance() {
  for (;;) {
    if (file_ >= split_.num_sources) {
      if (!infinite_) return false;
      if (full_pass_ && !pass_had_data_)
        fail("rank %d of %d gets no documents: no file of this split has more than %d row groups; use fewer "
             "ranks or more data", start_, step_, start_);
      epoch_++;
      file_ = 0;
      row_group_ = start_;
      pass_had_data_ = false;
      full_pass_ = true;
    }
    if (source_index_ != file_) {
      source_.reset();
      source_ = split_.open(file_);
      source_index_ = file_;
    }
    if (row_group_ < source_->num_row_groups()) {
      pending_ = source_->read_row_group(row_group_);
      pending_at_ = 0;
      pending_pos_ = {file_, row_group_, epoch_};
      row_group_ += step_;
      if (pending_.empty()) continue;
      pass_had_data_ = true;
      return true;
    }
    file_++;
    row_group_ = start_;
  }
}

bool DocIterator::next(DocBatch& out) {
  if (pending_at_ >= pending_.size() && !advance()) return false;
  size_t n = pending_.size() - pending_at_;
  if (batch_size_ > 0 && (size_t)batch_size_ < n) n = batch_size_;
  out.docs.assign(std::make_move_iterator(pending_.begin() + pending_at_),
                  std::make_move_iterator(pending_.begin() + pending_at_ + n));
  pending_at_ += n;
  out.pos = pending_pos_;
  last_ = pending_pos_;
  return true;
}

}  // namespace nanochat
