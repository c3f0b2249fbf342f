// The loader's pipeline: reader thread -> tokenizer threads -> packer thread -> ring of host
// slots -> next() on the consumer's thread (see dataloader.h). One mutex guards all shared
// state; every wait also wakes on stop (destruction) and on a worker's error, so no thread
// blocks forever and an error reaches next() instead of hanging it.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <ATen/ops/empty.h>

#include "nanochat/common/log.h"
#include "nanochat/common/progress.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/common/utf8.h"
#include "nanochat/dataloader.h"
#include "nanochat/tokenizer.h"
#include "stager.h"

namespace nanochat {

// a batch of the document walk on its way through the tokenizer threads, in stream order
struct DocChunk {
  int64_t seq = 0;                           // position in the stream of chunks
  DocRef first;                              // the chunk's first document
  int raw_count = 0;                         // documents read from the row group (before cleaning)
  std::vector<std::string> docs;             // the text (emptied once tokenized)
  std::vector<int32_t> index;                // row-group index of each kept document
  std::vector<std::vector<int32_t>> tokens;  // [BOS] + ids of each kept document
};

struct HostSlot {
  torch::Tensor host;       // 2*B*T int64: inputs, then targets
  int64_t* data = nullptr;  // its memory, written by the packer thread
  LoaderState state;
};

struct DataLoader::Impl {
  const Tokenizer& tok;
  CorpusSplit split;
  LoaderOptions opts;
  DocRef start;
  bool exact_resume = false;
  LoaderState resume;
  int window = 0;  // chunks read ahead of the packer
  Timer clock;

  std::mutex mu;
  std::condition_variable cv_read, cv_tok, cv_done, cv_slot, cv_ready;
  bool stop = false, reader_done = false, finished = false, warned_utf8 = false;
  std::exception_ptr error;
  std::deque<DocChunk> raw;            // read, waiting for a tokenizer thread
  std::map<int64_t, DocChunk> done;    // tokenized, by sequence number
  int64_t consumed = 0, seq_end = -1;  // chunks taken by the packer; total once the reader ended
  std::vector<HostSlot> slots;
  std::deque<int> free_slots, ready;
  LoaderMetrics m;
  int64_t tokens_packed = 0, tokens_used = 0, tokens_cropped = 0;
  double packer_idle_s = 0;

  std::unique_ptr<DeviceStager> stager;
  int pending_slot = -1;  // handed out; its copy may still read it
  std::vector<std::thread> threads;

  Impl(const Tokenizer& t, CorpusSplit s, const LoaderOptions& o) : tok(t), split(std::move(s)), opts(o) {}

