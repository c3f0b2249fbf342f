// The conversations SFT trains and validates on, by the --mixture name.
#include "nanochat/common/error.h"
#include "nanochat/sft_data.h"

namespace nanochat {

TaskPtr sft_mixture(const std::string& mixture, const std::string& split, const SftMixtureOptions& mix) {
  if (mixture == "chat") return tasks_sft_mixture(split, mix);
  if (mixture != "spelling") fail("--mixture must be chat or spelling, got '%s'", mixture.c_str());
  std::vector<TaskPtr> tasks;
  if (split == "train") {
    tasks.push_back(std::make_shared<SimpleSpellingTask>(20000, "train"));
    tasks.push_back(std::make_shared<SpellingBeeTask>(8000, "train"));
    if (!mix.identity_path.empty()) {
      auto identity = std::make_shared<CustomJsonTask>(mix.identity_path);
      for (int i = 0; i < mix.identity_epochs; i++) tasks.push_back(identity);
    }
  } else {
    tasks.push_back(std::make_shared<SpellingBeeTask>(500, "test"));
  }
  return std::make_shared<TaskMixture>(std::move(tasks));
}

}  // namespace nanochat
