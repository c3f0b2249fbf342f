// The CORE evaluation (upstream's core_eval.py) against an independent reference: the venv's Python runs
// upstream's core_eval.py procedure (real Jinja2 with upstream's template strings,
// random.Random, torch's cross entropy) on the fixture bundle with a fixed bigram-table
// "model", and prints every prompt, every correct flag, accuracy, centred value and CORE.
// Then hand-made tasks with forced answers (accuracy and centred values worked out below),
// batch-size and rank-stride invariance on a real tiny GPT, the bundle zip, and bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "http_test_server.h"
#include "nanochat/common/files.h"
#include "nanochat/core_eval.h"
#include "nanochat/tokenizer.h"
#include "test_util.h"
#include "test_models.h"

using namespace nanochat;

static const std::string kPython = NANOCHAT_PYTHON;
static const std::string kBundle = std::string(NANOCHAT_FIXTURES) + "/core_bundle/eval_bundle";
static const std::string kBin = NANOCHAT_BIN;

namespace {

constexpr int64_t V = 257;

// the fixture "model": logits[b,t,:] = W[idx[b,t], :], W[a][v] = ((a*131 + v*71) % 97) / 16
torch::Tensor bigram_table() {
  torch::Tensor w = torch::empty({V, V}, torch::kFloat);
  auto a = w.accessor<float, 2>();
  for (int64_t i = 0; i < V; i++)
    for (int64_t v = 0; v < V; v++) a[i][v] = (float)((i * 131 + v * 71) % 97) / 16.0f;
  return w;
}
CoreLogitsFn table_fn(const torch::Tensor& w) {
  return [w](const torch::Tensor& idx) {
    return w.index_select(0, idx.reshape({-1})).view({idx.size(0), idx.size(1), V});
  };
}
// a forced "model": logits[b,t,v] = f(current token, v)
CoreLogitsFn rule_fn(const std::function<float(int64_t cur, int64_t v)>& f) {
  torch::Tensor w = torch::empty({V, V}, torch::kFloat);
  auto a = w.accessor<float, 2>();
  for (int64_t i = 0; i < V; i++)
    for (int64_t v = 0; v < V; v++) a[i][v] = f(i, v);
  return table_fn(w);
}

void write(const std::string& path, const std::string& text) {
  make_dirs(parent_dir(path));
  std::ofstream(path, std::ios::binary) << text;
}

// the fixture bundle's tasks as written in its core.yaml / eval_meta_data.csv
const char* kTasksJson = R"([
  {"label": "mc_zero", "type": "multiple_choice", "uri": "mc_zero.jsonl", "k": 0, "delim": " ", "rb": 25},
  {"label": "mc_shots", "type": "multiple_choice", "uri": "mc_shots.jsonl", "k": 2, "delim": "\nAnswer: ", "rb": 50},
  {"label": "schema_shots", "type": "schema", "uri": "schema_shots.jsonl", "k": 1, "delim": " ", "rb": 50},
  {"label": "lm_shots", "type": "language_modeling", "uri": "lm_shots.jsonl", "k": 3, "delim": " ", "rb": 0}])";

// upstream's procedure, with its template strings, in Python: prints JSON
const char* kReference = R"PY(
import json, random, sys
import torch
from jinja2 import Template
bundle, max_per_task, tasks = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
MC = """
{%- for example in fewshot_examples -%}
{{ example.query }}{{ continuation_delimiter }}{{ example.choices[example.gold] }}

{% endfor -%}
{{ item.query }}{{ continuation_delimiter }}{{ choice }}""".strip()
SCHEMA = """
{%- for example in fewshot_examples -%}
{{ example.context_options[example.gold] }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ context }}{{ continuation_delimiter }}{{ item.continuation }}""".strip()
LM = """
{%- for example in fewshot_examples -%}
{{ example.context | trim }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ item.context | trim }}{{ continuation_delimiter }}{% if include_continuation %}{{ item.continuation }}{% endif %}""".strip()
V = 257
W = torch.tensor([[((a * 131 + v * 71) % 97) / 16.0 for v in range(V)] for a in range(V)], dtype=torch.float32)
def enc(prompts): return [[256] + list(p.encode('utf-8')) for p in prompts]
def common(seqs, left):
    m = min(len(s) for s in seqs)
    for i, idx in enumerate(range(m) if left else range(-1, -m - 1, -1)):
        if not all(s[idx] == seqs[0][idx] for s in seqs): return i
    return m