  void set_error(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!error) error = e;
    }
    notify_all();
  }
  void notify_all() {
    cv_read.notify_all();
    cv_tok.notify_all();
    cv_done.notify_all();
    cv_slot.notify_all();
    cv_ready.notify_all();
  }

  void reader_loop(DocIterator reader) {
    try {
      for (int64_t seq = 0;; seq++) {
        {
          std::unique_lock<std::mutex> lk(mu);
          cv_read.wait(lk, [&] { return stop || error || seq - consumed < window; });
          if (stop || error) return;
        }
        DocBatch b;
        bool more = reader.next(b);  // reads and decompresses outside the lock
        std::lock_guard<std::mutex> lk(mu);
        m.bad_row_groups = reader.bad_row_groups();
        if (!more) {
          reader_done = true;
          seq_end = seq;
          cv_tok.notify_all();
          cv_done.notify_all();
          return;
        }
        DocChunk c;
        c.seq = seq;
        c.first = DocRef{b.pos.epoch, b.pos.file, b.pos.row_group, b.first_doc};
        c.raw_count = (int)b.docs.size();
        c.docs = std::move(b.docs);
        raw.push_back(std::move(c));
        cv_tok.notify_one();
      }
    } catch (...) {
      set_error(std::current_exception());
    }
  }

  static int64_t count_chars(const std::string& s) {  // code points of (mostly) UTF-8 text
    int64_t n = 0;
    for (unsigned char b : s) n += (b & 0xC0) != 0x80;
    return n;
  }

  std::vector<int32_t> tokenize(const std::string& doc) const {
    std::vector<int32_t> ids = tok.encode(doc);
    ids.insert(ids.begin(), tok.bos_id());
    return ids;
  }

  void tokenizer_loop() {
    try {
      for (;;) {
        DocChunk c;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv_tok.wait(lk, [&] { return stop || error || !raw.empty() || reader_done; });
          if (stop || error || raw.empty()) return;
          c = std::move(raw.front());
          raw.pop_front();
        }
        int64_t n_short = 0, n_bad = 0;
        int32_t first_bad = -1;
        for (size_t i = 0; i < c.docs.size(); i++) {
          const std::string& doc = c.docs[i];
          if (opts.min_doc_chars > 0 && count_chars(doc) < opts.min_doc_chars) {
            n_short++;
            continue;
          }
          if (opts.drop_invalid_utf8 && !utf8_is_valid(doc)) {
            if (first_bad < 0) first_bad = c.first.doc + (int32_t)i;
            n_bad++;
            continue;
          }
          c.index.push_back(c.first.doc + (int32_t)i);
          c.tokens.push_back(tokenize(doc));
        }
        c.docs.clear();
        c.docs.shrink_to_fit();
        std::lock_guard<std::mutex> lk(mu);
        m.docs_tokenized += (int64_t)c.tokens.size();
        m.docs_short += n_short;
        m.docs_bad_utf8 += n_bad;
        if (n_bad && !warned_utf8) {
          warned_utf8 = true;
          log_warn(
              "dropping documents that are not valid UTF-8 (first: file %d, row group %d, document %d); "
              "the loader's metrics count them",
              c.first.file, c.first.row_group, first_bad);
        }
        done.emplace(c.seq, std::move(c));
        cv_done.notify_all();
      }
    } catch (...) {
      set_error(std::current_exception());
    }
  }

  // the buffer of a saved state: its documents re-read and re-tokenized, in buffer order
  void restore_buffer(BestFitPacker& packer) {
    DocIterator rr(split, opts.rank, opts.world, false, DocPosition{0, opts.rank, 1}, 0, false, 1);
    const auto& refs = resume.buffered;
    for (size_t i = 0; i < refs.size();) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (stop) return;
      }
      std::vector<std::string> docs = rr.read(refs[i].file, refs[i].row_group);
      size_t k = i;
      for (; k < refs.size() && refs[k].file == refs[i].file && refs[k].row_group == refs[i].row_group &&
             refs[k].epoch == refs[i].epoch;
           k++) {
        if (refs[k].doc >= (int32_t)docs.size())
          fail("dataloader state: file %d, row group %d has no document %d; the data changed since it was saved",
               refs[k].file, refs[k].row_group, refs[k].doc);
        packer.push(tokenize(docs[(size_t)refs[k].doc]), refs[k]);
      }
      i = k;
    }
  }

  void packer_loop() {
    try {
      BestFitPacker packer(opts.batch_size, opts.seq_len, opts.buffer_size);
      DocRef next_ref = start;
      DocPosition last = exact_resume ? resume.last : DocPosition{start.file, start.row_group, start.epoch};
      if (exact_resume) restore_buffer(packer);
      int64_t seq = 0;
      auto refill = [&](BestFitPacker& p) {
        DocChunk c;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv_done.wait(lk, [&] { return stop || error || done.count(seq) || (reader_done && seq >= seq_end); });
          if (stop || error || !done.count(seq)) return false;
          auto it = done.find(seq);
          c = std::move(it->second);
          done.erase(it);
          consumed = ++seq;
        }
        cv_read.notify_one();
        for (size_t i = 0; i < c.tokens.size(); i++)
          p.push(std::move(c.tokens[i]), DocRef{c.first.epoch, c.first.file, c.first.row_group, c.index[i]});
        next_ref = c.first;
        next_ref.doc += c.raw_count;
        last = DocPosition{c.first.file, c.first.row_group, c.first.epoch};
        return true;
      };
      const int64_t B = opts.batch_size, T = opts.seq_len;
      std::vector<int32_t> rows;
      for (;;) {
        int s;
        {
          std::unique_lock<std::mutex> lk(mu);
          Timer idle;  // a full ring: the consumer is the bottleneck, not counted as producing
          cv_slot.wait(lk, [&] { return stop || error || !free_slots.empty(); });
          packer_idle_s += idle.seconds();
          if (stop || error) return;
          s = free_slots.front();
          free_slots.pop_front();
        }
        bool ok = packer.next_batch(refill, rows);
        {
          std::lock_guard<std::mutex> lk(mu);
          if (stop || error) return;
          if (!ok) {
            finished = true;
            cv_ready.notify_all();
            return;
          }
        }
        // the slot is the packer's until it is published below: written without the lock.
        // inputs = rows[:, :-1], targets = rows[:, 1:], as int64 side by side in the slot
        int64_t* in = slots[(size_t)s].data;
        int64_t* tg = in + B * T;
        for (int64_t r = 0; r < B; r++) {
          const int32_t* row = rows.data() + r * (T + 1);
          for (int64_t t = 0; t < T; t++) {
            in[r * T + t] = row[t];
            tg[r * T + t] = row[t + 1];
          }
        }
        LoaderState& st = slots[(size_t)s].state;
        st.next = next_ref;
        st.buffered = packer.buffered_refs();
        st.last = last;
        st.rank = opts.rank;
        st.world = opts.world;
        st.exact = true;
        std::lock_guard<std::mutex> lk(mu);
        tokens_packed += B * T;
        tokens_used = packer.tokens_used();
        tokens_cropped = packer.tokens_cropped();
        ready.push_back(s);
        cv_ready.notify_one();
      }
    } catch (...) {
      set_error(std::current_exception());
    }
  }
};

