// ARC and MMLU (upstream tasks/arc.py, tasks/mmlu.py): multiple choice rendered with
// render_mc, the answer a single letter, evaluated by comparing letters.
#include "nanochat/common/error.h"
#include "nanochat/tasks.h"

namespace nanochat {

static std::vector<std::string> string_list(const nlohmann::json& j, const char* what) {
  if (!j.is_array()) fail("%s: expected a list of strings, got %s", what, j.dump().c_str());
  std::vector<std::string> out;
  for (auto& v : j) {
    if (!v.is_string()) fail("%s: expected a list of strings, got %s", what, j.dump().c_str());
    out.push_back(v.get<std::string>());
  }
  return out;
}

static int letter_evaluate(const nlohmann::json& conversation, const std::string& completion, const char* task) {
  std::vector<std::string> letters = string_list(conversation.at("letters"), task);
  bool allowed = false;
  for (auto& l : letters) allowed |= l == completion;
  if (!allowed)
    fail("%s answer '%s' is expected to be one of the conversation's letters %s", task, completion.c_str(),
         conversation.at("letters").dump().c_str());
  return completion == conversation.at("messages").back().at("content").get<std::string>() ? 1 : 0;
}

ArcTask::ArcTask(std::string subset, std::string split, TaskSlice slice) : Task(slice), subset_(std::move(subset)) {
  if (subset_ != "ARC-Easy" && subset_ != "ARC-Challenge")
    fail("ARC subset must be ARC-Easy or ARC-Challenge, got %s", subset_.c_str());
  if (split != "train" && split != "validation" && split != "test")
    fail("ARC split must be train|validation|test, got %s", split.c_str());
  ds_ = HubDataset::load({"allenai/ai2_arc", subset_, split});
  ds_.shuffle(42);
}

nlohmann::json ArcTask::get_example(int64_t index) const {
  nlohmann::json row = ds_.row(index);
  std::vector<std::string> choices = string_list(row.at("choices").at("text"), "ARC choices.text");
  std::vector<std::string> letters = string_list(row.at("choices").at("label"), "ARC choices.label");
  std::string answer = row.at("answerKey").get<std::string>();
  bool ok = false;
  for (auto& l : letters) ok |= l == answer;
  if (!ok) fail("ARC row %lld: answer %s is not one of its labels", (long long)index, answer.c_str());
  return {{"messages",
           {{{"role", "user"}, {"content", render_mc(row.at("question").get<std::string>(), letters, choices)}},
            {{"role", "assistant"}, {"content", answer}}}},
          {"letters", letters}};
}

int ArcTask::evaluate(const nlohmann::json& conversation, const std::string& completion) const {
  return letter_evaluate(conversation, completion, "ARC");
}

MmluTask::MmluTask(std::string subset, std::string split, TaskSlice slice) : Task(slice) {
  if (subset != "all" && subset != "auxiliary_train")
    fail("MMLU subset must be all|auxiliary_train, got %s", subset.c_str());
  if (subset == "auxiliary_train" && split != "train") fail("MMLU subset auxiliary_train has only the split train");
  if (subset == "all" && split != "auxiliary_train" && split != "validation" && split != "dev" && split != "test")
    fail("MMLU split must be auxiliary_train|validation|dev|test, got %s", split.c_str());
  ds_ = HubDataset::load({"cais/mmlu", subset, split});
  ds_.shuffle(42);
}

nlohmann::json MmluTask::get_example(int64_t index) const {
  nlohmann::json row = ds_.row(index);
  // the auxiliary_train config wraps each row in a "train" struct
  if (row.contains("train") && row["train"].is_object()) row = row["train"];
  std::vector<std::string> choices = string_list(row.at("choices"), "MMLU choices");
  if (choices.size() != 4) fail("MMLU row %lld has %zu choices, expected 4", (long long)index, choices.size());
  int64_t answer = row.at("answer").get<int64_t>();
  if (answer < 0 || answer > 3) fail("MMLU row %lld: answer %lld is not 0..3", (long long)index, (long long)answer);
  static const std::vector<std::string> letters = {"A", "B", "C", "D"};
  return {{"messages",
           {{{"role", "user"}, {"content", render_mc(row.at("question").get<std::string>(), letters, choices)}},
            {{"role", "assistant"}, {"content", letters[(size_t)answer]}}}},
          {"subject", row.value("subject", "")},
          {"letters", letters}};
}

int MmluTask::evaluate(const nlohmann::json& conversation, const std::string& completion) const {
  return letter_evaluate(conversation, completion, "MMLU");
}

const std::vector<std::string>& MmluTask::subject_groups() {
  static const std::vector<std::string> g = {"abstract_algebra",
                                             "anatomy",
                                             "astronomy",
                                             "business_ethics",
                                             "clinical_knowledge",
                                             "college_biology",
                                             "college_chemistry",
                                             "college_computer_science",
                                             "college_mathematics",
                                             "college_medicine",
                                             "college_physics",
                                             "computer_security",
                                             "conceptual_physics",
                                             "econometrics",
                                             "electrical_engineering",
                                             "elementary_mathematics",
                                             "formal_logic",
                                             "global_facts",
                                             "high_school_biology",
                                             "high_school_chemistry",
                                             "high_school_computer_science",
                                             "high_school_european_history",
                                             "high_school_geography",
                                             "high_school_government_and_politics",
                                             "high_school_macroeconomics",
                                             "high_school_mathematics",
                                             "high_school_microeconomics",
                                             "high_school_physics",
                                             "high_school_psychology",
                                             "high_school_statistics",
                                             "high_school_us_history",
                                             "high_school_world_history",
                                             "human_aging",
                                             "human_sexuality",
                                             "international_law",
                                             "jurisprudence",
                                             "logical_fallacies",
                                             "machine_learning",
                                             "management",
                                             "marketing",
                                             "medical_genetics",
                                             "miscellaneous",
                                             "moral_disputes",
                                             "moral_scenarios",
                                             "nutrition",
                                             "philosophy",
                                             "prehistory",
                                             "professional_accounting",
                                             "professional_law",
                                             "professional_medicine",
                                             "professional_psychology",
                                             "public_relations",
                                             "security_studies",
                                             "sociology",
                                             "us_foreign_policy",
                                             "virology",
                                             "world_religions"};
  return g;
}

}  // namespace nanochat
