// The dataset module (upstream's nanochat/dataset.py and dataloader.py's document walk): where the pretraining shards come from and how they
// are fetched (resume, retry, verify, lock), local corpora (--data DIR of parquet, jsonl or
// txt files), and the rank-strided, resumable walk over their documents. No torch in here.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/common/error.h"

namespace nanochat {

// ---- ClimbMix shards (upstream's dataset.py) --------------------------------------------------------
constexpr const char* kClimbmixBaseUrl = "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main";
constexpr int kClimbmixMaxShard = 6542;  // shards 00000..06542; the last one is always val

std::string climbmix_shard_name(int index);  // "shard_00042.parquet"
std::string climbmix_shard_url(const std::string& base_url, int index);
// the shards `download -n num_files` fetches: 0..min(n, 6542)-1 plus 6542 (n < 0: all)
std::vector<int> climbmix_shard_ids(int num_files);

// $BASE/base_data_climbmix, or the legacy $BASE/base_data (FineWeb-EDU) when only that one
// exists, with a warning (rank 0)
std::string dataset_dir();
// sorted *.parquet of a directory (never the *.tmp of a download in progress)
std::vector<std::string> dataset_list_parquet_files(const std::string& dir);

// ---- downloading one file: resume, verify, lock, retry ----------------------------------
struct DownloadError : Error {
  DownloadError(const std::string& what, bool unreachable) : Error(what), unreachable(unreachable) {}
  bool unreachable;  // the host could not be reached at all (offline, DNS, refused)
};

struct DownloadOptions {
  int max_attempts = 5;             // like upstream
  double retry_base_seconds = 2.0;  // waits 2, 4, 8, 16 s between the 5 attempts
  int connect_timeout_seconds = 30;
  int read_timeout_seconds = 30;  // a stalled transfer gives up after this
  int max_redirects = 10;
  // a file larger than this is refused (said size or bytes received) and its .tmp removed:
  // a broken or hostile server cannot fill the disk (the shards are ~100 MB). 0: no limit.
  int64_t max_file_bytes = int64_t(8) << 30;
  // checks the complete temp file before it takes the final name; throws Error when bad
  std::function<void(const std::string& tmp_path)> verify;
  // progress: bytes added to the file (negative when a partial file is thrown away), and
  // the file's full size once the server has said it. Called from the downloading thread.
  std::function<void(int64_t delta)> on_bytes;
  std::function<void(int64_t total)> on_total;
  const std::atomic<bool>* cancel = nullptr;  // true -> give up at the next chunk or attempt
};

enum class DownloadOutcome { downloaded, already_present };

// url -> path. Skips when path exists. Otherwise takes "<path>.lock" (flock: other processes
// and threads wait, then find the file and skip it), continues a partial "<path>.tmp" with an
// HTTP Range request if the server's file is still the one it began (If-Range with the ETag
// or Last-Modified saved in "<path>.tmp.validator"; else it starts over), checks the size
// against Content-Length / Content-Range and opts.max_file_bytes, runs opts.verify, and
// renames into place. Retries with exponential backoff; a host that cannot
// be reached fails at once. Throws DownloadError (one line: url, what, what to do).
DownloadOutcome download_file(const std::string& url, const std::string& path,
                              const DownloadOptions& opts = DownloadOptions());
// the verifier for parquet files: the footer must parse (ParquetFile)
void download_verify_parquet(const std::string& tmp_path);

// One progress line in MB for all of a download's threads. The total is each file's size
// once its server said it, plus the mean of those for the files not started yet, so the
// ETA exists early.
class DownloadMeter {
 public:
  explicit DownloadMeter(int files);
  ~DownloadMeter();
  void add_bytes(int64_t delta);  // DownloadOptions::on_bytes
  void add_total(int64_t total);  // DownloadOptions::on_total, once per file
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `nanochat download climbmix`: the shards climbmix_shard_ids(num_files) from base_url into
// $BASE/base_data_climbmix, `workers` at once, each through download_file with `opts`'s
// retry and timeouts. Several ranks (launch, torchrun, srun) share the list: each starts at
// its own offset so they fetch different shards at once; the file locks keep any shard to
// one download. Errors are gathered: an unreachable host or an error not about one shard
// stops all workers and is said once; failed shards are counted and the first one named.
void download_climbmix_shards(int num_files, const std::string& base_url, int workers, const DownloadOptions& opts);

// ---- local corpora (--data DIR) ---------------------------------------------------------
struct CorpusOptions {
  std::string data_dir;              // "" -> the ClimbMix shards (dataset_dir())
  std::string text_column = "text";  // parquet column or jsonl field holding the document
  std::string txt_split = "file";    // .txt: "file" (one document per file) or "paragraphs"
  int docs_per_group = 1024;         // documents per "row group" of jsonl/txt sources
};

// One source of documents, read one row group at a time (parquet: its row groups; jsonl,
// txt paragraphs: chunks of docs_per_group documents; txt files: docs_per_group files).
class DocSource {
 public:
  virtual ~DocSource() = default;
  virtual int num_row_groups() const = 0;
  virtual std::vector<std::string> read_row_group(int index) const = 0;
  virtual std::string name() const = 0;  // for messages: the path
};

// opens one file by its extension (.parquet, .jsonl, .txt); Error on a bad file
std::unique_ptr<DocSource> doc_source_open(const std::string& path, const CorpusOptions& opts);

struct Corpus {
  CorpusOptions opts;
  std::string dir;
  std::string kind;                // "parquet", "jsonl" or "txt"
  std::vector<std::string> files;  // sorted; the last one is val
};
// lists and checks a corpus directory (one kind of file); Error when empty, mixed, or a
// flag does not fit
Corpus corpus_open(const CorpusOptions& opts);
// "train": all files but the last; "val": the last one (upstream's split)
std::vector<std::string> corpus_split_files(const Corpus& corpus, const std::string& split);
// the sources of a split, each opened on demand (a .txt corpus split by file is one source)
struct CorpusSplit {
  int num_sources = 0;
  std::function<std::unique_ptr<DocSource>(int index)> open;
};
CorpusSplit corpus_split(const Corpus& corpus, const std::string& split);

// ---- iteration --------------------------------------------------------
struct DocPosition {
  int file = 0;       // source index within the split
  int row_group = 0;  // row group within the file
  int epoch = 1;      // 1 on the first pass
};
inline bool operator==(const DocPosition& a, const DocPosition& b) {
  return a.file == b.file && a.row_group == b.row_group && a.epoch == b.epoch;
}

struct DocBatch {
  std::vector<std::string> docs;
  DocPosition pos;    // the row group they came from
  int first_doc = 0;  // the index of docs[0] in that row group
};

// The one walk over a split's documents (tok-train, tok-eval and the dataloader), as
// upstream's dataloader.py: rank r of W passes start = r, step = W and reads row groups r,
// r+W, r+2W, ... of every file, file after file. infinite: epochs forever (training); else
// one pass. resume: the position saved with a checkpoint; the walk continues with the next
// row group of this rank after it (upstream's rule: row (resume.row_group / W + 1) * W + r
// of resume.file, moving on when past its end), in the same epoch. batch_size > 0 splits
// row groups into batches of at most that many documents, all tagged with the row group's
// position.
class DocIterator {
 public:
  DocIterator(CorpusSplit split, int start, int step, bool infinite, const DocPosition* resume = nullptr,
              int batch_size = 0);
  // the loader's exact resume: from document `doc` of row group `at` (one of this rank's).
  // full_pass: `at` begins a pass, so a pass without any document is an error (a rank with
  // no row groups) instead of a hang.
  DocIterator(CorpusSplit split, int start, int step, bool infinite, DocPosition at, int doc, bool full_pass,
              int batch_size);
  bool next(DocBatch& out);                       // false at the end of a finite pass
  DocPosition position() const { return last_; }  // of the last batch returned
  // on: a row group that fails to decode is warned about, counted and skipped (else Error)
  void set_skip_bad_row_groups(bool on) { skip_bad_ = on; }
  int64_t bad_row_groups() const { return bad_row_groups_; }
  // one whole row group (to re-read the documents of a saved buffer); Error names it
  std::vector<std::string> read(int file, int row_group);

 private:
  DocSource& source(int file);
  std::vector<std::string> read_checked(DocSource& src, int row_group);
  bool advance();  // loads the next row group into pending_
  CorpusSplit split_;
  int start_, step_, batch_size_;
  bool infinite_, skip_bad_ = false;
  int file_ = 0, row_group_ = 0, epoch_ = 1, skip_docs_ = 0;
  std::unique_ptr<DocSource> source_;
  int source_index_ = -1;
  bool pass_had_data_ = false, full_pass_ = true;
  std::vector<std::string> pending_;
  size_t pending_at_ = 0;
  DocPosition pending_pos_, last_;
  int64_t bad_row_groups_ = 0;
};

}  // namespace nanochat