DataLoader::DataLoader(const Tokenizer& tok, CorpusSplit split, const LoaderOptions& opts, const LoaderState* resume)
    : opts_(opts), impl_(std::make_unique<Impl>(tok, std::move(split), opts)) {
  Impl& I = *impl_;
  if (opts.batch_size < 1 || opts.seq_len < 1 || opts.buffer_size < 1 || opts.prefetch < 1 ||
      opts.tokenizer_batch_size < 1 || opts.local_world < 1 || opts.tokenizer_threads < 0)
    fail("dataloader: batch size, sequence length, buffer size, prefetch and tokenizer batch size must be >= 1");
  int threads = opts.tokenizer_threads > 0 ? opts.tokenizer_threads
                                           : std::max(1, default_thread_count() / opts.local_world - 1);
  I.window = 2 * threads + 4;
  I.opts.tokenizer_threads = opts_.tokenizer_threads = threads;
  const int rank = opts.rank, world = opts.world;
  I.start = DocRef{1, 0, rank, 0};
  if (resume) {
    if (resume->exact && resume->rank == rank && resume->world == world) {
      I.start = resume->next;
      I.exact_resume = true;
      I.resume = *resume;
    } else {
      if (resume->exact)
        log_warn(
            "dataloader state was saved by rank %d of %d, this is rank %d of %d: resuming at the next row "
            "group (upstream's rule); the documents that were in its buffer are skipped",
            resume->rank, resume->world, rank, world);
      // upstream's rule: the next row group of this rank after the saved one, in the saved file
      I.start = DocRef{resume->last.epoch, resume->last.file, (resume->last.row_group / world + 1) * world + rank, 0};
    }
  }
  // validates rank, start and split before any thread starts
  if (opts.tokenizer_batch_size < 1)
    fail("dataloader: tokenizer batch size must be at least 1, not %d", opts.tokenizer_batch_size);
  DocIterator reader(I.split, rank, world, opts.infinite, DocPosition{I.start.file, I.start.row_group, I.start.epoch},
                     I.start.doc, resume == nullptr, opts.tokenizer_batch_size);
  reader.set_skip_bad_row_groups(opts.skip_bad_row_groups);

  bool pin = opts.device.is_cuda();
  I.slots.resize((size_t)opts.prefetch + 1);
  for (size_t s = 0; s < I.slots.size(); s++) {
    I.slots[s].host = at::empty({2 * opts.batch_size * opts.seq_len},
                                torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin));
    I.slots[s].data = I.slots[s].host.data_ptr<int64_t>();
    I.free_slots.push_back((int)s);
  }
  I.stager = std::make_unique<DeviceStager>(opts.device, opts.batch_size, opts.seq_len);

  I.threads.emplace_back([&I, reader = std::move(reader)]() mutable { I.reader_loop(std::move(reader)); });
  for (int t = 0; t < threads; t++) I.threads.emplace_back([&I] { I.tokenizer_loop(); });
  I.threads.emplace_back([&I] { I.packer_loop(); });
}

