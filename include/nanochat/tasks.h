// The chat tasks of upstream's tasks/: datasets of conversations (JSON {"messages": [...]}, the
// format render_conversation takes), views over them, mixtures for SFT, and for evaluation
// the task's kind (generative: sample and check; categorical: pick a letter) and its
// evaluate(conversation, completion). Hub datasets come through the parquet listing API into
// $NANOCHAT_BASE_DIR/task_data/ and are shuffled like upstream (NumPy's default_rng(42)).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/dataset.h"

namespace nanochat {

// ---- framework (tasks/common.py) ---------------------------------------------------------------
struct TaskSlice {  // a lazy view: example i is get_example(start + i*step)
  int64_t start = 0;
  int64_t stop = -1;  // -1: num_examples(); a stop past the end is clamped to it
  int64_t step = 1;
};

class Task {
 public:
  explicit Task(TaskSlice slice = TaskSlice());
  virtual ~Task() = default;
  virtual std::string name() const = 0;  // "ARC-Easy", "MMLU", "GSM8K", ...
  // "generative" | "categorical"; "" for training-only tasks (SmolTalk, CustomJSON, mixtures)
  virtual std::string eval_type() const { return ""; }
  virtual int64_t num_examples() const = 0;
  virtual nlohmann::json get_example(int64_t index) const = 0;
  // 1 when the completion is right, else 0; Error for tasks without an evaluation
  virtual int evaluate(const nlohmann::json& conversation, const std::string& completion) const;
  double reward(const nlohmann::json& conversation, const std::string& completion) const {
    return (double)evaluate(conversation, completion);
  }
  int64_t size() const;                // ceil((min(stop, num_examples()) - start) / step)
  nlohmann::json at(int64_t i) const;  // get_example(start + i*step); Error when out of range
  const TaskSlice& slice() const { return slice_; }

 private:
  TaskSlice slice_;
};
using TaskPtr = std::shared_ptr<const Task>;

// the order a mixture visits its n examples: p[i] = the original index at position i.
// Upstream: random.Random(42).shuffle(index_map), which is data-independent, so it equals
// shuffling range(n).
using PermutationFn = std::function<std::vector<int64_t>(int64_t n)>;
// random.Random(seed).shuffle(list(range(n))) (py_random.h, CPython's generator)
std::vector<int64_t> tasks_py_shuffled_range(uint64_t seed, int64_t n);

// all examples of all tasks, shuffled once (a task listed twice is seen twice)
class TaskMixture : public Task {
 public:
  explicit TaskMixture(std::vector<TaskPtr> tasks, TaskSlice slice = TaskSlice(),
                       PermutationFn permutation = PermutationFn());  // empty: Random(42)
  std::string name() const override { return "TaskMixture"; }
  int64_t num_examples() const override { return (int64_t)index_map_.size(); }
  nlohmann::json get_example(int64_t index) const override;
  const std::vector<TaskPtr>& tasks() const { return tasks_; }
  std::pair<int, int64_t> locate(int64_t index) const;  // (task index, index within it)

 private:
  std::vector<TaskPtr> tasks_;
  std::vector<std::pair<int32_t, int64_t>> index_map_;
};

// the tasks one after the other, no shuffle (curricula)
class TaskSequence : public Task {
 public:
  explicit TaskSequence(std::vector<TaskPtr> tasks, TaskSlice slice = TaskSlice());
  std::string name() const override { return "TaskSequence"; }
  int64_t num_examples() const override { return total_; }
  nlohmann::json get_example(int64_t index) const override;

 private:
  std::vector<TaskPtr> tasks_;
  int64_t total_ = 0;
};

// "Multiple Choice question: {q}\n- {choice}={letter}\n...\nRespond only with the letter of
// the correct answer." (no space before the letter: "A" is then the same token as the answer)
std::string render_mc(const std::string& question, const std::vector<std::string>& letters,
                      const std::vector<std::string>& choices);

// ---- hub datasets (upstream's load_dataset, here through the parquet listing API) --------------------------------------
struct HubSplit {
  std::string repo_id, subset, split;  // e.g. "allenai/ai2_arc", "ARC-Easy", "test"
};
// $HF_ENDPOINT (a mirror, or a test server) or https://huggingface.co
std::string hub_endpoint();
// $BASE/task_data/{repo_id with / -> --}/{subset}/{split}
std::string hub_split_dir(const HubSplit& s);
// GET {endpoint}/api/datasets/{repo}/parquet/{subset}/{split} (a JSON list of shard URLs),
// each shard to {dir}/{i:05d}.parquet through download_file (resume, verify, retry), then
// manifest.json (the file names) written last, all under manifest.json.lock so one rank
// downloads while the others wait. Nothing to do when manifest.json exists. Returns the
// shard paths.
std::vector<std::string> hub_download(const HubSplit& s, const DownloadOptions& opts = DownloadOptions());

// the rows of one split, in memory as compact JSON (nested columns assembled), with
// upstream's shuffle: row i is the permutation's i-th physical row
class HubDataset {
 public:
  static HubDataset load(const HubSplit& s);  // hub_download first when needed
  static HubDataset from_parquet(const std::vector<std::string>& paths);
  void shuffle(uint64_t seed);  // np.random.default_rng(seed).permutation(n)
  int64_t size() const { return (int64_t)rows_.size(); }
  nlohmann::json row(int64_t i) const;

