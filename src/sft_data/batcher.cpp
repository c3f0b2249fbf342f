// SFT batches as upstream chat_sft.py's sft_data_generator_bos_bestfit: rank-strided and
// best-fit packed, with BOS padding where upstream pads.
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/sft_data.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

SftBatcher::SftBatcher(const Tokenizer& tok, TaskPtr dataset, int64_t batch_size, int64_t seq_len, int rank, int world,
                       size_t buffer_size, const SftBatcherState* resume)
    : tok_(tok),
      dataset_(std::move(dataset)),
      batch_size_(batch_size),
      row_capacity_(seq_len + 1),
      world_(world),
      buffer_size_(buffer_size),
      cursor_(rank),
      consumed_(rank) {
  if (dataset_->size() == 0) fail("SFT: the %s dataset has no conversations", dataset_->name().c_str());
  if (!resume) return;
  cursor_ = resume->cursor;
  consumed_ = resume->consumed;
  epoch_ = resume->epoch;
  for (int64_t index : resume->buffer) buffer_.push_back(render(index));  // rendering is deterministic
}

SftBatcher::Rendered SftBatcher::render(int64_t index) const {
  RenderedConversation r = render_conversation(tok_, dataset_->at(index));
  return {index, std::move(r.ids), std::move(r.mask)};
}

SftBatcherState SftBatcher::state() const {
  SftBatcherState s;
  s.cursor = cursor_;
  s.consumed = consumed_;
  s.epoch = epoch_;
  for (const Rendered& r : buffer_) s.buffer.push_back(r.index);
  return s;
}

void SftBatcher::refill() {
  while (buffer_.size() < buffer_size_) {
    buffer_.push_back(render(cursor_));
    cursor_ += world_;
    if (cursor_ >= dataset_->size()) {  // wrap around: the next epoch
      cursor_ %= dataset_->size();
      epoch_++;
    }
  }
}

SftBatch SftBatcher::next() {
  const int32_t bos = tok_.bos_id();
  std::vector<int64_t> rows(batch_size_ * row_capacity_);
  std::vector<uint8_t> masks(batch_size_ * row_capacity_);
  std::vector<int64_t> content_len(batch_size_, row_capacity_);
  for (int64_t b = 0; b < batch_size_; b++) {
    int64_t* row = &rows[b * row_capacity_];
    uint8_t* mask = &masks[b * row_capacity_];
    int64_t len = 0;
    while (len < row_capacity_) {
      refill();
      const int64_t remaining = row_capacity_ - len;
      // the largest conversation that fits, the first one on ties
      int64_t best = -1, best_len = 0;
      for (size_t i = 0; i < buffer_.size(); i++) {
        int64_t n = (int64_t)buffer_[i].ids.size();
        if (n <= remaining && n > best_len) {
          best = (int64_t)i;
          best_len = n;
        }
      }
      if (best < 0 && len == 0) {
        // An empty row and nothing fits: every buffered conversation is longer than a row.
        // Upstream would pad rows forever here; we crop the shortest (first on ties) instead.
        best = 0;
        for (size_t i = 1; i < buffer_.size(); i++)
          if (buffer_[i].ids.size() < buffer_[best].ids.size()) best = (int64_t)i;
        best_len = remaining;
      }
      if (best < 0) {  // pad the rest of the row with BOS, masked
        content_len[b] = len;
        std::fill(row + len, row + row_capacity_, (int64_t)bos);
        std::fill(mask + len, mask + row_capacity_, (uint8_t)0);
        break;
      }
      const Rendered& conv = buffer_[best];
      std::copy(conv.ids.begin(), conv.ids.begin() + best_len, row + len);
      std::copy(conv.mask.begin(), conv.mask.begin() + best_len, mask + len);
      len += best_len;
      buffer_.erase(buffer_.begin() + best);
      consumed_ += world_;
    }
  }
  torch::Tensor all = torch::from_blob(rows.data(), {batch_size_, row_capacity_}, torch::kLong);
  torch::Tensor m = torch::from_blob(masks.data(), {batch_size_, row_capacity_}, torch::kUInt8);
  SftBatch out;
  out.inputs = all.slice(1, 0, row_capacity_ - 1).to(torch::kInt32);
  out.targets = all.slice(1, 1, row_capacity_).clone();
  out.targets.masked_fill_(m.slice(1, 1, row_capacity_) == 0, -1);
  for (int64_t b = 0; b < batch_size_; b++)
    if (content_len[b] < row_capacity_) out.targets[b].slice(0, std::max<int64_t>(content_len[b] - 1, 0)).fill_(-1);
  return out;
}

nlohmann::json sft_batcher_state_to_json(const SftBatcherState& s) {
  return {{"cursor", s.cursor}, {"consumed", s.consumed}, {"epoch", s.epoch}, {"buffer", s.buffer}};
}

SftBatcherState sft_batcher_state_from_json(const nlohmann::json& j, int64_t dataset_size, const std::string& where) {
  auto index = [&](const nlohmann::json& v, const char* what) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= dataset_size)
      fail("%s: SFT batcher %s %s is not an index of the %lld-conversation mixture (a different mixture?)",
           where.c_str(), what, v.dump().c_str(), (long long)dataset_size);
    return v.get<int64_t>();
  };
  if (!j.is_object() || !j.contains("cursor") || !j.contains("consumed") || !j.contains("epoch") ||
      !j.contains("buffer") || !j["buffer"].is_array() || !j["consumed"].is_number_integer() ||
      !j["epoch"].is_number_integer())
    fail("%s: malformed SFT batcher state (want cursor, consumed, epoch, buffer)", where.c_str());
  SftBatcherState s;
  s.cursor = index(j["cursor"], "cursor");
  s.consumed = j["consumed"].get<int64_t>();
  s.epoch = j["epoch"].get<int>();
  for (const nlohmann::json& v : j["buffer"]) s.buffer.push_back(index(v, "buffered conversation"));
  return s;
}

torch::Tensor sft_masked_mean(const torch::Tensor& losses, const torch::Tensor& targets) {
  torch::Tensor valid = targets.reshape({-1}) >= 0;
  return (losses.reshape({-1}) * valid).sum() / valid.sum().clamp_min(1);
}

}  // namespace nanochat
