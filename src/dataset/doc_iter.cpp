// The document walk of upstream's dataloader.py: file after file, row groups start,
// start+step, ... of each, every batch tagged with (file, row group, epoch) so a checkpoint
// can save where the walk is and a resumed run continues with the next row group (or, for
// the loader's exact resume, with the very next document).
#include <algorithm>

#include "nanochat/common/log.h"
#include "nanochat/dataset.h"

namespace nanochat {

namespace {
DocPosition resume_row_group(const DocPosition* resume, int start, int step) {
  if (!resume) return DocPosition{0, start, 1};
  if (resume->file < 0 || resume->row_group < 0 || resume->epoch < 1)
    fail("resume position (file %d, row group %d, epoch %d) is invalid", resume->file, resume->row_group,
         resume->epoch);
  // the next row group of this rank after the saved one (upstream's rule); past the end of
  // that file, advance() moves on to the next file
  return DocPosition{resume->file, (resume->row_group / step + 1) * step + start, resume->epoch};
}
}  // namespace

DocIterator::DocIterator(CorpusSplit split, int start, int step, bool infinite, const DocPosition* resume,
                         int batch_size)
    : DocIterator(std::move(split), start, step, infinite,
                  step >= 1 && start >= 0 && start < step ? resume_row_group(resume, start, step) : DocPosition(), 0,
                  resume == nullptr, batch_size) {}

DocIterator::DocIterator(CorpusSplit split, int start, int step, bool infinite, DocPosition at, int doc, bool full_pass,
                         int batch_size)
    : split_(std::move(split)),
      start_(start),
      step_(step),
      batch_size_(batch_size),
      infinite_(infinite),
      file_(at.file),
      row_group_(at.row_group),
      epoch_(at.epoch),
      skip_docs_(doc),
      full_pass_(full_pass) {
  if (step < 1 || start < 0 || start >= step) fail("document walk: rank %d of %d is not a valid rank", start, step);
  if (split_.num_sources < 1) fail("document walk: the split has no files");
  if (at.file < 0 || at.row_group < 0 || doc < 0 || at.epoch < 1 || at.row_group % step != start)
    fail("document walk: start position (epoch %d, file %d, row group %d, document %d) is not one of rank %d of %d",
         at.epoch, at.file, at.row_group, doc, start, step);
}

DocSource& DocIterator::source(int file) {
  if (source_index_ != file) {
    source_.reset();
    source_ = split_.open(file);  // its Error names the file (e.g. no text column)
    source_index_ = file;
  }
  return *source_;
}

std::vector<std::string> DocIterator::read_checked(DocSource& src, int row_group) {
  try {
    return src.read_row_group(row_group);
  } catch (const std::exception& e) {
    // the parquet reader's messages already name the file and row group; others get both
    std::string what = e.what(), where = strprintf("%s: row group %d", src.name().c_str(), row_group);
    if (what.find(where) != std::string::npos) throw Error(what);
    fail("%s: %s", where.c_str(), what.c_str());
  }
}

std::vector<std::string> DocIterator::read(int file, int row_group) {
  if (file < 0 || file >= split_.num_sources) fail("document walk: no file %d in the split", file);
  DocSource& src = source(file);
  if (row_group >= src.num_row_groups())
    fail("%s has no row group %d (it has %d); the data changed since the state was saved", src.name().c_str(),
         row_group, src.num_row_groups());
  return read_checked(src, row_group);
}

bool DocIterator::advance() {
  for (;;) {
    if (file_ >= split_.num_sources) {
      if (!infinite_) return false;
      if (full_pass_ && !pass_had_data_)
        fail(
            "rank %d of %d gets no documents: no row group %d, %d, ... of this split holds any (or all were "
            "skipped); use fewer ranks or more data",
            start_, step_, start_, start_ + step_);
      epoch_++;
      file_ = 0;
      row_group_ = start_;
      pass_had_data_ = false;
      full_pass_ = true;
    }
    DocSource& src = source(file_);
    if (row_group_ >= src.num_row_groups()) {
      file_++;
      row_group_ = start_;
      continue;
    }
    const int rg = row_group_;
    row_group_ += step_;
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
    pending_pos_ = {file_, rg, epoch_};
    if (pending_at_ >= pending_.size()) continue;  // empty, or resumed at its end
    pass_had_data_ = true;
    return true;
  }
}

bool DocIterator::next(DocBatch& out) {
  if (pending_at_ >= pending_.size() && !advance()) return false;
  size_t n = pending_.size() - pending_at_;
  if (batch_size_ > 0 && (size_t)batch_size_ < n) n = batch_size_;
  out.docs.assign(std::make_move_iterator(pending_.begin() + (long)pending_at_),
                  std::make_move_iterator(pending_.begin() + (long)(pending_at_ + n)));
  out.pos = pending_pos_;
  out.first_doc = (int)pending_at_;
  pending_at_ += n;
  last_ = pending_pos_;
  return true;
}

}  // namespace nanochat