out, centered = [], []
for t in tasks:
    data = [json.loads(l.strip()) for l in open(bundle + '/eval_data/' + t['uri'], encoding='utf-8')]
    random.Random(1337).shuffle(data)
    if max_per_task > 0: data = data[:max_per_task]
    correct, all_prompts = torch.zeros(len(data), dtype=torch.float32), []
    for idx in range(len(data)):
        item, fs = data[idx], []
        if t['k'] > 0:
            fs = [data[i] for i in random.Random(1234 + idx).sample([i for i in range(len(data)) if i != idx], t['k'])]
        ctx = dict(fewshot_examples=fs, continuation_delimiter=t['delim'], item=item)
        if t['type'] == 'multiple_choice':
            prompts = [Template(MC).render(choice=c, **ctx) for c in item['choices']]
            tok = enc(prompts); s = common(tok, True); starts = [s] * len(tok); ends = [len(x) for x in tok]
        elif t['type'] == 'schema':
            prompts = [Template(SCHEMA).render(context=c, **ctx) for c in item['context_options']]
            tok = enc(prompts); s = common(tok, False); ends = [len(x) for x in tok]; starts = [e - s for e in ends]
        else:
            prompts = [Template(LM).render(include_continuation=False, **ctx).strip(),
                       Template(LM).render(include_continuation=True, **ctx)]
            tw, tt = enc(prompts); assert tw == tt[:len(tw)]
            tok, starts, ends = [tt], [len(tw)], [len(tt)]
        all_prompts.append(prompts)
        T = max(len(x) for x in tok)
        ids = torch.full((len(tok), T), 256, dtype=torch.long)
        for i, x in enumerate(tok): ids[i, :len(x)] = torch.tensor(x)
        logits = W[ids]
        losses = torch.nn.functional.cross_entropy(logits.view(-1, V), torch.roll(ids, -1, 1).view(-1), reduction='none').view(len(tok), T)
        losses[:, -1] = float('nan')
        preds = logits.argmax(-1)
        if t['type'] == 'language_modeling':
            ok = torch.all(preds[0, starts[0] - 1:ends[0] - 1] == ids[0, starts[0]:ends[0]]).item()
        else:
            m = [losses[i, s - 1:e - 1].mean().item() for i, (s, e) in enumerate(zip(starts, ends))]
            ok = m.index(min(m)) == item['gold']
        correct[idx] = float(ok)
    acc = correct.mean().item()
    c = (acc - 0.01 * t['rb']) / (1.0 - 0.01 * t['rb'])
    centered.append(c)
    out.append(dict(label=t['label'], prompts=all_prompts, correct=correct.tolist(), accuracy=acc, centered=c))
print(json.dumps(dict(tasks=out, core=sum(centered) / len(centered))))
)PY";

bool have_jinja2() { return run_shell(kPython + " -c 'import jinja2, torch'").rc == 0; }

