// defines: BestFitPacker
// The dataloader module (spec §7). This part: nanochat's BOS-aligned best-fit packing
// (§7.2). Each row of T+1 tokens is filled from a buffer of tokenized documents (each
// starting with BOS): the largest document that still fits (the first on ties, in buffer
// order), and when none fits, the shortest one (first on ties) cropped to the space left.
// No padding; the cropped tails are dropped. The worker threads, pinned staging and resume
// state of issue #5 build on this.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace nanochat {

class BestFitPacker {
 public:
  // refill appends tokenized documents to `docs` (upstream: 128 at a time) and returns
  // false when the data has ended
  using Refill = std::function<bool(std::vector<std::vector<int32_t>>& docs)>;
  BestFitPacker(int64_t batch_size, int64_t seq_len, size_t buffer_size = 1000);

  // fills rows (batch_size x (seq_len + 1), row-major) and returns true; false when the data
  // ran out before the batch was full
  bool next_batch(const Refill& refill, std::vector<int32_t>& rows);

  int64_t tokens_used() const { return tokens_used_; }        // copied into rows
  int64_t tokens_cropped() const { return tokens_cropped_; }  // tails thrown away
  size_t buffered() const { return buffer_.size(); }

 private:
  int64_t batch_size_, row_capacity_;
  size_t buffer_size_;
  std::vector<std::vector<int32_t>> buffer_;
  int64_t tokens_used_ = 0, tokens_cropped_ = 0;
};

}  // namespace nanochat