 private:
  std::vector<std::string> rows_;
  std::vector<int64_t> perm_;
};

// every split the tasks of SFT and chat-eval read (what `nanochat download tasks` fetches)
extern const std::vector<HubSplit> kTaskDataSplits;

// ---- the tasks (tasks/*.py) ------------------------------------------------------------------
// ARC: subset "ARC-Easy" | "ARC-Challenge", split train|validation|test. Categorical.
class ArcTask : public Task {
 public:
  ArcTask(std::string subset, std::string split, TaskSlice slice = TaskSlice());
  std::string name() const override { return subset_; }
  std::string eval_type() const override { return "categorical"; }
  int64_t num_examples() const override { return ds_.size(); }
  nlohmann::json get_example(int64_t index) const override;
  int evaluate(const nlohmann::json& conversation, const std::string& completion) const override;

 private:
  std::string subset_;
  HubDataset ds_;
};

// MMLU: subset "all" (splits auxiliary_train|validation|dev|test) or "auxiliary_train"
// (split train; rows wrapped in a "train" struct). Letters A-D. Categorical.
class MmluTask : public Task {
 public:
  MmluTask(std::string subset, std::string split, TaskSlice slice = TaskSlice());
  std::string name() const override { return "MMLU"; }
  std::string eval_type() const override { return "categorical"; }
  int64_t num_examples() const override { return ds_.size(); }
  nlohmann::json get_example(int64_t index) const override;
  int evaluate(const nlohmann::json& conversation, const std::string& completion) const override;
  static const std::vector<std::string>& subject_groups();  // the 57 subjects

 private:
  HubDataset ds_;
};

// GSM8K: subset main|socratic, split train|test. Generative; the answer follows "#### ".
class Gsm8kTask : public Task {
 public:
  Gsm8kTask(std::string subset, std::string split, TaskSlice slice = TaskSlice());
  std::string name() const override { return "GSM8K"; }
  std::string eval_type() const override { return "generative"; }
  int64_t num_examples() const override { return ds_.size(); }
  nlohmann::json get_example(int64_t index) const override;
  int evaluate(const nlohmann::json& conversation, const std::string& completion) const override;

 private:
  HubDataset ds_;
};
// re.search(r"#### (\-?[0-9\.\,]+)") -> group 1 without ","; false when there is none
bool gsm8k_extract_answer(const std::string& text, std::string* answer);
// the solution string as assistant parts: <<expr=result>> -> python + python_output parts,
// the rest -> text parts (empty ones kept), exactly re.split(r'(<<[^>]+>>)')
nlohmann::json gsm8k_answer_parts(const std::string& answer);
// the GSM8K / SpellingBee evaluation: answers after "####" in the last part and the completion
int gsm8k_style_evaluate(const nlohmann::json& conversation, const std::string& completion);

// HumanEval (164 problems, split test). Generative: the program runs in the sandbox.
class HumanEvalTask : public Task {
 public:
  explicit HumanEvalTask(TaskSlice slice = TaskSlice());
  std::string name() const override { return "HumanEval"; }
  std::string eval_type() const override { return "generative"; }
  int64_t num_examples() const override { return ds_.size(); }
  nlohmann::json get_example(int64_t index) const override;
  int evaluate(const nlohmann::json& conversation, const std::string& completion) const override;

