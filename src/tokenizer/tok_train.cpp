// tok-train's driver (upstream's scripts/tok_train.py): documents from a source (the train split), each cropped to doc_cap
// characters, until just past max_chars characters; counted in buffers of 8192 documents
// (memory holds one buffer plus the unique pieces), then merged.
#include <algorithm>

#include "nanochat/common/error.h"
#include "nanochat/common/progress.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

// the first `cap` characters (code points, as Python's doc[:cap]) and how many there were
static std::string_view crop_chars(std::string_view doc, int64_t cap, int64_t& chars) {
  chars = 0;
  for (size_t i = 0; i < doc.size(); i++) {
    if (((unsigned char)doc[i] & 0xC0) == 0x80) continue;  // continuation byte
    if (chars == cap) return doc.substr(0, i);
    chars++;
  }
  return doc;
}

Tokenizer tok_train(const DocBatchSource& next_docs, const TokTrainOptions& opts, ThreadPool& pool,
                    TokTrainStats* stats) {
  const int32_t n_special = (int32_t)kSpecialTokens.size();
  if (opts.vocab_size < 256 + n_special)
    fail("--vocab-size %d is below 256 byte tokens + %d special tokens", opts.vocab_size, n_special);
  Timer timer;
  BpeTrainer trainer(kPatternNanochat, pool);
  Progress progress("counting", opts.max_chars, "chars");
  int64_t total_chars = 0, total_docs = 0;
  std::vector<std::string> buffer;
  std::vector<std::string> batch;
  bool done = false;
  while (!done && next_docs(batch)) {
    for (auto& doc : batch) {
      int64_t chars;
      buffer.emplace_back(crop_chars(doc, opts.doc_cap, chars));
      total_chars += chars;
      total_docs++;
      if (total_chars > opts.max_chars) {  // stop after the document that crossed the limit
        done = true;
        break;
      }
    }
    if (buffer.size() >= 8192 || done) {
      trainer.add_texts(buffer);
      buffer.clear();
      progress.set(std::min(total_chars, opts.max_chars));
    }
  }
  if (!buffer.empty()) trainer.add_texts(buffer);
  progress.set(std::min(total_chars, opts.max_chars));
  progress.finish();
  if (total_docs == 0) fail("the training split has no documents");
  double count_seconds = timer.seconds();
  std::vector<std::string> ranks = trainer.train(opts.vocab_size - n_special, true);
  std::vector<std::pair<std::string, int32_t>> specials;
  for (int32_t i = 0; i < n_special; i++) specials.emplace_back(kSpecialTokens[i], (int32_t)ranks.size() + i);
  if (stats) *stats = {total_chars, total_docs, trainer.unique_pieces(), count_seconds, timer.seconds()};
  return Tokenizer(std::move(ranks), kPatternNanochat, specials, "<|bos|>");
}

}  // namespace nanochat
