// The task sets SFT and chat-eval use (upstream's chat_sft.py, chat_eval.py), built in one place.
#include "nanochat/common/error.h"
#include "nanochat/tasks.h"

namespace nanochat {

TaskPtr task_for_eval(const std::string& name) {
  if (name == "ARC-Easy" || name == "ARC-Challenge") return std::make_shared<ArcTask>(name, "test");
  if (name == "MMLU") return std::make_shared<MmluTask>("all", "test");
  if (name == "GSM8K") return std::make_shared<Gsm8kTask>("main", "test");
  if (name == "HumanEval") return std::make_shared<HumanEvalTask>();
  if (name == "SpellingBee") return std::make_shared<SpellingBeeTask>(256, "test");
  fail("unknown task %s (ARC-Easy, ARC-Challenge, MMLU, GSM8K, HumanEval, SpellingBee)", name.c_str());
}

std::shared_ptr<TaskMixture> tasks_sft_mixture(const std::string& split, const SftMixtureOptions& opts,
                                               PermutationFn permutation) {
  std::vector<TaskPtr> tasks;
  if (split == "train") {
    tasks.push_back(std::make_shared<SmolTalkTask>("train"));
    auto mmlu = std::make_shared<MmluTask>("all", "auxiliary_train");
    for (int i = 0; i < opts.mmlu_epochs; i++) tasks.push_back(mmlu);  // listed again = seen again
    auto gsm = std::make_shared<Gsm8kTask>("main", "train");
    for (int i = 0; i < opts.gsm8k_epochs; i++) tasks.push_back(gsm);
    if (!opts.identity_path.empty()) {
      auto identity = std::make_shared<CustomJsonTask>(opts.identity_path);
      for (int i = 0; i < opts.identity_epochs; i++) tasks.push_back(identity);
    }
  } else if (split == "val") {
    tasks.push_back(std::make_shared<SmolTalkTask>("test"));
    tasks.push_back(std::make_shared<MmluTask>("all", "test", TaskSlice{0, 5200, 1}));
    tasks.push_back(std::make_shared<Gsm8kTask>("main", "test", TaskSlice{0, 420, 1}));
  } else {
    fail("SFT mixture split must be train|val, got %s", split.c_str());
  }
  return std::make_shared<TaskMixture>(std::move(tasks), TaskSlice(), std::move(permutation));
}

}  // namespace nanochat