nlohmann::json reference(int64_t max_per_task) {
  std::string dir = make_temp_dir();
  write(dir + "/ref.py", kReference);
  nlohmann::json tasks = nlohmann::json::parse(kTasksJson);
  write(dir + "/tasks.json", tasks.dump());
  auto r = run_shell(kPython + " " + dir + "/ref.py " + kBundle + " " + std::to_string(max_per_task) + " \"$(cat " +
                     dir + "/tasks.json)\"");
  remove_tree(dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

GPTConfig tiny_config() { return tiny_gpt_config(V); }
GPT tiny_model() { return perturbed_gpt(tiny_config(), 7, 0.3); }

}  // namespace

TEST(CoreEval, BundleLoadsTasksAndBaselines) {
  auto tasks = core_bundle_load(kBundle);
  auto expected = nlohmann::json::parse(kTasksJson);
  ASSERT_EQ(tasks.size(), expected.size());
  for (size_t i = 0; i < tasks.size(); i++) {
    EXPECT_EQ(tasks[i].label, expected[i]["label"]);
    EXPECT_EQ(tasks[i].type, expected[i]["type"]);
    EXPECT_EQ(tasks[i].dataset_uri, expected[i]["uri"]);
    EXPECT_EQ(tasks[i].num_fewshot, expected[i]["k"]);
    EXPECT_EQ(tasks[i].continuation_delimiter, expected[i]["delim"]);
    EXPECT_EQ(tasks[i].random_baseline, expected[i]["rb"].get<double>());
  }
}

TEST(CoreEval, PyStripMatchesPython) {
  // every code point Python's str.isspace() accepts, and some it does not (U+200B, U+FEFF)
  auto r = run_shell(kPython +
                     " -c \"import sys,json; print(json.dumps([c for c in map(chr, range(0x3001)) if c.isspace()]))\"");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto spaces = nlohmann::json::parse(r.out);
  EXPECT_EQ(spaces.size(), 29u);
  for (const auto& s : spaces) {
    std::string sp = s.get<std::string>();
    EXPECT_EQ(core_py_strip(sp + "a b" + sp + sp), "a b") << "U+" << std::hex << (int)(unsigned char)sp[0];
  }
  EXPECT_EQ(core_py_strip("\xE2\x80\x8B"
                          "x\xEF\xBB\xBF"),
            "\xE2\x80\x8B"
            "x\xEF\xBB\xBF");
  EXPECT_EQ(core_py_strip(" \t\n"), "");
  EXPECT_EQ(core_py_strip(""), "");
}

// prompts, correct flags, accuracy, centred values and CORE equal the reference's, for the
// whole tasks and for a subset (the few-shot pool is then the truncated list)
TEST(CoreEval, MatchesUpstreamProcedureInPython) {
  if (!have_jinja2()) GTEST_SKIP() << "jinja2 or torch missing in " << kPython << ": the reference cannot run";
  Tokenizer tok = byte_tokenizer(false);
  auto tasks = core_bundle_load(kBundle);
  for (int64_t max_per_task : {-1, 8}) {
    SCOPED_TRACE("max_per_task " + std::to_string(max_per_task));
    nlohmann::json ref = reference(max_per_task);
    CoreOptions o;
    o.bundle_dir = kBundle, o.max_per_task = max_per_task, o.batch_size = 5, o.threads = 2;
    CoreResult got = core_evaluate(table_fn(bigram_table()), tok, o, nullptr);
    ASSERT_EQ(got.tasks.size(), ref["tasks"].size());
    for (size_t t = 0; t < tasks.size(); t++) {
      const auto& rt = ref["tasks"][t];
      SCOPED_TRACE(tasks[t].label);
      auto data = core_load_task_data(kBundle + "/eval_data/" + tasks[t].dataset_uri, tasks[t].type);
      core_shuffle_truncate(data, max_per_task);
      ASSERT_EQ(data.size(), rt["prompts"].size());
      for (size_t i = 0; i < data.size(); i++) {
        std::vector<const CoreItem*> fs;
        for (int64_t j : core_fewshot_indices((int64_t)i, (int64_t)data.size(), tasks[t].num_fewshot))
          fs.push_back(&data[j]);
        EXPECT_EQ(core_render_prompts(tasks[t], data[i], fs), rt["prompts"][i].get<std::vector<std::string>>()) << i;
      }
      auto flags = core_evaluate_task(table_fn(bigram_table()), tok, tasks[t], data, o);
      EXPECT_EQ(std::vector<double>(flags.begin(), flags.end()), rt["correct"].get<std::vector<double>>());
      EXPECT_EQ(got.tasks[t].label, rt["label"]);
      EXPECT_EQ(got.tasks[t].accuracy, rt["accuracy"].get<double>());
      EXPECT_DOUBLE_EQ(got.tasks[t].centered, rt["centered"].get<double>());
      EXPECT_EQ(got.tasks[t].examples, (int64_t)data.size());
    }
    EXPECT_DOUBLE_EQ(got.core, ref["core"].get<double>());
  }
}

// Forced answers, worked out by hand. The "model" likes uppercase targets (+5) and a space
// after 'Z' (+5); every other logit is 0.
TEST(CoreEval, ForcedAnswersScoredByHand) {
  std::string dir = make_temp_dir();
  write(dir + "/core.yaml",
        "icl_tasks:\n"
        "- {label: mc, dataset_uri: mc.jsonl, num_fewshot: [0], icl_task_type: multiple_choice}\n"
        "- {label: sc, dataset_uri: sc.jsonl, num_fewshot: [0], icl_task_type: schema}\n");
  write(dir + "/eval_meta_data.csv", "Eval Task,Random baseline\nmc,25\nsc,50\n");
  // MC: the choice with the most uppercase bytes has the lowest mean loss (the span is the
  // choice: the queries' " " and the BOS are the common prefix). Picks: YES, ABC, xY, OK.
  write(dir + "/eval_data/mc.jsonl",
        "{\"query\": \"Q1\", \"choices\": [\"no\", \"YES\", \"maybe\"], \"gold\": 1}\n"
        "{\"query\": \"Q2\", \"choices\": [\"ABC\", \"abc\"], \"gold\": 0}\n"
        "{\"query\": \"Q3\", \"choices\": [\"xY\", \"zz\"], \"gold\": 1}\n"
        "{\"query\": \"Q4\", \"choices\": [\"Hi\", \"OK\", \"yo\"], \"gold\": 1}\n");
  // schema: the scored span is the common suffix " q"; its first target (the space) is
  // cheap only after 'Z'. Picks: option 0, option 1, option 1 (gold 0: wrong).
  write(dir + "/eval_data/sc.jsonl",
        "{\"context_options\": [\"Z\", \"a\"], \"continuation\": \"q\", \"gold\": 0}\n"
        "{\"context_options\": [\"bb\", \"cZ\"], \"continuation\": \"q\", \"gold\": 1}\n"
        "{\"context_options\": [\"Za\", \"xZ\"], \"continuation\": \"q\", \"gold\": 0}\n");
  auto fn = rule_fn([](int64_t cur, int64_t v) {
    return (v >= 'A' && v <= 'Z' ? 5.0f : 0.0f) + (cur == 'Z' && v == ' ' ? 5.0f : 0.0f);
  });
  Tokenizer tok = byte_tokenizer(false);
  CoreOptions o;
  o.bundle_dir = dir, o.batch_size = 3;
  CoreResult r = core_evaluate(fn, tok, o, nullptr);
  ASSERT_EQ(r.tasks.size(), 2u);
  EXPECT_EQ(r.tasks[0].accuracy, 0.75);                         // 3 of 4
  EXPECT_DOUBLE_EQ(r.tasks[0].centered, (0.75 - 0.25) / 0.75);  // 2/3
  EXPECT_EQ(r.tasks[1].accuracy, (double)(2.0f / 3.0f));        // 2 of 3, a float32 mean
  EXPECT_DOUBLE_EQ(r.tasks[1].centered, ((double)(2.0f / 3.0f) - 0.5) / 0.5);
  EXPECT_DOUBLE_EQ(r.core, (r.tasks[0].centered + r.tasks[1].centered) / 2);

  // LM: greedy "next byte = current byte + 1". The scored span starts after the stripped
  // prompt "<context>=", so a continuation is right when it runs on from '>'.
  write(dir + "/core.yaml",
        "icl_tasks:\n- label: lm\n  dataset_uri: lm.jsonl\n  num_fewshot: [0]\n"
        "  icl_task_type: language_modeling\n  continuation_delimiter: '='\n");
  write(dir + "/eval_meta_data.csv", "Eval Task,Random baseline\nlm,0\n");
  write(dir + "/eval_data/lm.jsonl",
        "{\"context\": \"k<\", \"continuation\": \">?\"}\n"                // right
        "{\"context\": \"k<\", \"continuation\": \">A\"}\n"                // '>'+1 is '?', not 'A': wrong
        "{\"context\": \"abc<  \", \"continuation\": \">?@AB\"}\n"         // right
        "{\"context\": \"\\u00a0mn<\\u3000\", \"continuation\": \">\"}\n"  // right (trim itself: the reference test)
        "{\"context\": \"q;\", \"continuation\": \"?\"}\n");               // '='+1 is '>', not '?': wrong
  auto next = rule_fn([](int64_t cur, int64_t v) { return v == cur + 1 ? 1.0f : 0.0f; });
  r = core_evaluate(next, tok, o, nullptr);
  EXPECT_EQ(r.tasks[0].accuracy, (double)0.6f);
  EXPECT_DOUBLE_EQ(r.tasks[0].centered, (double)0.6f);
  remove_tree(dir);
}

// rows of many examples per forward give what one row per forward gives, and the ranks'
// strided shares add up to the whole
TEST(CoreEval, BatchSizeAndRanksDoNotChangeTheResult) {
  GPT model = tiny_model();
  Tokenizer tok = byte_tokenizer(false);
  CoreOptions o;
  o.bundle_dir = kBundle, o.threads = 2;
  o.batch_size = 1;
  CoreResult one = core_evaluate(model, tok, o, nullptr);
  o.batch_size = 16;
  CoreResult many = core_evaluate(model, tok, o, nullptr);
  ASSERT_EQ(one.tasks.size(), many.tasks.size());
  for (size_t t = 0; t < one.tasks.size(); t++)
    EXPECT_EQ(one.tasks[t].accuracy, many.tasks[t].accuracy) << one.tasks[t].label;
  EXPECT_EQ(one.core, many.core);
  // a token budget that splits the batches differently
  o.max_batch_tokens = 100;
  EXPECT_EQ(core_evaluate(model, tok, o, nullptr).core, one.core);

  auto fn = core_gpt_logits_fn(model);
  for (const auto& task : core_bundle_load(kBundle)) {
    auto data = core_load_task_data(kBundle + "/eval_data/" + task.dataset_uri, task.type);
    core_shuffle_truncate(data, -1);
    auto whole = core_evaluate_task(fn, tok, task, data, o, 0, 1);
    std::vector<float> sum(whole.size(), 0.0f);
    for (int rank = 0; rank < 3; rank++) {
      auto part = core_evaluate_task(fn, tok, task, data, o, rank, 3);
      for (size_t i = 0; i < part.size(); i++) {
        if ((int64_t)i % 3 != rank) {
          EXPECT_EQ(part[i], 0.0f);
        }
        sum[i] += part[i];
      }
    }
    EXPECT_EQ(sum, whole) << task.label;
  }
}

TEST(CoreEval, TruncationKeepsTheLastTokensAndShiftsTheSpan) {
  auto tasks = core_bundle_load(kBundle);
  auto data = core_load_task_data(kBundle + "/eval_data/" + tasks[1].dataset_uri, tasks[1].type);
  Tokenizer tok = byte_tokenizer(false);
  CoreSequences full = core_prepare_example(tasks[1], data, 3, tok, 0);
  CoreSequences cut = core_prepare_example(tasks[1], data, 3, tok, 40);
  for (size_t r = 0; r < full.tokens.size(); r++) {
    ASSERT_GT(full.tokens[r].size(), 40u);
    int64_t crop = (int64_t)full.tokens[r].size() - 40;
    EXPECT_EQ(cut.tokens[r], std::vector<int32_t>(full.tokens[r].begin() + crop, full.tokens[r].end()));
    EXPECT_EQ(cut.start[r], full.start[r] - crop);
    EXPECT_EQ(cut.end[r], 40);
  }
}

TEST(CoreEval, CsvAndTaskLineLookLikeUpstream) {
  CoreResult r;
  r.tasks.push_back({"hellaswag_zeroshot", "multiple_choice", 0, 0.25, 0.0, 100, 1.234});
  r.tasks.push_back({"jeopardy", "language_modeling", 10, 0.125, 0.125, 8, 0.5});
  r.core = 0.0625;
  // f"{'Task':<35}, {'Accuracy':<10}, {'Centered':<10}" and so on, typed out
  EXPECT_EQ(core_csv(r),
            "Task                               , Accuracy  , Centered  \n"
            "hellaswag_zeroshot                 , 0.250000  , 0.000000  \n"
            "jeopardy                           , 0.125000  , 0.125000  \n"
            "CORE                               ,           , 0.062500  \n");
  EXPECT_EQ(
      core_task_line(r.tasks[1]),
      "Evaluating: jeopardy (10-shot, type: language_modeling)... accuracy: 0.1250 | centered: 0.1250 | time: 0.50s");
  setenv("NANOCHAT_BASE_DIR", "/tmp/nc_base", 1);
  EXPECT_EQ(core_csv_path(42), "/tmp/nc_base/base_eval/base_model_000042.csv");
}

// ---- bad input ------------------------------------------------------------------------------
static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CoreEval, BadInputGivesClearErrors) {
  std::string base = make_temp_dir();
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  EXPECT_NE(error_of([] { core_eval_bundle_dir(""); }).find("run `nanochat download eval-bundle`"), std::string::npos);
  EXPECT_NE(error_of([&] { core_eval_bundle_dir(base + "/nope"); }).find("--eval-bundle"), std::string::npos);

  write(
      base + "/t.jsonl",
      "{\"query\": \"a\", \"choices\": [\"x\"], \"gold\": 0}\n{\"query\": \"b\", \"choices\": [\"x\"], \"gold\": 0\n");
  EXPECT_NE(
      error_of([&] { core_load_task_data(base + "/t.jsonl", "multiple_choice"); }).find("t.jsonl:2: not valid JSON"),
      std::string::npos);
  write(base + "/t.jsonl", "{\"query\": \"a\", \"choices\": [\"x\"], \"gold\": 3}\n");
  EXPECT_NE(error_of([&] { core_load_task_data(base + "/t.jsonl", "multiple_choice"); }).find("t.jsonl:1: gold 3"),
            std::string::npos);
  write(base + "/t.jsonl", "{\"context\": \"a\"}\n");
  EXPECT_NE(error_of([&] {
              core_load_task_data(base + "/t.jsonl", "language_modeling");
            }).find("t.jsonl:1: no \"continuation\" field"),
            std::string::npos);

  std::string b = base + "/bundle";
  write(b + "/core.yaml", "icl_tasks:\n- {label: x, dataset_uri: x.jsonl, num_fewshot: [0], icl_task_type: ranking}\n");
  write(b + "/eval_meta_data.csv", "Eval Task,Random baseline\nx,0\n");
  EXPECT_NE(error_of([&] { core_bundle_load(b); }).find("unknown icl_task_type 'ranking'"), std::string::npos);
  write(b + "/core.yaml", "icl_tasks:\n- {label: y, dataset_uri: x.jsonl, num_fewshot: [0], icl_task_type: schema}\n");
  EXPECT_NE(error_of([&] { core_bundle_load(b); }).find("no 'Random baseline' row for task y"), std::string::npos);
  remove_tree(base);
}