 private:
  HubDataset ds_;
};
std::string humaneval_extract_imports(const std::string& prompt);      // leading import/from lines
std::string humaneval_extract_program(const std::string& completion);  // first ``` block, stripped
// imports + "\n\n" + code + "\n\n" + test + "\n" + "check(entry_point)"
std::string humaneval_program(const nlohmann::json& conversation, const std::string& completion);
// 1 when that program ran to its end in the sandbox (execute_code_to_the_end), else 0
int humaneval_grade(const nlohmann::json& conversation, const std::string& completion);

// SmolTalk (HuggingFaceTB/smol-smoltalk), split train|test; messages as they are. Training only.
class SmolTalkTask : public Task {
 public:
  explicit SmolTalkTask(std::string split, TaskSlice slice = TaskSlice());
  std::string name() const override { return "SmolTalk"; }
  int64_t num_examples() const override { return ds_.size(); }
  nlohmann::json get_example(int64_t index) const override;

 private:
  HubDataset ds_;
};

// CustomJSON: a JSONL file, one JSON array of {"role","content"} per line (user first,
// alternating, string content, at least 2). A missing file is an Error saying where.
class CustomJsonTask : public Task {
 public:
  explicit CustomJsonTask(std::string path, TaskSlice slice = TaskSlice());
  std::string name() const override { return "CustomJSON"; }
  int64_t num_examples() const override { return (int64_t)conversations_.size(); }
  nlohmann::json get_example(int64_t index) const override;

 private:
  std::vector<nlohmann::json> conversations_;
};

// ---- spelling (upstream's historical tasks/spellingbee.py) --------------------------------------------------
constexpr const char* kWordListUrl =
    "https://raw.githubusercontent.com/dwyl/english-words/refs/heads/master/words_alpha.txt";
// $BASE/words_alpha.txt (from `nanochat download tasks`)
std::string spelling_word_list_path();
// words_alpha.txt lines stripped; when it is missing, Debian's wamerican
// (/usr/share/dict/words) lower-cased, only a-z words, de-duplicated, with a warning; when
// that is missing too (offline, no wamerican), the trained tokenizer's whole words
// (spelling_words_from_pieces of $BASE/tokenizer/tokenizer.tiktoken), with a warning;
// Error when none exists
std::vector<std::string> spelling_load_words();
// the pieces " " + two or more of a-z, without the space, de-duplicated, in order
std::vector<std::string> spelling_words_from_pieces(const std::vector<std::string>& pieces);

// "How many r are in strawberry?" with a manual count and a python check. Generative.
class SpellingBeeTask : public Task {
 public:
  // words empty: spelling_load_words()
  SpellingBeeTask(int64_t size, std::string split, TaskSlice slice = TaskSlice(), std::vector<std::string> words = {});
  std::string name() const override { return "SpellingBee"; }
  std::string eval_type() const override { return "generative"; }
  int64_t num_examples() const override { return size_; }
  nlohmann::json get_example(int64_t index) const override;
  int evaluate(const nlohmann::json& conversation, const std::string& completion) const override;

 private:
  int64_t size_;
  bool test_;
  std::vector<std::string> words_;
};

// "Spell the word: {word}" -> "{word}:{w,o,r,d}" (words in Random(42)-shuffled order)
class SimpleSpellingTask : public Task {
 public:
  SimpleSpellingTask(int64_t size, std::string split, TaskSlice slice = TaskSlice(),
                     std::vector<std::string> words = {});
  std::string name() const override { return "SimpleSpelling"; }
  std::string eval_type() const override { return "generative"; }
  int64_t num_examples() const override { return size_; }
  nlohmann::json get_example(int64_t index) const override;

 private:
  int64_t size_;
  bool test_;
  std::vector<std::string> words_;
};

// ---- what SFT and chat-eval use (chat_sft.py, chat_eval.py) ------------------------------------------
// chat-eval's tasks by name: "ARC-Easy", "ARC-Challenge" (test), "MMLU" (all/test),
// "GSM8K" (main/test), "HumanEval", "SpellingBee" (size 256, test); Error on other names
TaskPtr task_for_eval(const std::string& name);

struct SftMixtureOptions {
  int mmlu_epochs = 3, gsm8k_epochs = 4;
  std::string identity_path;  // a CustomJSON file, added identity_epochs times ("" = none)
  int identity_epochs = 2;
};
// split "train": SmolTalk(train) + MMLU(all, auxiliary_train) x mmlu_epochs + GSM8K(main,
// train) x gsm8k_epochs [+ identity]; "val": SmolTalk(test) + MMLU(all, test, stop 5200) +
// GSM8K(main, test, stop 420). Shuffled with Random(42) (or `permutation`).
std::shared_ptr<TaskMixture> tasks_sft_mixture(const std::string& split,
                                               const SftMixtureOptions& opts = SftMixtureOptions(),
                                               PermutationFn permutation = PermutationFn());

}  // namespace nanochat
