// tasks: shuffles against NumPy / CPython, every hub task read from pyarrow-written fixture
// parquet served by a loopback server through the parquet listing API (the conversations
// compared with upstream's logic restated in Python, plus hand-written expectations),
// GSM8K answer extraction and tool parts, HumanEval program assembly, mixtures, spelling.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "http_test_server.h"
#include "nanochat/common/files.h"
#include "nanochat/tasks.h"
#include "tasks/np_random.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;
using nlohmann::json;

static const std::string kPython = NANOCHAT_PYTHON;
static const std::string kFixtures = NANOCHAT_FIXTURES;
static const std::string kSourceDir = NANOCHAT_SOURCE_DIR;

static const char* kWords[] = {"strawberry", "banana", "apple", "mississippi", "zebra",     "queue",
                               "bookkeeper", "rhythm", "a",     "syzygy",      "committee", "llama"};

// what NumPy and CPython print (tests/fixtures/task_random_reference.py), once per run
static const json& reference() {
  static json ref;
  if (ref.is_null()) {
    std::string dir = make_temp_dir();
    std::string words;
    for (const char* w : kWords) words += std::string(w) + "\r\n";  // words_alpha.txt has CRLF lines
    std::ofstream(dir + "/words.txt", std::ios::binary) << words;
    auto r = run_shell(kPython + " " + kFixtures + "/task_random_reference.py " + dir + "/words.txt");
    EXPECT_EQ(r.rc, 0) << r.err;
    ref = json::parse(r.out);
    remove_tree(dir);
  }
  return ref;
}

static std::vector<std::string> word_list() { return std::vector<std::string>(std::begin(kWords), std::end(kWords)); }

TEST(TaskRandom, NumpyPermutationMatchesNumpy) {
  for (auto& c : reference()["np_perm"]) {
    auto p = np_permutation(c["seed"].get<uint64_t>(), c["n"].get<int64_t>());
    EXPECT_EQ(json(p), c["p"]) << "seed " << c["seed"] << " n " << c["n"];
  }
  NpPcg64 g = np_default_rng(42);
  for (auto& v : reference()["pcg_raw"]) EXPECT_EQ(std::to_string(g.next_uint64()), v.get<std::string>());
}

TEST(TaskRandom, CPythonShuffleMatchesCPython) {
  for (auto& c : reference()["py_shuffle"]) {
    auto p = tasks_py_shuffled_range(c["seed"].get<uint64_t>(), c["n"].get<int64_t>());
    EXPECT_EQ(json(p), c["p"]) << "seed " << c["seed"] << " n " << c["n"];
  }
}

TEST(Tasks, RenderMcByHand) {
  EXPECT_EQ(render_mc("Q?", {"A", "B"}, {"x", "y z"}),
            "Multiple Choice question: Q?\n- x=A\n- y z=B\n\nRespond only with the letter of the correct answer.");
}

TEST(Tasks, Gsm8kExtractTrickyStrings) {
  struct Case {
    const char* text;
    bool found;
    const char* answer;
  } cases[] = {
      {"so #### 10", true, "10"},
      {"#### -300 apples", true, "-300"},
      {"#### 1,234,567", true, "1234567"},
      {"#### 3.50.", true, "3.50."},
      {"#### -.5", true, "-.5"},
      {"#### -x then #### 7", true, "7"},
      {"##### 42", true, "42"},
      {"####42", false, ""},
      {"#### abc", false, ""},
      {"the answer is 5", false, ""},
      {"#### ,,", true, ""},
      {"first #### 1\n#### 2", true, "1"},
  };
  for (auto& c : cases) {
    std::string a;
    EXPECT_EQ(gsm8k_extract_answer(c.text, &a), c.found) << c.text;
    if (c.found) {
      EXPECT_EQ(a, c.answer) << c.text;
    }
  }
}

