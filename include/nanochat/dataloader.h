// The dataloader module (upstream's nanochat/dataloader.py): BOS-aligned best-fit packing fed by
// reader, tokenizer and packer threads that run ahead of the model, and batches that resume
// exactly. The pipeline and the resume rule: docs/architecture.md ("The dataloader's pipeline").
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "nanochat/common/tensor.h"

#include "nanochat/dataset.h"

namespace nanochat {

class Tokenizer;

// where one document sits in the stream of a rank: its row group and its index there
struct DocRef {
  int32_t epoch = 1, file = 0, row_group = 0, doc = 0;
};
inline bool operator==(const DocRef& a, const DocRef& b) {
  return a.epoch == b.epoch && a.file == b.file && a.row_group == b.row_group && a.doc == b.doc;
}

class BestFitPacker {
 public:
  // refill pushes tokenized documents (upstream: 128 at a time) and returns false when the
  // data has ended
  using Refill = std::function<bool(BestFitPacker& packer)>;
  BestFitPacker(int64_t batch_size, int64_t seq_len, size_t buffer_size = 1000);

  // appends one document (starting with BOS) to the buffer; ref says where it came from
  void push(std::vector<int32_t> tokens, DocRef ref = DocRef());
  // fills rows (batch_size x (seq_len + 1), row-major) and returns true; false when the data
  // ran out before the batch was full
  bool next_batch(const Refill& refill, std::vector<int32_t>& rows);

  int64_t tokens_used() const { return tokens_used_; }        // copied into rows
  int64_t tokens_cropped() const { return tokens_cropped_; }  // tails thrown away
  size_t buffered() const { return buffer_.size(); }
  const std::vector<DocRef>& buffered_refs() const { return refs_; }  // in buffer order

 private:
  int64_t batch_size_, row_capacity_;
  size_t buffer_size_;
  std::vector<std::vector<int32_t>> buffer_;
  std::vector<DocRef> refs_;  // parallel to buffer_
  int64_t tokens_used_ = 0, tokens_cropped_ = 0;
};

// ---- the loader -------------------------------------------------------------------------
struct LoaderOptions {
  int64_t batch_size = 32;  // B, rows per batch (per rank)
  int64_t seq_len = 2048;   // T
  torch::Device device = torch::kCPU;
  int rank = 0, world = 1;           // row groups rank, rank+world, ... of every file
  bool infinite = true;              // epochs forever (train, and val for bpb like upstream); else one pass
  int tokenizer_threads = 0;         // 0: all but one core of this rank: cores / local_world - 1, min 1
  int local_world = 1;               // ranks on this machine (for the default above)
  int prefetch = 2;                  // K: batches staged ahead (the host ring has K + 1 slots)
  size_t buffer_size = 1000;         // documents in the best-fit buffer (upstream)
  int tokenizer_batch_size = 128;    // documents per chunk (upstream's refill size)
  int64_t min_doc_chars = 0;         // cleaning: drop shorter documents (bytes); 0: keep all
  bool drop_invalid_utf8 = true;     // cleaning: drop rows that are not valid UTF-8 (counted)
  bool skip_bad_row_groups = false;  // a row group that fails to decode: warn and skip it
};

struct LoaderState {
  DocRef next;                   // the first document of the stream not read yet
  std::vector<DocRef> buffered;  // the documents in the packer's buffer, in buffer order
  DocPosition last;              // upstream's pq_idx, rg_idx, epoch (last chunk fetched)
  int rank = 0, world = 1;       // whose stream this is
  bool exact = true;             // false: only upstream's fields (resume at row-group granularity)
};
// {"pq_idx", "rg_idx", "epoch", "rank", "world", "next": {...}, "buffer": [[epoch, file,
// row_group, [[begin, end), ...]], ...]} (the buffer compacted as runs of document indices)
nlohmann::json loader_state_to_json(const LoaderState& s);
// also accepts upstream's {"pq_idx", "rg_idx", "epoch"} (exact = false); Error on bad fields
LoaderState loader_state_from_json(const nlohmann::json& j);
// upstream's {"pq_idx", "rg_idx", "epoch"} of a state (the start when there is none), which a
// checkpoint's meta records as dataloader_state_dict
nlohmann::ordered_json loader_state_upstream_json(const std::optional<LoaderState>& state);
// a rank's state from a checkpoint: its exact state from its optimizer JSON ("dataloader_state")
// when present, else upstream's fields from the meta (row-group resume); nullopt when the run
// had not consumed a batch
std::optional<LoaderState> loader_state_from_checkpoint(const nlohmann::ordered_json& meta,
                                                        const nlohmann::ordered_json& rank_state);

// inputs and targets are (B, T) int64 views of a persistent device buffer that the loader
// overwrites two next() calls later (double buffered): use a batch within the step that
// fetched it, as upstream's training loop does, or clone it.
struct LoaderBatch {
  torch::Tensor inputs, targets;
  LoaderState state;  // resuming from it reproduces the batch after this one
};

struct LoaderMetrics {
  int ready = 0;                // batches staged and waiting for next()
  int64_t batches = 0;          // handed out by next()
  double wait_total_s = 0;      // time next() spent waiting for a batch ("data-wait")
  double wait_last_s = 0;       // ... in the last call
  double tokens_per_s = 0;      // batch tokens (B*T) packed per second of the loader's life,
                                // not counting time the packer waited for a free slot (what
                                // the workers can produce, not what the consumer took)
  double cropped_fraction = 0;  // tokens cropped away / tokens taken from documents
  int64_t docs_tokenized = 0;
  int64_t docs_short = 0, docs_bad_utf8 = 0;  // dropped by cleaning
  int64_t bad_row_groups = 0;                 // skipped (skip_bad_row_groups)
};

class DataLoader {
 public:
  // tok must outlive the loader. resume: a state from a batch of this rank's stream (exact),
  // or upstream's fields (next row group after the saved one, upstream's rule). Errors about the data
  // itself (an unreadable row group, no documents) are thrown from next().
  DataLoader(const Tokenizer& tok, CorpusSplit split, const LoaderOptions& opts, const LoaderState* resume = nullptr);
  ~DataLoader();  // stops and joins all threads promptly, even mid-epoch
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  bool next(LoaderBatch& out);  // false at the end of a finite pass
  LoaderBatch next();           // Error at the end of a finite pass
  LoaderMetrics metrics() const;
  const LoaderOptions& options() const { return opts_; }

  struct Impl;

 private:
  LoaderOptions opts_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nanochat
