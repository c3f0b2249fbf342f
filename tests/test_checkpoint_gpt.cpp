// Tests for checkpoint_gpt (upstream's build_model), `nanochat import / export / generate`.
// Independent answers come from Python (tests/fixtures/gpt_io_fixtures.py): upstream-style
// checkpoints written by torch.save, logits and greedy continuations from the PyTorch
// reference (tests/fixtures/gpt_reference.py), token ids from tiktoken, exported tensors read
// back by the safetensors package.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/utf8.h"
#include "nanochat/tokenizer.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

const std::string kScript = std::string(NANOCHAT_SOURCE_DIR) + "/tests/fixtures/gpt_io_fixtures.py";
const std::string kBin = NANOCHAT_BIN;
const std::string kPrompt = "the caf\xc3\xa9 costs 3\xe2\x82\xac \xf0\x9f\x98\x80";  // tokens split é, €, 😀

// written by ctest's gpt_io_fixtures step, or here when missing
const std::string& fixtures() {
  static const std::string dir = [] {
    std::string d = NANOCHAT_GPT_IO_FIXTURES;
    if (!path_exists(d + "/expected.json")) {
      CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " write " + d);
      if (r.rc != 0) throw std::runtime_error("fixture script failed: " + r.err);
    }
    return d;
  }();
  return dir;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

CommandResult run_cli(const std::string& base, const std::string& args) {
  return run_shell("NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + kBin + " " + args);
}

json python_json(const std::string& args) {
  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " " + args);
  EXPECT_EQ(r.rc, 0) << r.err;
  return json::parse(r.out);
}

// a base dir holding the imported fixture d2 (steps 5 and 10) and its tokenizer
std::string imported_base() {
  std::string base = temp_dir();
  CommandResult r = run_cli(base, "import --from " + fixtures() + "/d2");
  EXPECT_EQ(r.rc, 0) << r.err;
  return base;
}

// sets NANOCHAT_BASE_DIR for in-process calls while in scope
struct BaseDirScope {
  explicit BaseDirScope(const std::string& d) { setenv("NANOCHAT_BASE_DIR", d.c_str(), 1); }
  ~BaseDirScope() { unsetenv("NANOCHAT_BASE_DIR"); }
};

GPTConfig tiny_config() {
  GPTConfig c;
  c.sequence_len = 32;
  c.vocab_size = 300;
  c.n_layer = 2;
  c.n_head = 2;  // head dim 64
  c.n_kv_head = 2;
  c.n_embd = 128;
  c.window_pattern = "SL";
  return c;
}

GPT tiny_model(torch::ScalarType dtype = torch::kFloat32) { return perturbed_gpt(tiny_config(), 5, 0.05, dtype); }

NamedTensors cpu_copy(const GPT& m) {
  NamedTensors out;
  for (auto& [name, p] : gpt_named_parameters(m)) out.emplace_back(name, p.detach().clone());
  return out;
}

torch::Tensor fixture_idx() {
  std::string bytes = read_file(fixtures() + "/idx.bin");
  torch::Tensor t = torch::empty({2, 32}, torch::kLong);
  EXPECT_EQ(bytes.size(), (size_t)t.numel() * 8);
  std::memcpy(t.data_ptr(), bytes.data(), std::min(bytes.size(), (size_t)t.numel() * 8));
  return t;
}

torch::Tensor fixture_logits(const std::string& name) {
  std::string bytes = read_file(fixtures() + "/ref_logits_" + name + ".bin");
  torch::Tensor t = torch::empty({2, 32, 300}, torch::kFloat32);
  EXPECT_EQ(bytes.size(), (size_t)t.numel() * 4);
  std::memcpy(t.data_ptr(), bytes.data(), std::min(bytes.size(), (size_t)t.numel() * 4));
  return t;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

void expect_one_error_line(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

}  // namespace

// ---- build_model in process --------------------------------------------------------------

TEST(CheckpointGpt, SaveLoadGivesIdenticalLogits) {
  std::string base = temp_dir();
  BaseDirScope scope(base);
  GPT m = tiny_model();
  nlohmann::ordered_json meta;
  meta["step"] = 3;
  meta["model_config"] = gpt_config_to_json(tiny_config());
  std::string dir = checkpoint_dir("base", "d2");
  checkpoint_save_model(dir, 3, gpt_named_parameters(m), meta);
  checkpoint_mark_complete(dir, 3, 0);

  LoadedGPT l = checkpoint_load_gpt("base", "", -1, torch::kCPU, torch::kFloat32, 300);
  EXPECT_EQ(l.ref.step, 3);
  EXPECT_EQ(l.ref.dir, dir);
  EXPECT_EQ(l.config.n_layer, 2);
  EXPECT_FALSE(l.model->is_training());
  torch::NoGradGuard ng;
  torch::Tensor idx = fixture_idx();
  EXPECT_TRUE(torch::equal(m->forward(idx), l.model->forward(idx)));

  // the tokenizer's vocab must be the model's
  try {
    checkpoint_load_gpt("base", "d2", 3, torch::kCPU, torch::kFloat32, 299);
    FAIL() << "vocab mismatch not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size is 300"), std::string::npos) << e.what();
  }
}