TEST(Tasks, Gsm8kToolPartsByHand) {
  json parts = gsm8k_answer_parts("Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n#### 10");
  json want = json::parse(R"([{"type":"text","text":"Weng earns 12/60 = $"},{"type":"python","text":"12/60"},
    {"type":"python_output","text":"0.2"},{"type":"text","text":"0.2 per minute.\n#### 10"}])");
  EXPECT_EQ(parts, want);
  // at the edges empty text parts stay; no "=" gives an empty output; the last "=" splits;
  // "<<a>b>>" is no tool call for the regex but upstream still treats it as one by its ends
  parts = gsm8k_answer_parts("<<x=y=3>><<7>>");
  want = json::parse(R"([{"type":"text","text":""},{"type":"python","text":"x=y"},{"type":"python_output","text":"3"},
    {"type":"text","text":""},{"type":"python","text":"7"},{"type":"python_output","text":""},{"type":"text","text":""}])");
  EXPECT_EQ(parts, want);
  parts = gsm8k_answer_parts("p <<a>b>> q");
  want = json::parse(R"([{"type":"text","text":"p <<a>b>> q"}])");
  EXPECT_EQ(parts, want);
  parts = gsm8k_answer_parts("<<a>b>>");
  want = json::parse(R"([{"type":"python","text":"a>b"},{"type":"python_output","text":""}])");
  EXPECT_EQ(parts, want);
}

TEST(Tasks, HumanEvalProgramAssembly) {
  EXPECT_EQ(humaneval_extract_imports("# c\nimport os\n  from a import b\n\ndef f():\n    import sys\n"),
            "import os\nfrom a import b");
  EXPECT_EQ(humaneval_extract_imports("\ndef f(): pass\nimport x\n"), "");
  EXPECT_EQ(humaneval_extract_program("Here:\n```python\ndef f():\n    return 1\n```\nand ```\nx\n```"),
            "def f():\n    return 1");
  EXPECT_EQ(humaneval_extract_program("```\n  y = 2\n```"), "y = 2");
  EXPECT_EQ(humaneval_extract_program("```\n\n```"), "");  // the regex backtracks into the blank line
  // "python x" is no fence (\s*\n must follow), nor is "```" + "python x"; no block at all
  EXPECT_EQ(humaneval_extract_program("```python x\n1\n```"), "```python x\n1\n```");
  EXPECT_EQ(humaneval_extract_program("  def g(): pass \n"), "def g(): pass");
  EXPECT_EQ(humaneval_extract_program("```python\nunclosed"), "```python\nunclosed");
  json conv = {
      {"messages",
       {{{"role", "user"}, {"content", "import math\n\ndef f(x):\n"}}, {{"role", "assistant"}, {"content", ""}}}},
      {"entry_point", "f"},
      {"test", "def check(c):\n    assert c(4) == 2\n"}};
  EXPECT_EQ(humaneval_program(conv, "```python\ndef f(x):\n    return math.sqrt(x)\n```"),
            "import math\n\ndef f(x):\n    return math.sqrt(x)\n\ndef check(c):\n    assert c(4) == 2\n\ncheck(f)");
}

// A hub on 127.0.0.1 serving the fixture splits through the parquet listing API; the base
// dir is a fresh temp dir
class HubFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir());
    auto r = run_shell(kPython + " " + kFixtures + "/make_task_fixtures.py " + *dir_ + "/src");
    ASSERT_EQ(r.rc, 0) << r.err;
    server_ = new TestServer();
    json files = json::parse(read_file(*dir_ + "/src/files.json"));
    for (auto& [key, names] : files.items()) {
      size_t a = key.find('|'), b = key.rfind('|');
      json urls = json::array();
      for (auto& n : names) {
        std::string path = "/files/" + n.get<std::string>();
        server_->files[path] = read_file(*dir_ + "/src/" + n.get<std::string>());
        urls.push_back(server_->url(path));
      }
      server_->files["/api/datasets/" + key.substr(0, a) + "/parquet/" + key.substr(a + 1, b - a - 1) + "/" +
                     key.substr(b + 1)] = urls.dump();
    }
    expected_ = new json(json::parse(read_file(*dir_ + "/src/expected.json")));
    setenv("HF_ENDPOINT", server_->url().c_str(), 1);
    setenv("NANOCHAT_BASE_DIR", (*dir_ + "/base").c_str(), 1);
  }
  static void TearDownTestSuite() {
    delete server_;
    remove_tree(*dir_);
    delete dir_;
    delete expected_;
  }
  static void expect_task(const Task& t, const json& want) {
    ASSERT_EQ(t.size(), (int64_t)want.size()) << t.name();
    for (int64_t i = 0; i < t.size(); i++) EXPECT_EQ(t.at(i), want[(size_t)i]) << t.name() << " example " << i;
  }
  static std::string* dir_;
  static TestServer* server_;
  static json* expected_;
};
std::string* HubFixture::dir_;
TestServer* HubFixture::server_;
json* HubFixture::expected_;

