// The data of supervised fine-tuning (the sft subcommand): the base model learns the chat
// format, the calculator tool and to answer, on a shuffled mixture of conversations.
// SftBatcher is upstream's sft_data_generator_bos_bestfit: each rank walks the mixture with stride W, conversations
// are rendered with their loss masks and packed best-fit into rows of T+1 tokens; when
// nothing fits, the row is padded with BOS (masked) instead of cropping a conversation.
// Its state (cursor, counts, the dataset indices in the buffer) makes a resumed run pack
// the very same rows.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "nanochat/common/tensor.h"

#include "nanochat/tasks.h"

namespace nanochat {

class Tokenizer;

struct SftBatch {
  torch::Tensor inputs;   // (B, T) int32
  torch::Tensor targets;  // (B, T) int64, -1 where the loss is masked (and on padding)
};

// where a rank's walk stands: the next conversation to render, the counts, and the
// conversations rendered but not yet placed (by dataset index, in buffer order)
struct SftBatcherState {
  int64_t cursor = 0, consumed = 0;
  int epoch = 1;
  std::vector<int64_t> buffer;
};

class SftBatcher {
 public:
  // resume: continue from a state() of a batcher over the same dataset and shape
  SftBatcher(const Tokenizer& tok, TaskPtr dataset, int64_t batch_size, int64_t seq_len, int rank, int world,
             size_t buffer_size = 100, const SftBatcherState* resume = nullptr);
  SftBatch next();                // on the CPU; the caller moves it to the device
  SftBatcherState state() const;  // the state that makes the next next() reproducible

  int64_t consumed() const { return consumed_; }  // conversations placed, over all ranks (upstream's count)
  int64_t size() const { return dataset_->size(); }
  int epoch() const { return epoch_; }

 private:
  struct Rendered {
    int64_t index;  // in the dataset
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
  };
  void refill();
  Rendered render(int64_t index) const;
  const Tokenizer& tok_;
  TaskPtr dataset_;
  int64_t batch_size_, row_capacity_;
  int world_;
  size_t buffer_size_;
  int64_t cursor_, consumed_;
  int epoch_ = 1;
  std::deque<Rendered> buffer_;
};

nlohmann::json sft_batcher_state_to_json(const SftBatcherState& s);
// fails with one line naming `where` when a field is missing or out of range for `dataset_size`
SftBatcherState sft_batcher_state_from_json(const nlohmann::json& j, int64_t dataset_size, const std::string& where);

// the mean of per-token losses (B*T,) over the targets that are not -1; 0 rather than NaN
// when every target of the batch is masked (where upstream divided by zero)
torch::Tensor sft_masked_mean(const torch::Tensor& losses, const torch::Tensor& targets);

// the train or val conversations of a mixture: "chat" is upstream's SmolTalk + MMLU + GSM8K
// (tasks_sft_mixture, after `nanochat download tasks`); "spelling" the historical
// SimpleSpelling + SpellingBee (+ identity), which need no download (their words: the
// downloaded list, else wamerican, else the tokenizer's whole words: spelling_load_words)
TaskPtr sft_mixture(const std::string& mixture, const std::string& split, const SftMixtureOptions& mix);

}  // namespace nanochat