DataLoader::~DataLoader() {
  Impl& I = *impl_;
  {
    std::lock_guard<std::mutex> lk(I.mu);
    I.stop = true;
  }
  I.notify_all();
  for (auto& t : I.threads) t.join();
  I.stager.reset();  // waits for a copy in flight before the host slots go
  if (I.m.docs_short || I.m.docs_bad_utf8 || I.m.bad_row_groups)
    log_info("dataloader: dropped %lld short and %lld invalid-UTF-8 documents, skipped %lld bad row groups",
             (long long)I.m.docs_short, (long long)I.m.docs_bad_utf8, (long long)I.m.bad_row_groups);
}

bool DataLoader::next(LoaderBatch& out) {
  Impl& I = *impl_;
  if (I.pending_slot >= 0) {  // the previous batch's host slot, once its copy has read it
    I.stager->wait_host();
    std::lock_guard<std::mutex> lk(I.mu);
    I.free_slots.push_back(I.pending_slot);
    I.pending_slot = -1;
    I.cv_slot.notify_one();
  }
  Timer wait;
  int s;
  {
    std::unique_lock<std::mutex> lk(I.mu);
    I.cv_ready.wait(lk, [&] { return !I.ready.empty() || I.error || I.finished; });
    I.m.wait_last_s = wait.seconds();
    I.m.wait_total_s += I.m.wait_last_s;
    if (I.ready.empty()) {
      if (I.error) std::rethrow_exception(I.error);
      return false;
    }
    s = I.ready.front();
    I.ready.pop_front();
    I.m.batches++;
  }
  // the packer does not touch a slot between handing it over and getting it back
  HostSlot& slot = I.slots[(size_t)s];
  std::tie(out.inputs, out.targets) = I.stager->stage(slot.host);
  out.state = std::move(slot.state);
  I.pending_slot = s;
  return true;
}

LoaderBatch DataLoader::next() {
  LoaderBatch b;
  if (!next(b)) fail("dataloader: the pass over the data has ended");
  return b;
}

LoaderMetrics DataLoader::metrics() const {
  Impl& I = *impl_;
  std::lock_guard<std::mutex> lk(I.mu);
  LoaderMetrics m = I.m;
  m.ready = (int)I.ready.size();
  double elapsed = I.clock.seconds() - I.packer_idle_s;
  m.tokens_per_s = elapsed > 0 ? (double)I.tokens_packed / elapsed : 0;
  int64_t taken = I.tokens_used + I.tokens_cropped;
  m.cropped_fraction = taken > 0 ? (double)I.tokens_cropped / (double)taken : 0;
  return m;
}

}  // namespace nanochat