TEST_F(HubFixture, DownloadWritesShardsAndManifestLast) {
  HubSplit s{"allenai/ai2_arc", "ARC-Easy", "test"};
  auto paths = hub_download(s);
  ASSERT_EQ(paths.size(), 2u);
  std::string dir = hub_split_dir(s);
  EXPECT_EQ(dir, *dir_ + "/base/task_data/allenai--ai2_arc/ARC-Easy/test");
  EXPECT_EQ(paths[0], dir + "/00000.parquet");
  EXPECT_EQ(json::parse(read_file(dir + "/manifest.json")), json::parse(R"(["00000.parquet","00001.parquet"])"));
  size_t requests = server_->requests().size();
  hub_download(s);  // the manifest says it is complete: no request
  EXPECT_EQ(server_->requests().size(), requests);
  // a listing that is not a list fails with a line naming the URL, and leaves no manifest
  server_->files["/api/datasets/bad/x/parquet/default/train"] = "{\"error\": 1}";
  DownloadOptions fast;
  fast.retry_base_seconds = 0.001;
  try {
    hub_download({"bad/x", "default", "train"}, fast);
    FAIL() << "a bad listing was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/api/datasets/bad/x/parquet/default/train"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(path_exists(hub_split_dir({"bad/x", "default", "train"}) + "/manifest.json"));
}

TEST_F(HubFixture, ArcConversationsLettersAndEvaluate) {
  ArcTask easy("ARC-Easy", "test"), challenge("ARC-Challenge", "test");
  EXPECT_EQ(easy.eval_type(), "categorical");
  expect_task(easy, (*expected_)["ARC-Easy"]);
  expect_task(challenge, (*expected_)["ARC-Challenge"]);
  // hand-checked: the planet question keeps its numeric labels
  bool seen = false;
  for (int64_t i = 0; i < easy.size(); i++) {
    json c = easy.at(i);
    if (c["messages"][0]["content"].get<std::string>().find("closest to the Sun") == std::string::npos) continue;
    seen = true;
    EXPECT_EQ(c["letters"], json::parse(R"(["1","2","3","4"])"));
    EXPECT_EQ(c["messages"][0]["content"],
              "Multiple Choice question: Which planet is closest to the Sun?\n- Venus=1\n- Earth=2\n- Mercury=3\n- "
              "Mars=4\n\nRespond only with the letter of the correct answer.");
    EXPECT_EQ(easy.evaluate(c, "3"), 1);
    EXPECT_EQ(easy.evaluate(c, "1"), 0);
    EXPECT_THROW(easy.evaluate(c, "A"), Error);
  }
  EXPECT_TRUE(seen);
}

TEST_F(HubFixture, MmluGsm8kHumanEvalSmolTalk) {
  MmluTask test("all", "test"), aux("all", "auxiliary_train");
  expect_task(test, (*expected_)["MMLU-test"]);
  expect_task(aux, (*expected_)["MMLU-aux"]);
  EXPECT_EQ(MmluTask::subject_groups().size(), 57u);
  json c = test.at(0);
  std::string right = c["messages"][1]["content"];
  EXPECT_EQ(test.evaluate(c, right), 1);
  EXPECT_EQ(test.evaluate(c, right == "A" ? "B" : "A"), 0);

  Gsm8kTask gtrain("main", "train"), gtest("main", "test");
  EXPECT_EQ(gtest.eval_type(), "generative");
  expect_task(gtrain, (*expected_)["GSM8K-train"]);
  expect_task(gtest, (*expected_)["GSM8K-test"]);
  for (int64_t i = 0; i < gtrain.size(); i++) {
    json g = gtrain.at(i);
    if (g["messages"][0]["content"] != "Tom has 1,200 apples and gives away 1,500. What is his balance?") continue;
    EXPECT_EQ(g["messages"][1]["content"],
              json::parse(R"([{"type":"text","text":""},{"type":"python","text":"1200-1500"},
      {"type":"python_output","text":"-300"},{"type":"text","text":"-300 apples.\n#### -300"}])"));
    EXPECT_EQ(gtrain.evaluate(g, "I think... #### -300"), 1);
    EXPECT_EQ(gtrain.evaluate(g, "#### 300"), 0);
    EXPECT_EQ(gtrain.evaluate(g, "no answer"), 0);
    EXPECT_EQ(gtrain.reward(g, "#### -3,00"), 1.0);
  }

  HumanEvalTask he;
  expect_task(he, (*expected_)["HumanEval"]);
  for (int64_t i = 0; i < he.size(); i++) {
    json h = he.at(i);
    std::string solution = h["messages"][1]["content"];
    EXPECT_EQ(he.evaluate(h, "```python\n" + solution + "\n```"), 1) << humaneval_program(h, solution);
    EXPECT_EQ(he.evaluate(h, solution), 1);
    EXPECT_EQ(he.evaluate(h, "def nothing(): pass"), 0);
  }

  SmolTalkTask st("train"), sv("test");
  EXPECT_EQ(st.eval_type(), "");
  expect_task(st, (*expected_)["SmolTalk-train"]);
  expect_task(sv, (*expected_)["SmolTalk-test"]);
  EXPECT_THROW(st.evaluate(st.at(0), "x"), Error);
}

TEST_F(HubFixture, ViewsMixtureAndSequence) {
  auto arc = std::make_shared<ArcTask>("ARC-Easy", "test");  // 7 examples
  ArcTask view("ARC-Easy", "test", TaskSlice{1, 6, 2});      // 1, 3, 5
  ASSERT_EQ(view.size(), 3);
  for (int i = 0; i < 3; i++) EXPECT_EQ(view.at(i), arc->at(1 + 2 * i));
  EXPECT_EQ(ArcTask("ARC-Easy", "test", TaskSlice{2, -1, 3}).size(), 2);  // 2, 5
  EXPECT_THROW(view.at(3), Error);
  EXPECT_THROW(ArcTask("ARC-Easy", "test", TaskSlice{5, 2, 1}), Error);

  auto gsm = std::make_shared<Gsm8kTask>("main", "test");  // 3 examples
  // the mixture's order is Random(42).shuffle over [(0,0..6), (1,0..2), (0,0..6)]
  TaskMixture mix({arc, gsm, arc});
  ASSERT_EQ(mix.size(), 17);
  std::vector<std::pair<int, int64_t>> ordered;
  for (int64_t i = 0; i < 7; i++) ordered.emplace_back(0, i);
  for (int64_t i = 0; i < 3; i++) ordered.emplace_back(1, i);
  for (int64_t i = 0; i < 7; i++) ordered.emplace_back(2, i);
  std::vector<int64_t> perm = tasks_py_shuffled_range(42, 17);
  for (int64_t i = 0; i < 17; i++) {
    auto want = ordered[(size_t)perm[(size_t)i]];
    EXPECT_EQ(mix.locate(i), want);
    EXPECT_EQ(mix.at(i), (want.first == 1 ? (TaskPtr)gsm : (TaskPtr)arc)->at(want.second));
  }
  // a plugged-in permutation is used as given
  TaskMixture identity({arc, gsm}, TaskSlice(), [](int64_t n) {
    std::vector<int64_t> p(n);
    for (int64_t i = 0; i < n; i++) p[(size_t)i] = n - 1 - i;
    return p;
  });
  EXPECT_EQ(identity.at(0), gsm->at(2));
  EXPECT_EQ(identity.at(9), arc->at(0));

  TaskSequence seq({gsm, arc});
  ASSERT_EQ(seq.size(), 10);
  EXPECT_EQ(seq.at(2), gsm->at(2));
  EXPECT_EQ(seq.at(3), arc->at(0));
  EXPECT_EQ(seq.at(9), arc->at(6));
}

TEST_F(HubFixture, SftMixturesAndEvalTasks) {
  auto train = tasks_sft_mixture("train");
  EXPECT_EQ(train->size(), 5 + 3 * 4 + 4 * 4);  // SmolTalk + MMLU x3 + GSM8K x4
  auto val = tasks_sft_mixture("val");
  EXPECT_EQ(val->size(), 2 + 6 + 3);  // stops past the end (5200, 420) are clamped to the data
  SftMixtureOptions o;
  o.identity_path = kSourceDir + "/data/identity_conversations.jsonl";
  auto with_identity = tasks_sft_mixture("train", o);
  CustomJsonTask identity(o.identity_path);
  EXPECT_EQ(with_identity->size(), train->size() + 2 * identity.size());
  for (const char* n : {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval"})
    EXPECT_EQ(task_for_eval(n)->name(), n);
  EXPECT_THROW(task_for_eval("nope"), Error);
}

TEST_F(HubFixture, DownloadCommandFetchesEverySplit) {
  std::string base = *dir_ + "/cli_base";
  // the word list's host goes through a proxy that is not there (loopback never does), so
  // the test never reaches the internet: a warning, and SpellingBee would use wamerican
  auto r = run_shell("https_proxy=http://127.0.0.1:9 HF_ENDPOINT=" + server_->url() + " NANOCHAT_BASE_DIR=" + base +
                     " " + NANOCHAT_BIN + " download tasks --retry-delay 0 --timeout 2");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("wamerican"), std::string::npos) << r.err;
  for (auto& s : kTaskDataSplits) {
    std::string m = base + "/task_data/" + s.repo_id.substr(0, s.repo_id.find('/')) + "--" +
                    s.repo_id.substr(s.repo_id.find('/') + 1) + "/" + s.subset + "/" + s.split + "/manifest.json";
    EXPECT_TRUE(path_exists(m)) << m;
  }
}

TEST(Tasks, SpellingBeeMatchesUpstream) {
  SpellingBeeTask train(40, "train", TaskSlice(), word_list()), test(10, "test", TaskSlice(), word_list());
  for (int i = 0; i < 40; i++) EXPECT_EQ(train.at(i), reference()["bee_train"][i]) << "train " << i;
  for (int i = 0; i < 10; i++) EXPECT_EQ(test.at(i), reference()["bee_test"][i]) << "test " << i;
  json c = train.at(0);
  std::string count = c["messages"][1]["content"][3]["text"];
  EXPECT_EQ(train.evaluate(c, "so #### " + count), 1);
  EXPECT_EQ(train.evaluate(c, "#### 99"), 0);
  SimpleSpellingTask simple(10, "train", TaskSlice(), word_list()), simple_test(5, "test", TaskSlice(), word_list());
  for (int i = 0; i < 10; i++) EXPECT_EQ(simple.at(i), reference()["simple_train"][i]) << i;
  for (int i = 0; i < 5; i++) EXPECT_EQ(simple_test.at(i), reference()["simple_test"][i]) << i;
}

// the offline word list: only " " + a-z{2,} pieces count, the space dropped, first one kept
TEST(Tasks, SpellingWordsFromTokenizerPieces) {
  std::vector<std::string> pieces = {"a",    " the", "ing",   " The",        " a", " cat", " don't", " caf\xc3\xa9",
                                     " the", " x1",  "  two", " strawberry", "\n", " dog "};
  EXPECT_EQ(spelling_words_from_pieces(pieces), (std::vector<std::string>{"the", "cat", "strawberry"}));
  EXPECT_TRUE(spelling_words_from_pieces({}).empty());
  // the words make working tasks: each example spells its word back letter by letter
  SimpleSpellingTask simple(4, "train", TaskSlice(), spelling_words_from_pieces(pieces));
  std::map<std::string, std::string> spelled = {
      {"the", "t,h,e"}, {"cat", "c,a,t"}, {"strawberry", "s,t,r,a,w,b,e,r,r,y"}};
  for (int i = 0; i < 4; i++) {
    std::string q = simple.at(i)["messages"][0]["content"], a = simple.at(i)["messages"][1]["content"];
    std::string w = q.substr(std::string("Spell the word: ").size());
    ASSERT_EQ(spelled.count(w), 1u) << q;
    EXPECT_EQ(a, w + ":" + spelled[w]);
  }
}

TEST(Tasks, CustomJsonAndIdentitySet) {
  CustomJsonTask identity(kSourceDir + "/data/identity_conversations.jsonl");
  EXPECT_GE(identity.size(), 50);
  bool mentions = false;
  for (int64_t i = 0; i < identity.size(); i++) {
    json c = identity.at(i);
    ASSERT_GE(c["messages"].size(), 2u);
    for (auto& m : c["messages"]) mentions |= m["content"].get<std::string>().find("nanochat") != std::string::npos;
  }
  EXPECT_TRUE(mentions);
  std::string dir = make_temp_dir();
  std::ofstream(dir + "/ok.jsonl")
      << "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}]\n\n";
  CustomJsonTask ok(dir + "/ok.jsonl");
  ASSERT_EQ(ok.size(), 1);
  EXPECT_EQ(ok.at(0),
            json::parse(R"({"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"}]})"));
  std::ofstream(dir + "/bad.jsonl")
      << "[{\"role\":\"assistant\",\"content\":\"Hi\"},{\"role\":\"user\",\"content\":\"x\"}]\n";
  EXPECT_THROW(CustomJsonTask(dir + "/bad.jsonl"), Error);
  EXPECT_THROW(CustomJsonTask(dir + "/missing.jsonl"), Error);
  remove_tree(dir);
}