TEST(CheckpointGpt, CastsToTheDtypesTheModelKeeps) {
  GPT src = tiny_model();
  NamedTensors fp32 = cpu_copy(src);
  // a bf16 compute model keeps bf16 embedding tables and fp32 masters
  GPT bf(tiny_config(), torch::kCPU, torch::kBFloat16);
  checkpoint_load_into_gpt(bf, fp32, "test");
  EXPECT_EQ(bf->wte->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf->ve[1]->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf->lm_head->weight.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(bf->wte->weight, src->wte->weight.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(bf->lm_head->weight, src->lm_head->weight));
  // a bf16 checkpoint (upstream after a GPU run) on the CPU: fp32, values exactly the bf16 ones
  NamedTensors bf16 = cpu_copy(src);
  for (auto& [name, t] : bf16) t = t.to(torch::kBFloat16);
  GPT f(tiny_config(), torch::kCPU, torch::kFloat32);
  checkpoint_load_into_gpt(f, bf16, "test");
  EXPECT_EQ(f->wte->weight.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(f->wte->weight, src->wte->weight.to(torch::kBFloat16).to(torch::kFloat32)));
  // "_orig_mod." prefixes and missing lambdas (old checkpoints) are fixed up
  NamedTensors old;
  for (auto& [name, t] : cpu_copy(src))
    if (name != "resid_lambdas" && name != "x0_lambdas") old.emplace_back("_orig_mod." + name, t);
  checkpoint_load_into_gpt(f, old, "test");
  EXPECT_TRUE(torch::equal(f->resid_lambdas, torch::ones({2})));
  EXPECT_TRUE(torch::equal(f->x0_lambdas, torch::zeros({2})));
  EXPECT_TRUE(torch::equal(f->lm_head->weight, src->lm_head->weight));
}

TEST(CheckpointGpt, BadTensorsNameTheKeyAndChangeNothing) {
  GPT src = tiny_model();
  GPT dst = tiny_model();
  {
    torch::NoGradGuard ng;
    dst->lm_head->weight.fill_(0.25);
  }
  NamedTensors good = cpu_copy(src);
  auto with = [&](const std::function<void(NamedTensors&)>& edit) {
    NamedTensors t = good;
    edit(t);
    return t;
  };
  struct Case {
    NamedTensors tensors;
    std::string needle;
  };
  std::vector<Case> cases = {
      {with([](NamedTensors& t) { t.erase(t.begin() + 4); }), "missing tensor 'transformer.wte.weight'"},
      {with([](NamedTensors& t) { t.emplace_back("transformer.h.0.attn.bias", torch::zeros({3})); }),
       "unexpected tensor 'transformer.h.0.attn.bias'"},
      {with([](NamedTensors& t) { t[5].second = t[5].second.to(torch::kInt64); }), "'transformer.h.0.attn.c_q.weight'"},
      {with([](NamedTensors& t) {
         t.back().second = torch::zeros({320, 64});
       }),
       "'value_embeds.1.weight'"},
  };
  ASSERT_EQ(good[4].first, "transformer.wte.weight");
  ASSERT_EQ(good[5].first, "transformer.h.0.attn.c_q.weight");
  ASSERT_EQ(good.back().first, "value_embeds.1.weight");
  for (const Case& c : cases) {
    try {
      checkpoint_load_into_gpt(dst, c.tensors, "ckpt.safetensors");
      ADD_FAILURE() << "no error for " << c.needle;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("ckpt.safetensors: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    }
    EXPECT_TRUE(torch::equal(dst->lm_head->weight, torch::full_like(dst->lm_head->weight, 0.25)));
  }
}

// ---- import -------------------------------------------------------------------------------

TEST(Import, UpstreamCheckpointGivesTheReferenceLogits) {
  std::string base = imported_base();
  BaseDirScope scope(base);
  std::string dir = base + "/base_checkpoints/d2";  // the tag from the directory name
  for (int64_t step : {5, 10}) EXPECT_TRUE(checkpoint_is_complete(dir, step)) << step;
  EXPECT_FALSE(path_exists(dir + "/optim_000010_rank0.safetensors"));
  // tensors keep upstream's dtypes: bf16 tables, fp32 masters, names without _orig_mod.
  SafetensorsFile f = safetensors_load(checkpoint_model_path(dir, 10));
  std::map<std::string, torch::Tensor> by_name(f.tensors.begin(), f.tensors.end());
  ASSERT_TRUE(by_name.count("transformer.wte.weight"));
  EXPECT_EQ(by_name["transformer.wte.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(by_name["lm_head.weight"].scalar_type(), torch::kFloat32);
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  EXPECT_EQ(tok.vocab_size(), 300);
  EXPECT_EQ(tok.bos_id(), 291);
  // upstream's meta holds "min_val_bpb": Infinity (Python's json.dump); ours is standard JSON,
  // where an infinity is null (read back as infinity by base-train and sft)
  ASSERT_NE(read_file(fixtures() + "/d2/meta_000010.json").find("\"min_val_bpb\": Infinity"), std::string::npos);
  nlohmann::ordered_json meta = checkpoint_read_json(checkpoint_meta_path(dir, 10));
  ASSERT_TRUE(meta["loop_state"].contains("min_val_bpb")) << meta.dump();
  EXPECT_TRUE(meta["loop_state"]["min_val_bpb"].is_null()) << meta.dump();
  EXPECT_EQ(meta["val_bpb"], 1.5);

  torch::NoGradGuard ng;
  torch::Tensor idx = fixture_idx();
  for (std::string step : {"000005", "000010"}) {
    LoadedGPT l = checkpoint_load_gpt("base", "", std::stoll(step), torch::kCPU, torch::kFloat32, tok.vocab_size());
    double diff = max_abs_diff(l.model->forward(idx), fixture_logits(step));
    EXPECT_LT(diff, 1e-4) << "step " << step;
    std::printf("[import] step %s: max |logits - reference| = %.3g\n", step.c_str(), diff);
  }
  EXPECT_EQ(checkpoint_load_gpt("base", "", -1, torch::kCPU, torch::kFloat32, 300).ref.step, 10);
}

TEST(Import, OldCheckpointIsPatched) {
  std::string base = temp_dir();
  // no tokenizer.tiktoken in old/: the one already in $BASE/tokenizer is used
  CommandResult r0 = run_cli(base, "import --from " + fixtures() + "/old");
  expect_one_error_line(r0, "no tokenizer");
  CommandResult r = run_cli(
      base, "import --from " + fixtures() + "/old --tokenizer " + fixtures() + "/d2/tokenizer.tiktoken");
  ASSERT_EQ(r.rc, 0) << r.err;
  BaseDirScope scope(base);
  LoadedGPT l = checkpoint_load_gpt("base", "d2", 7, torch::kCPU, torch::kFloat32, 300);  // tag d<n_layer>
  EXPECT_EQ(l.config.window_pattern, "L");
  EXPECT_EQ(l.meta["model_config"]["window_pattern"], "L");
  torch::NoGradGuard ng;
  EXPECT_LT(max_abs_diff(l.model->forward(fixture_idx()), fixture_logits("old")), 1e-4);
}

TEST(Import, RefusesToOverwriteWithoutForce) {
  std::string base = imported_base();
  std::string model = base + "/base_checkpoints/d2/model_000010.safetensors";
  std::string before = read_file(model);
  CommandResult r = run_cli(base, "import --from " + fixtures() + "/d2");
  expect_one_error_line(r, "model_000005.safetensors already exists");
  EXPECT_EQ(read_file(model), before);
  // a different tokenizer in $BASE is not replaced silently
  std::string tok_json = read_file(base + "/tokenizer/tokenizer.json");
  std::string ranks = base + "/other.tiktoken";
  std::string text = read_file(fixtures() + "/d2/tokenizer.tiktoken");
  text = text.substr(0, text.rfind('\n', text.size() - 2) + 1);  // one merge fewer
  {
    std::FILE* f = std::fopen(ranks.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  CommandResult r2 = run_cli(base, "import --from " + fixtures() + "/d2 --model-tag x --tokenizer " + ranks);
  expect_one_error_line(r2, "different tokenizer");
  EXPECT_EQ(read_file(base + "/tokenizer/tokenizer.json"), tok_json);
  EXPECT_FALSE(path_exists(base + "/base_checkpoints/x"));
  CommandResult r3 = run_cli(base, "import --from " + fixtures() + "/d2 --force --step 10");
  EXPECT_EQ(r3.rc, 0) << r3.err;
  // a tag is one folder name: "../../x" would have written beside the base dir
  CommandResult r4 = run_cli(base, "import --from " + fixtures() + "/d2 --model-tag ../../x");
  expect_one_error_line(r4, "--model-tag '../../x' is not a folder name");
  EXPECT_FALSE(path_exists(base + "/../x"));
}

TEST(Import, BadStateDictsFailBeforeWritingAnything) {
  struct Case {
    std::string dir, needle;
  };
  for (const Case& c : std::vector<Case>{{"bad_dtype", "'transformer.h.1.mlp.c_fc.weight' has dtype Long"},
                                         {"bad_missing", "missing tensor 'lm_head.weight'"},
                                         {"bad_extra", "unexpected tensor 'transformer.h.0.attn.bias'"},
                                         {"bad_shape", "'smear_gate.weight' is [1, 12]"}}) {
    std::string base = temp_dir();
    CommandResult r = run_cli(base, "import --from " + fixtures() + "/" + c.dir);
    expect_one_error_line(r, c.needle);
    EXPECT_NE(r.err.find("model_000001.pt"), std::string::npos) << r.err;
    EXPECT_FALSE(path_exists(base + "/base_checkpoints")) << c.dir;
    EXPECT_FALSE(path_exists(base + "/tokenizer")) << c.dir;
  }
}

// ---- export -------------------------------------------------------------------------------

TEST(Export, SafetensorsReadByPythonEqualTheUpstreamTensors) {
  std::string base = imported_base();
  std::string out = temp_dir() + "/sub/model.safetensors";
  CommandResult r = run_cli(base, "export --source base --step 10 --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  json check = python_json("check_export " + fixtures() + "/d2/model_000010.pt " + out);
  EXPECT_EQ(check["mismatches"], json::array());
  EXPECT_EQ(check["keys"], 21);  // 4 scalars, wte, 6 + 7 in the blocks, lm_head, smear_gate, ve 1
  json cfg = json::parse(read_file(parent_dir(out) + "/config.json"));
  EXPECT_EQ(cfg["source"], "base");
  EXPECT_EQ(cfg["model_tag"], "d2");
  EXPECT_EQ(cfg["step"], 10);
  json expected = json::parse(read_file(fixtures() + "/expected.json"));
  EXPECT_EQ(cfg["model_config"], expected["config"]);
  Tokenizer a = tokenizer_load(parent_dir(out)), b = tokenizer_load(base + "/tokenizer");
  EXPECT_EQ(a.ranks(), b.ranks());
  EXPECT_EQ(a.specials(), b.specials());
  EXPECT_EQ(read_file(parent_dir(out) + "/token_bytes.bin"), read_file(base + "/tokenizer/token_bytes.bin"));
}

TEST(Export, TruncatedCheckpointIsOneErrorAndOverwritesNothing) {
  std::string base = imported_base();
  std::string model = base + "/base_checkpoints/d2/model_000010.safetensors";
  std::string bytes = read_file(model);
  ASSERT_EQ(truncate(model.c_str(), (off_t)bytes.size() - 100), 0);
  std::string out_dir = temp_dir();
  std::FILE* f = std::fopen((out_dir + "/model.safetensors").c_str(), "wb");
  std::fputs("previous export", f);
  std::fclose(f);
  CommandResult r = run_cli(base, "export --out " + out_dir + "/model.safetensors");
  expect_one_error_line(r, "model_000010.safetensors");
  EXPECT_EQ(read_file(out_dir + "/model.safetensors"), "previous export");
  EXPECT_FALSE(path_exists(out_dir + "/config.json"));
  // generate reads the same file: the same kind of error
  CommandResult g = run_cli(base, "generate -p hi --max-tokens 2");
  expect_one_error_line(g, "model_000010.safetensors");
}

// ---- generate -----------------------------------------------------------------------------

TEST(Generate, GreedyEqualsTheReferenceArgmaxLoop) {
  std::string base = imported_base();
  CommandResult r = run_cli(base, "generate --temperature 0 --max-tokens 8 --json -p " + quote(kPrompt));
  ASSERT_EQ(r.rc, 0) << r.err;
  json out = json::parse(r.out);
  // prompt ids: <|bos|> then tiktoken's encoding
  json want_prompt = python_json("encode " + fixtures() + "/d2/tokenizer.tiktoken " + quote(kPrompt));
  want_prompt.insert(want_prompt.begin(), 291);
  EXPECT_EQ(out["prompt_ids"], want_prompt);
  json ref = python_json("greedy " + fixtures() + "/d2/model_000010.pt 8 " + quote(out["prompt_ids"].dump()));
  EXPECT_EQ(out["generated_ids"], ref["ids"]) << "reference min top-2 margin " << ref["min_margin"];
  ASSERT_EQ(out["logprobs"].size(), 8u);
  for (size_t i = 0; i < 8; i++)
    EXPECT_NEAR(out["logprobs"][i].get<double>(), ref["logprobs"][i].get<double>(), 1e-4) << i;
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  std::vector<int32_t> gen = out["generated_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(out["text"], tok.decode(gen));
}

TEST(Generate, SeededSamplingIsReproducibleAndStreamsWholeCharacters) {
  std::string base = imported_base();
  std::string args = "generate --temperature 1.0 --top-k 50 --max-tokens 24 -p " + quote(kPrompt);
  CommandResult a = run_cli(base, args + " --seed 7 --json");
  CommandResult b = run_cli(base, args + " --seed 7 --json");
  CommandResult c = run_cli(base, args + " --seed 8 --json");
  ASSERT_EQ(a.rc, 0) << a.err;
  json ja = json::parse(a.out), jb = json::parse(b.out), jc = json::parse(c.out);
  EXPECT_EQ(ja["generated_ids"], jb["generated_ids"]);
  EXPECT_NE(ja["generated_ids"], jc["generated_ids"]);
  // the same draws as gpt_generate in process
  BaseDirScope scope(base);
  LoadedGPT l = checkpoint_load_gpt("base", "", -1, torch::kCPU, torch::kFloat32, 300);
  std::vector<int64_t> want = gpt_generate(l.model, ja["prompt_ids"].get<std::vector<int64_t>>(), 24, 1.0, 50, 7);
  EXPECT_EQ(ja["generated_ids"].get<std::vector<int64_t>>(), want);
  // streamed text: the prompt, then exactly the decoded completion, valid UTF-8 throughout
  CommandResult s = run_cli(base, args + " --seed 7");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(s.out, kPrompt + ja["text"].get<std::string>() + "\n");
  EXPECT_TRUE(utf8_is_valid(s.out));
}

// ---- a training run's checkpoint directory -------------------------------------------------
// Crash states are made by hand (files and markers written as a crash would leave them), so
// every window of the re-save swap is checked, not only the ones a kill happens to hit.

namespace {

NamedTensors weights(float v) { return {{"w", torch::full({3}, v)}, {"b", torch::full({2}, -v)}}; }
nlohmann::ordered_json meta_of(int64_t step, float v) { return {{"step", step}, {"v", v}}; }

// step `step` of `dir` with model value v and `ranks` optimizer files, marked complete
void save_step(const std::string& dir, int64_t step, float v, int ranks) {
  checkpoint_save_model(dir, step, weights(v), meta_of(step, v));
  for (int r = 0; r < ranks; r++) checkpoint_save_optim(dir, step, r, weights(v + r), {{"rank", r}, {"v", v}});
  checkpoint_mark_complete(dir, step, ranks);
}

float model_value(const std::string& dir, int64_t step) {
  return checkpoint_load_model(dir, step).tensors.at(0).second[0].item<float>();
}

std::vector<std::string> dir_names(const std::string& dir) {
  CommandResult r = run_shell("ls -A " + dir);
  std::vector<std::string> names;
  std::istringstream in(r.out);
  for (std::string n; std::getline(in, n);) names.push_back(n);
  return names;
}

bool has_suffix_file(const std::string& dir, const std::string& suffix) {
  for (const std::string& n : dir_names(dir))
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  return false;
}

// a pid no process has: a child that has exited and been reaped
pid_t dead_pid() {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return p;
}

}  // namespace

TEST(CheckpointRunDir, TempFilesOfDeadProcessesGoThoseOfLiveOnesStay) {
  std::string dir = temp_dir() + "/d2";
  save_step(dir, 5, 1.0f, 1);
  pid_t sleeper = fork();
  if (sleeper == 0) {
    execlp("sleep", "sleep", "30", (char*)nullptr);
    _exit(127);
  }
  const std::string dead = dir + "/model_000010.safetensors.tmp." + std::to_string(dead_pid());
  const std::string live = dir + "/optim_000010_rank1.json.tmp." + std::to_string(sleeper);
  const std::string mine = dir + "/meta_000010.json.tmp." + std::to_string(getpid());
  const std::string other = dir + "/notes.tmp.txt";
  for (const std::string& p : {dead, live, mine, other}) std::ofstream(p) << "partial";
  EXPECT_EQ(checkpoint_recover_dir(dir), 1);
  EXPECT_FALSE(path_exists(dead));
  EXPECT_TRUE(path_exists(live)) << "a live process's temp file was removed";
  EXPECT_TRUE(path_exists(mine));
  EXPECT_TRUE(path_exists(other));
  EXPECT_EQ(model_value(dir, 5), 1.0f);
  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  EXPECT_EQ(checkpoint_recover_dir(dir), 1);  // its process is gone now
  EXPECT_FALSE(path_exists(live));
  EXPECT_EQ(checkpoint_recover_dir(temp_dir() + "/none"), 0);
}

TEST(CheckpointRunDir, ReSaveKeepsTheOldStepUntilItsCommitPoint) {
  std::string dir = temp_dir() + "/d2";
  save_step(dir, 5, 0.5f, 2);
  save_step(dir, 10, 1.0f, 2);
  // a re-save of step 10 that dies after rank 0's files, before rank 1's (no commit point)
  checkpoint_save_model(dir, 10, weights(2.0f), meta_of(10, 2.0f));
  checkpoint_save_optim(dir, 10, 0, weights(2.0f), {{"rank", 0}});
  EXPECT_TRUE(checkpoint_is_complete(dir, 10)) << "the old step lost its marker before the new one was written";
  EXPECT_EQ(model_value(dir, 10), 1.0f);
  EXPECT_EQ(checkpoint_find_last_step(dir), 10);
  EXPECT_EQ(checkpoint_recover_dir(dir), 4);  // the staged new model, meta and rank 0's two optimizer files
  EXPECT_FALSE(has_suffix_file(dir, ".next"));
  EXPECT_EQ(model_value(dir, 10), 1.0f);
  EXPECT_EQ(checkpoint_load_optim(dir, 10, 1)->state["v"], 1.0f);

  // a whole re-save replaces every file, on one rank fewer: rank 1's old files go
  save_step(dir, 10, 3.0f, 1);
  EXPECT_EQ(model_value(dir, 10), 3.0f);
  EXPECT_EQ(checkpoint_read_json(checkpoint_meta_path(dir, 10))["v"], 3.0f);
  EXPECT_EQ(checkpoint_load_optim(dir, 10, 0)->state["v"], 3.0f);
  EXPECT_FALSE(checkpoint_load_optim(dir, 10, 1).has_value());
  EXPECT_FALSE(has_suffix_file(dir, ".next"));
  nlohmann::ordered_json marker = checkpoint_read_json(checkpoint_done_path(dir, 10));
  EXPECT_EQ(marker["files"], nlohmann::ordered_json({"model_000010.safetensors", "meta_000010.json",
                                                     "optim_000010_rank0.safetensors", "optim_000010_rank0.json"}));
}

// the swap after the commit point, cut at each of its steps: readers never see a mix of old
// and new files as complete, and recovery always ends with the new step complete
TEST(CheckpointRunDir, AReSaveInterruptedAfterItsCommitPointIsFinished) {
  const std::vector<std::string> files = {"model_000010.safetensors", "meta_000010.json",
                                          "optim_000010_rank0.safetensors", "optim_000010_rank0.json"};
  for (int cut = 0; cut <= (int)files.size() + 1; cut++) {
    SCOPED_TRACE("cut " + std::to_string(cut));
    std::string dir = temp_dir() + "/d2";
    save_step(dir, 5, 0.5f, 1);
    save_step(dir, 10, 1.0f, 1);
    checkpoint_save_model(dir, 10, weights(2.0f), meta_of(10, 2.0f));
    checkpoint_save_optim(dir, 10, 0, weights(2.0f), {{"rank", 0}, {"v", 2.0f}});
    for (const std::string& f : files) ASSERT_TRUE(path_exists(dir + "/" + f + ".next")) << f;
    // the commit point: the new marker as done_<S>.next (written here as the format says)
    std::ofstream(dir + "/done_000010.next") << nlohmann::json({{"step", 10}, {"files", files}}).dump();
    if (cut >= 1) unlink((dir + "/done_000010").c_str());  // the old marker goes first
    for (int i = 0; i + 1 < cut && i < (int)files.size(); i++)
      std::rename((dir + "/" + files[i] + ".next").c_str(), (dir + "/" + files[i]).c_str());
    if (cut == 0) {
      EXPECT_EQ(model_value(dir, 10), 1.0f);  // all old files, old marker: the old step
    } else {
      EXPECT_FALSE(checkpoint_is_complete(dir, 10));
      EXPECT_EQ(checkpoint_find_last_step(dir), 5);
    }
    EXPECT_EQ(checkpoint_saved_steps(dir), (std::vector<int64_t>{5, 10}));
    EXPECT_GE(checkpoint_recover_dir(dir), 1);
    EXPECT_TRUE(checkpoint_is_complete(dir, 10));
    EXPECT_EQ(model_value(dir, 10), 2.0f);
    EXPECT_EQ(checkpoint_read_json(checkpoint_meta_path(dir, 10))["v"], 2.0f);
    EXPECT_EQ(checkpoint_load_optim(dir, 10, 0)->state["v"], 2.0f);
    EXPECT_FALSE(has_suffix_file(dir, ".next"));
  }
}

TEST(CheckpointRunDir, KeepLastPrunesOnlyOlderCompleteSteps) {
  std::string dir = temp_dir() + "/d2";
  for (int64_t s : {1, 2, 3, 4}) save_step(dir, s, (float)s, 2);
  checkpoint_save_model(dir, 5, weights(5.0f), meta_of(5, 5.0f));  // being written: no marker
  save_step(dir, 9, 9.0f, 2);  // a later step (an earlier run's, when resumed from before it)
  save_step(dir, 6, 6.0f, 2);
  EXPECT_TRUE(checkpoint_prune(dir, 6, 0).empty());
  EXPECT_EQ(checkpoint_prune(dir, 6, 2), (std::vector<int64_t>{3, 2, 1}));
  for (int64_t s : {1, 2, 3}) {
    EXPECT_FALSE(path_exists(checkpoint_done_path(dir, s)));
    EXPECT_FALSE(path_exists(checkpoint_model_path(dir, s)));
    EXPECT_FALSE(path_exists(checkpoint_optim_json_path(dir, s, 1)));
  }
  for (int64_t s : {4, 6, 9}) EXPECT_TRUE(checkpoint_is_complete(dir, s)) << s;
  EXPECT_TRUE(path_exists(checkpoint_model_path(dir, 5)));
  EXPECT_EQ(checkpoint_prune(dir, 6, 1), (std::vector<int64_t>{4}));
  EXPECT_TRUE(checkpoint_is_complete(dir, 6));

  // a marker naming a file outside its step is refused, and nothing outside is touched
  save_step(dir, 7, 7.0f, 0);
  std::ofstream(dir + "/victim") << "x";
  std::ofstream(checkpoint_done_path(dir, 7)) << R"({"step": 7, "files": ["meta_000007.json", "../d2/victim"]})";
  EXPECT_THROW(checkpoint_prune(dir, 9, 1), Error);
  EXPECT_TRUE(path_exists(dir + "/victim"));
}

TEST(CheckpointRunDir, RemoveStepsForAFreshStartKeepsLiveTempFilesAndTheRest) {
  std::string dir = temp_dir() + "/d2";
  save_step(dir, 2, 2.0f, 1);
  save_step(dir, 4, 4.0f, 1);
  checkpoint_save_model(dir, 4, weights(5.0f), meta_of(4, 5.0f));  // staged re-save leftovers
  checkpoint_save_model(dir, 6, weights(6.0f), meta_of(6, 6.0f));  // unmarked
  const std::string live = dir + "/model_000008.safetensors.tmp." + std::to_string(getpid());
  std::ofstream(live) << "partial";
  std::ofstream(dir + "/metrics.jsonl") << "{}\n";
  EXPECT_EQ(checkpoint_saved_steps(dir), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(checkpoint_remove_steps(dir), (std::vector<int64_t>{2, 4, 6}));
  std::vector<std::string> left = dir_names(dir);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left,
            (std::vector<std::string>{"metrics.jsonl", "model_000008.safetensors.tmp." + std::to_string(getpid())}));
  EXPECT_TRUE(checkpoint_saved_steps(dir).empty());
}

// the rules through base-train: --keep-last, a fresh run into a tag with steps refused
// without --force, stale temp files cleaned when a run starts, --force deleting the old steps
TEST(CheckpointRunDir, BaseTrainKeepLastForceAndStaleFiles) {
  std::string base = imported_base(), data = base + "/data";  // the fixture's tokenizer (vocab 300)
  make_dirs(data);
  for (int f = 0; f < 2; f++) {
    std::ofstream out(data + "/part_" + std::to_string(f) + ".jsonl");
    for (int d = 0; d < 200; d++)
      out << json({{"text", "the cat sees the dog number " + std::to_string(d)}}).dump() << "\n";
  }
  const std::string dir = base + "/base_checkpoints/t";
  auto train = [&](int steps, const std::string& extra) {
    return run_cli(base,
                   "base-train --data " + data +
                       " --depth 2 --aspect-ratio 64 --head-dim 64 --window-pattern L"
                       " --max-seq-len 32 --device-batch-size 2 --total-batch-size 64 --eval-every -1"
                       " --core-metric-every -1 --sample-every -1 --tokenizer-threads 1 --save-every 2 --model-tag t"
                       " --num-iterations " +
                       std::to_string(steps) + " " + extra);
  };
  auto complete = [&] {
    std::vector<int64_t> steps;
    for (int64_t s : checkpoint_saved_steps(dir))
      if (checkpoint_is_complete(dir, s)) steps.push_back(s);
    return steps;
  };
  CommandResult r = train(6, "--keep-last 2");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(complete(), (std::vector<int64_t>{4, 6}));
  EXPECT_FALSE(path_exists(checkpoint_model_path(dir, 2)));

  const std::string dead = dir + "/model_000006.safetensors.tmp." + std::to_string(dead_pid());
  const std::string live = dir + "/meta_000006.json.tmp." + std::to_string(getpid());
  std::ofstream(dead) << "partial";
  std::ofstream(live) << "partial";
  r = train(6, "");
  expect_one_error_line(r, dir + " already has checkpoint step(s) 4, 6");
  EXPECT_NE(r.err.find("--resume latest"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(complete(), (std::vector<int64_t>{4, 6}));

  r = train(8, "--keep-last 2 --resume latest");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_FALSE(path_exists(dead));
  EXPECT_TRUE(path_exists(live));
  EXPECT_EQ(complete(), (std::vector<int64_t>{6, 8}));

  EXPECT_NE(train(6, "--force --resume latest").rc, 0);
  r = train(4, "--force");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("--force: removed step(s) 6, 8"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(complete(), (std::vector<int64_t>{2, 4}));
  EXPECT_FALSE(path_exists(checkpoint_model_path(dir, 8)));
  EXPECT_TRUE(path_exists(live));
  unlink(live.c_str());
}

// what runs/runcpu.sh does on a rerun: SFT into a tag that has steps is refused, and with
// --resume latest a finished SFT resumes at its last step and saves it again, through the
// re-save swap (no .next file left, the same weights, every step still complete)
TEST(CheckpointRunDir, SftRerunIsRefusedOrResumesAtItsLastStep) {
  std::string base = imported_base();
  const std::string dir = base + "/chatsft_checkpoints/d2";
  const std::string sft =
      "sft --mixture spelling --num-iterations 2 --device-batch-size 2 --max-seq-len 64"
      " --total-batch-size 256 --eval-every -1 --eval-tokens 256 --save-every 1";
  CommandResult r = run_cli(base, sft);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  ASSERT_TRUE(checkpoint_is_complete(dir, 1) && checkpoint_is_complete(dir, 2));
  NamedTensors before = checkpoint_load_model(dir, 2).tensors;

  r = run_cli(base, sft);
  expect_one_error_line(r, dir + " already has checkpoint step(s) 1, 2");

  r = run_cli(base, sft + " --resume latest");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE((r.out + r.err).find("resuming from " + dir + " step 2"), std::string::npos) << r.out << r.err;
  EXPECT_TRUE(checkpoint_is_complete(dir, 1) && checkpoint_is_complete(dir, 2));
  EXPECT_FALSE(has_suffix_file(dir, ".next"));
  NamedTensors after = checkpoint_load_model(dir, 2).tensors;
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); i++)
    EXPECT_TRUE(torch::equal(after[i].second, before[i].second)) << after[i].first;
}