// ---- the zip ----------------------------------------------------------------------------------
static std::string zip_of_fixture(const std::string& dir, bool with_core_yaml = true) {
  std::string zip = dir + (with_core_yaml ? "/eval_bundle.zip" : "/other.zip");
  std::string py =
      "import zipfile, os, sys\n"
      "src = sys.argv[1]\n"
      "with zipfile.ZipFile(sys.argv[2], 'w', zipfile.ZIP_DEFLATED) as z:\n"
      "    for root, _, files in os.walk(src):\n"
      "        for f in files:\n"
      "            if f == 'core.yaml' and sys.argv[3] == '0': continue\n"
      "            p = os.path.join(root, f)\n"
      "            z.write(p, 'eval_bundle/' + os.path.relpath(p, src))\n";
  write(dir + "/mkzip.py", py);
  auto r = run_shell(kPython + " " + dir + "/mkzip.py " + kBundle + " " + zip + " " + (with_core_yaml ? "1" : "0"));
  EXPECT_EQ(r.rc, 0) << r.err;
  return zip;
}

TEST(CoreEval, BundleZipIsVerifiedAndPlacedAtomically) {
  std::string dir = make_temp_dir();
  std::string zip = zip_of_fixture(dir);
  core_bundle_verify_zip(zip);
  core_bundle_place(zip, dir + "/placed");
  EXPECT_EQ(read_file(dir + "/placed/core.yaml"), read_file(kBundle + "/core.yaml"));
  EXPECT_EQ(read_file(dir + "/placed/eval_data/lm_shots.jsonl"), read_file(kBundle + "/eval_data/lm_shots.jsonl"));
  EXPECT_EQ(core_bundle_load(dir + "/placed").size(), 4u);
  EXPECT_FALSE(path_exists(dir + "/placed.tmp." + std::to_string(getpid())));

  std::string no_yaml = zip_of_fixture(dir, false);
  EXPECT_NE(error_of([&] { core_bundle_verify_zip(no_yaml); }).find("has no eval_bundle/core.yaml"), std::string::npos);
  write(dir + "/junk.zip", "not a zip at all");
  EXPECT_NE(error_of([&] { core_bundle_verify_zip(dir + "/junk.zip"); }).find("not a readable zip"), std::string::npos);
  EXPECT_NE(error_of([&] { core_bundle_place(dir + "/junk.zip", dir + "/p2"); }).find("not a readable zip"),
            std::string::npos);
  EXPECT_FALSE(path_exists(dir + "/p2"));
  remove_tree(dir);
}

TEST(CoreEval, DownloadSubcommandFetchesAndPlacesTheBundle) {
  std::string dir = make_temp_dir();
  std::string zip = zip_of_fixture(dir);
  TestServer server;
  server.files["/b/eval_bundle.zip"] = read_file(zip);
  server.drops = 1, server.drop_at = (long long)server.files["/b/eval_bundle.zip"].size() / 2;  // resumes
  std::string base = dir + "/base";
  auto r = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin + " download eval-bundle --retry-delay 0.01 --url " +
                     server.url("/b/eval_bundle.zip"));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(read_file(base + "/eval_bundle/core.yaml"), read_file(kBundle + "/core.yaml"));
  EXPECT_EQ(core_bundle_load(core_eval_bundle_dir(base + "/eval_bundle")).size(), 4u);
  // a second run finds it in place
  r = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin + " download eval-bundle --url " +
                server.url("/b/eval_bundle.zip"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("already"), std::string::npos) << r.out << r.err;
  remove_tree(dir);
}
