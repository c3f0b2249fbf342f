// BOS-aligned best-fit packing, exactly as upstream's dataloader.py.
#include "nanochat/common/error.h"
#include "nanochat/dataloader.h"

namespace nanochat {

BestFitPacker::BestFitPacker(int64_t batch_size, int64_t seq_len, size_t buffer_size)
    : batch_size_(batch_size), row_capacity_(seq_len + 1), buffer_size_(buffer_size) {
  if (batch_size < 1 || seq_len < 1 || buffer_size < 1)
    fail("packing needs batch size, sequence length and buffer size >= 1 (got %lld, %lld, %zu)", (long long)batch_size,
         (long long)seq_len, buffer_size);
}

void BestFitPacker::push(std::vector<int32_t> tokens, DocRef ref) {
  if (tokens.empty()) fail("packing: a document has no tokens (each one starts with BOS)");
  buffer_.push_back(std::move(tokens));
  refs_.push_back(ref);
}

bool BestFitPacker::next_batch(const Refill& refill, std::vector<int32_t>& rows) {
  rows.assign((size_t)(batch_size_ * row_capacity_), 0);
  for (int64_t r = 0; r < batch_size_; r++) {
    int32_t* row = rows.data() + r * row_capacity_;
    int64_t pos = 0;
    while (pos < row_capacity_) {
      while (buffer_.size() < buffer_size_)
        if (!refill(*this)) break;  // the data ended: pack what is left
      if (buffer_.empty()) return false;
      int64_t remaining = row_capacity_ - pos;
      // the largest document that fits, the first one on ties
      size_t best = buffer_.size();
      for (size_t i = 0; i < buffer_.size(); i++) {
        int64_t n = (int64_t)buffer_[i].size();
        if (n <= remaining && (best == buffer_.size() || n > (int64_t)buffer_[best].size())) best = i;
      }
      bool fits = best < buffer_.size();
      if (!fits) {  // nothing fits: crop the shortest one, the first on ties
        best = 0;
        for (size_t i = 1; i < buffer_.size(); i++)
          if (buffer_[i].size() < buffer_[best].size()) best = i;
      }
      const std::vector<int32_t>& doc = buffer_[best];
      int64_t take = fits ? (int64_t)doc.size() : remaining;
      std::copy(doc.begin(), doc.begin() + take, row + pos);
      tokens_used_ += take;
      tokens_cropped_ += (int64_t)doc.size() - take;
      pos += take;
      buffer_.erase(buffer_.begin() + (long)best);  // keeps the others' order, like list.pop(i)
      refs_.erase(refs_.begin() + (long)best);
    }
  }
  return true;
}

}  // namespace nanochat
