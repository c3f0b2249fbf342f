// Tests for the transformers interop: `nanochat import` of a transformers `nanochat` directory
// (single file and shards) and of upstream's October-2025 .pt, `nanochat export --format hf`,
// and the one-line refusals of bad files. Every expected value comes from transformers itself
// (tests/fixtures/hf_fixtures.py: a tiny random NanoChatForCausalLM saved with save_pretrained
// and a tokenizer.json trained by the tokenizers library); skipped when those are not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <thread>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/tokenizer/hf_json.h"
#include "hf_fixtures.h"
#include "http_raw_client.h"
#include "server_fixture.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

const std::string kScript = hf_fixtures_script();
const std::string kBin = NANOCHAT_BIN;
const HfFixtures& fixtures() { return hf_fixtures(); }

CommandResult run_cli(const std::string& base, const std::string& args) {
  return run_shell("NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + kBin + " " + args);
}

struct BaseDirScope {
  explicit BaseDirScope(const std::string& d) { setenv("NANOCHAT_BASE_DIR", d.c_str(), 1); }
  ~BaseDirScope() { unsetenv("NANOCHAT_BASE_DIR"); }
};

std::string import_into(const std::string& base, const std::string& dir, const std::string& extra = "") {
  CommandResult r = run_cli(base, "import --from " + dir + " " + extra);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.out;
}

LoadedGPT load(const std::string& base, const std::string& tag, const std::string& source = "base") {
  BaseDirScope scope(base);
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  return checkpoint_load_gpt(source, tag, -1, torch::kCPU, torch::kFloat32, tok.vocab_size());
}

torch::Tensor prompt_tensor(const json& ids) { return torch::tensor(ids.get<std::vector<int64_t>>()).view({1, -1}); }

// the largest |ours - transformers'| over every position and vocab entry of every prompt
double max_logit_diff(GPT& model, const json& prompts, const json& logits) {
  torch::NoGradGuard no_grad;
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); i++) {
    torch::Tensor ours = model->forward(prompt_tensor(prompts[i]))[0];
    std::vector<std::vector<float>> rows = logits[i].get<std::vector<std::vector<float>>>();
    std::vector<float> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    torch::Tensor theirs = torch::tensor(flat).view({(int64_t)rows.size(), -1});
    EXPECT_EQ(ours.sizes(), theirs.sizes());
    if (ours.sizes() != theirs.sizes()) return INFINITY;
    worst = std::max(worst, (ours - theirs).abs().max().item<double>());
  }
  return worst;
}

// greedy continuation through the KV cache: the prompt in one forward, then one token at a time
std::vector<int64_t> greedy_with_cache(GPT& model, const std::vector<int64_t>& prompt, int64_t n) {
  torch::NoGradGuard no_grad;
  KVCache cache = model->make_kv_cache(1, (int64_t)prompt.size() + n);
  torch::Tensor logits = model->forward(torch::tensor(prompt).view({1, -1}), &cache);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; i++) {
    out.push_back(logits[0][-1].argmax().item<int64_t>());
    logits = model->forward(torch::tensor(std::vector<int64_t>{out.back()}).view({1, 1}), &cache);
  }
  return out;
}

// a copy of the fixture's hf_d2 in a temp dir, for breaking
std::string copy_hf_dir() {
  std::string d = temp_dir() + "/hf";
  EXPECT_EQ(std::system(("cp -r " + fixtures().dir + "/hf_d2 " + d).c_str()), 0);
  return d;
}

// transformers' generate() on DIR for each prompt (tests/fixtures/hf_fixtures.py generate)
json hf_generate(const std::string& dir, const std::vector<std::vector<int64_t>>& prompts, int n, bool cache) {
  const std::string prompts_file = temp_dir() + "/prompts.json";
  std::ofstream(prompts_file) << json{{"prompts", prompts}}.dump();
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " generate " + dir + " " + prompts_file +
                               " " + std::to_string(n) + (cache ? " cache" : " nocache"));
  EXPECT_EQ(py.rc, 0) << py.err;
  return py.rc == 0 ? json::parse(py.out) : json();
}

// our greedy continuation cut after the first EOS: generate() stops there
std::vector<int64_t> greedy_until(GPT& model, const std::vector<int64_t>& prompt, int64_t n, int64_t eos) {
  std::vector<int64_t> out = gpt_generate(model, prompt, n, 0.0);
  auto it = std::find(out.begin(), out.end(), eos);
  if (it != out.end()) out.erase(it + 1, out.end());
  return out;
}

void expect_one_error_line(const CommandResult& r, const std::vector<std::string>& needles) {
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
}

}  // namespace

// (a) our logits of the imported model equal transformers' within 1e-5 (fp32: a handful of ulps
// of logits of size ~10 through two layers), and greedy decoding gives its 32 ids, both with
// the full forward and through the KV cache
TEST(HfImport, LogitsAndGreedyEqualTransformers) {
  NEEDS_TRANSFORMERS();
  const json& e = fixtures().expected;
  std::string base = temp_dir();
  std::string out = import_into(base, fixtures().dir + "/hf_d2");
  EXPECT_NE(out.find("base_checkpoints/d2"), std::string::npos) << out;
  LoadedGPT l = load(base, "d2");
  EXPECT_FALSE(l.config.value_embeds || l.config.smear || l.config.layer_scalars);
  EXPECT_EQ(l.config.rope_theta, 10000.0);
  EXPECT_EQ(l.config.norm_eps, 1e-6);
  EXPECT_EQ(l.config.qk_scale, 1.0);
  EXPECT_LT(max_logit_diff(l.model, e["prompts"], e["logits"]), 1e-5);
  for (size_t i = 0; i < e["prompts"].size(); i++) {
    std::vector<int64_t> prompt = e["prompts"][i].get<std::vector<int64_t>>();
    std::vector<int64_t> want = e["greedy"][i].get<std::vector<int64_t>>();
    EXPECT_EQ(gpt_generate(l.model, prompt, 32, 0.0), want) << "prompt " << i;
    EXPECT_EQ(greedy_with_cache(l.model, prompt, 32), want) << "prompt " << i << " (KV cache)";
  }
  // the tokenizer came with it: the prompts' text gives the library's ids
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  std::vector<int32_t> ids = tok.encode("The caf\xc3\xa9 costs 3\xe2\x82\xac \xf0\x9f\x98\x80");
  std::vector<int64_t> want = e["prompts"][0].get<std::vector<int64_t>>();
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), std::vector<int64_t>(want.begin() + 1, want.end()));
  EXPECT_EQ(tok.bos_id(), want[0]);
}

TEST(HfImport, ShardsGiveTheSameTensors) {
  NEEDS_TRANSFORMERS();
  std::string a = temp_dir(), b = temp_dir();
  import_into(a, fixtures().dir + "/hf_d2");
  import_into(b, fixtures().dir + "/hf_sharded", "--model-tag d2 --source sft --step 3");
  LoadedGPT la = load(a, "d2"), lb = load(b, "d2", "sft");
  EXPECT_EQ(lb.ref.step, 3);
  auto ta = checkpoint_gpt_tensors(la.model), tb = checkpoint_gpt_tensors(lb.model);
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); i++) {
    EXPECT_EQ(ta[i].first, tb[i].first);
    EXPECT_TRUE(torch::equal(ta[i].second, tb[i].second)) << ta[i].first;
  }
}

// the older architecture stays what it is through a save and a load, and its meta says so
TEST(HfImport, ArchitectureSurvivesSaveAndLoad) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2");
  LoadedGPT l = load(base, "d2");
  json mc = json::parse(l.meta["model_config"].dump());
  EXPECT_EQ(mc["value_embeds"], false);
  EXPECT_EQ(mc["smear"], false);
  EXPECT_EQ(mc["layer_scalars"], false);
  EXPECT_EQ(mc["qk_scale"], 1.0);
  EXPECT_EQ(mc["rope_theta"], 10000.0);
  for (auto& [name, t] : gpt_named_parameters(l.model))
    EXPECT_TRUE(name.find("lambda") == std::string::npos && name.find("smear") == std::string::npos &&
                name.find("value_embeds") == std::string::npos && name.find("ve_gate") == std::string::npos)
        << name;
  {
    BaseDirScope scope(base);
    nlohmann::ordered_json meta;
    meta["step"] = 1;
    meta["model_config"] = gpt_config_to_json(l.config);
    checkpoint_save_model(checkpoint_dir("sft", "again"), 1, checkpoint_gpt_tensors(l.model), meta);
    checkpoint_mark_complete(checkpoint_dir("sft", "again"), 1, 0);
  }
  LoadedGPT again = load(base, "again", "sft");
  EXPECT_FALSE(again.config.value_embeds || again.config.smear || again.config.layer_scalars);
  EXPECT_EQ(again.config.norm_eps, l.config.norm_eps);
  EXPECT_LT(max_logit_diff(again.model, fixtures().expected["prompts"], fixtures().expected["logits"]), 1e-5);
}

// SFT trains it as it is (no part of the current architecture appears), and the result
// exports to transformers' own class again
TEST(HfImport, SftKeepsTheArchitectureAndExportsAgain) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2");
  CommandResult r = run_cli(base,
                            "sft --mixture spelling --num-iterations 2 --device-batch-size 2 --max-seq-len 64"
                            " --total-batch-size 256 --eval-every -1 --eval-tokens 256");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  LoadedGPT l = load(base, "d2", "sft");
  EXPECT_FALSE(l.config.value_embeds || l.config.smear || l.config.layer_scalars);
  EXPECT_EQ(l.config.norm_eps, 1e-6);
  r = run_cli(base, "export --format hf --source sft --out " + base + "/exported");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(read_file(base + "/exported/config.json"))["model_type"], "nanochat");
}

// chat-web serves it: a greedy reply is transformers' greedy continuation of the rendered chat
TEST(HfImport, ChatWebServesTransformersGreedyReply) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2", "--source sft");
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  json conversation = {
      {"messages",
       {{{"role", "user"}, {"content", "The caf\xc3\xa9 costs"}}, {{"role", "assistant"}, {"content", ""}}}}};
  std::vector<int32_t> prompt = render_for_completion(tok, conversation);
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " greedy " + fixtures().dir + "/hf_d2 '" +
                               json(prompt).dump() + "' 12");
  ASSERT_EQ(py.rc, 0) << py.err;
  std::vector<int32_t> reply;
  for (int32_t id : json::parse(py.out).get<std::vector<int32_t>>()) {
    if (id == tok.special_id("<|assistant_end|>") || id == tok.bos_id()) break;
    reply.push_back(id);
  }
  ServerProcess server(kBin, base, {"--source", "sft", "--workers", "1", "-q"});
  ASSERT_GT(server.port(), 0) << server.log();
  wait_until_healthy(server.port());  // the model loads after the port opens
  json req = {
      {"messages", {{{"role", "user"}, {"content", "The caf\xc3\xa9 costs"}}}}, {"temperature", 0}, {"max_tokens", 12}};
  RawResponse r = raw_http(server.port(), "POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json got = json::parse(r.body);
  EXPECT_EQ(got["choices"][0]["message"]["content"], tok.decode(reply)) << r.body;
}

// (c) upstream's October-2025 .pt of the same weights (no value_embeds, no lambdas, no smear,
// unpadded vocab, no window_pattern) is the same model with torch's default norm eps
TEST(OldPtImport, ArchitectureFromTheTensorsGivesTransformersLogits) {
  NEEDS_TRANSFORMERS();
  const json& e = fixtures().expected;
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2");  // the tokenizer
  import_into(base, fixtures().dir + "/old_pt", "--model-tag old");
  LoadedGPT l = load(base, "old");
  EXPECT_FALSE(l.config.value_embeds || l.config.smear || l.config.layer_scalars);
  EXPECT_EQ(l.config.rope_theta, 10000.0);
  EXPECT_EQ(l.config.norm_eps, 0.0);
  EXPECT_EQ(l.config.window_pattern, "L");
  EXPECT_LT(max_logit_diff(l.model, e["prompts"], e["old_logits"]), 1e-5);
  for (size_t i = 0; i < e["prompts"].size(); i++)
    EXPECT_EQ(gpt_generate(l.model, e["prompts"][i].get<std::vector<int64_t>>(), 32, 0.0),
              e["old_greedy"][i].get<std::vector<int64_t>>());
}

// (b) our export loads in transformers without custom code and gives the same logits; its
// tokenizer gives our ids
TEST(HfExport, TransformersLoadsItWithTheSameLogitsAndIds) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2");
  std::string out = base + "/exported";
  CommandResult r = run_cli(base, "export --format hf --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(path_exists(out + "/" + f)) << f;
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " logits " + out + " " + fixtures().dir +
                               "/expected.json");
  ASSERT_EQ(py.rc, 0) << py.err;
  json got = json::parse(py.out);
  EXPECT_EQ(got["class"], "NanoChatForCausalLM");
  LoadedGPT l = load(base, "d2");
  EXPECT_LT(max_logit_diff(l.model, fixtures().expected["prompts"], got["logits"]), 1e-5);

  // the exported tokenizer.json read by AutoTokenizer: our ids on 200 kB of the mixed text
  std::string text = read_file(fixtures().dir + "/tok_text.txt").substr(0, 200000);
  while (!text.empty() && ((unsigned char)text.back() & 0xC0) == 0x80) text.pop_back();  // whole characters
  if (!text.empty() && (unsigned char)text.back() >= 0xC0) text.pop_back();
  std::string text_file = base + "/text.txt";
  std::ofstream(text_file, std::ios::binary) << text;
  py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " encode " + out + " " + text_file);
  ASSERT_EQ(py.rc, 0) << py.err;
  std::vector<int32_t> theirs = json::parse(py.out).get<std::vector<int32_t>>();
  EXPECT_EQ(tokenizer_load(base + "/tokenizer").encode(text), theirs);
}

// generate() as a user first calls it (no attention mask) continues the exported model as we
// do: the pad id is <|assistant_end|>, never the BOS every prompt starts with, and
// generation_config.json gives the ids a chat model needs
TEST(HfExport, GenerateEqualsOurGreedy) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  import_into(base, fixtures().dir + "/hf_d2");
  std::string out = base + "/exported";
  ASSERT_EQ(run_cli(base, "export --format hf --out " + out).rc, 0);
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  const int64_t bos = tok.bos_id(), eos = tok.special_id("<|assistant_end|>");
  json cfg = json::parse(read_file(out + "/config.json")),
       gen = json::parse(read_file(out + "/generation_config.json"));
  EXPECT_EQ(cfg["pad_token_id"], eos);
  EXPECT_NE(cfg["pad_token_id"], bos);
  EXPECT_EQ(gen["bos_token_id"], bos);
  EXPECT_EQ(gen["eos_token_id"], eos);
  EXPECT_EQ(gen["pad_token_id"], eos);
  const json& e = fixtures().expected;
  std::vector<std::vector<int64_t>> prompts;
  for (auto& p : e["prompts"]) prompts.push_back(p.get<std::vector<int64_t>>());
  ASSERT_EQ(prompts[0][0], bos);  // the case that went wrong: BOS at position 0
  json got = hf_generate(out, prompts, 32, true);
  ASSERT_TRUE(got.is_object());
  EXPECT_EQ(got["class"], "NanoChatForCausalLM");
  LoadedGPT l = load(base, "d2");
  for (size_t i = 0; i < prompts.size(); i++)
    EXPECT_EQ(got["tokens"][i].get<std::vector<int64_t>>(), greedy_until(l.model, prompts[i], 32, eos))
        << "prompt " << i;
}

// the current architecture (value embeddings, smear, per-layer scalars, windows): our own
// modeling code beside the weights, loaded with trust_remote_code, gives our logits
TEST(HfExport, CurrentArchitectureLoadsWithItsRemoteCode) {
  NEEDS_TRANSFORMERS();
  std::string base = temp_dir();
  GPTConfig c = tiny_gpt_config(265);
  c.sequence_len = 256;  // windows of 128 and 256: the 200-token prompt sees both
  c.n_layer = 3;
  GPT m = perturbed_gpt(c, 1, 0.1);
  {
    BaseDirScope scope(base);
    tokenizer_save(byte_tokenizer(), base + "/tokenizer");
    nlohmann::ordered_json meta;
    meta["step"] = 2;
    meta["model_config"] = gpt_config_to_json(c);
    checkpoint_save_model(checkpoint_dir("base", "d3"), 2, checkpoint_gpt_tensors(m), meta);
    checkpoint_mark_complete(checkpoint_dir("base", "d3"), 2, 0);
  }
  std::string out = base + "/exported";
  CommandResult r = run_cli(base, "export --format hf --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(path_exists(out + "/modeling_nanochat_cpp.py"));
  std::vector<std::vector<int64_t>> prompts = {{256, 72, 101, 108, 108, 111}, {}};
  for (int i = 0; i < 200; i++) prompts[1].push_back((i * 37 + 11) % 265);
  std::ofstream(base + "/prompts.json") << json{{"prompts", prompts}}.dump();
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " logits " + out + " " + base +
                               "/prompts.json");
  ASSERT_EQ(py.rc, 0) << py.err;
  json got = json::parse(py.out);
  EXPECT_EQ(got["class"], "NanochatCppForCausalLM");
  m->eval();
  EXPECT_LT(max_logit_diff(m, json(prompts), got["logits"]), 1e-5);

  // generate(): 32 tokens through transformers' cache (the prompt once, then one token a
  // forward; the 200-token prompt runs past the 128 window) and without it, both ours
  json cfg = json::parse(read_file(out + "/config.json"));
  EXPECT_EQ(cfg["num_hidden_layers"], 3);
  EXPECT_EQ(cfg["hidden_size"], c.n_embd);
  EXPECT_EQ(cfg["num_key_value_heads"], c.n_kv_head);
  EXPECT_EQ(cfg["max_position_embeddings"], 256);
  EXPECT_EQ(cfg["layer_types"],
            json({"sliding_attention", "full_attention", "full_attention"}));  // "SL", the last long
  EXPECT_EQ(cfg["sliding_window"], 129);
  const int64_t eos = byte_tokenizer().special_id("<|assistant_end|>");
  for (bool cache : {true, false}) {
    json gen = hf_generate(out, prompts, 32, cache);
    ASSERT_TRUE(gen.is_object());
    for (size_t i = 0; i < prompts.size(); i++) {
      std::vector<int64_t> want = greedy_until(m, prompts[i], 32, eos);
      EXPECT_EQ(gen["tokens"][i].get<std::vector<int64_t>>(), want) << "prompt " << i << (cache ? " (cache)" : "");
      std::vector<int64_t> lengths = gen["forward_lengths"][i].get<std::vector<int64_t>>();
      ASSERT_EQ(lengths.size(), want.size());
      EXPECT_EQ(lengths[0], (int64_t)prompts[i].size());
      for (size_t k = 1; k < lengths.size(); k++)
        EXPECT_EQ(lengths[k], cache ? 1 : (int64_t)(prompts[i].size() + k)) << "forward " << k;
    }
  }
}

TEST(HfExport, WithoutItsTokenizerIsOneLineAndWritesNothing) {
  std::string base = temp_dir();
  {
    BaseDirScope scope(base);
    GPT m = perturbed_gpt(tiny_gpt_config(265), 1, 0.01);
    nlohmann::ordered_json meta;
    meta["step"] = 2;
    meta["model_config"] = gpt_config_to_json(m->config);
    checkpoint_save_model(checkpoint_dir("base", "d2"), 2, checkpoint_gpt_tensors(m), meta);
    checkpoint_mark_complete(checkpoint_dir("base", "d2"), 2, 0);
  }
  CommandResult r = run_cli(base, "export --format hf --out " + base + "/exported");
  expect_one_error_line(r, {"tokenizer"});
  EXPECT_FALSE(path_exists(base + "/exported"));
}

// a corrupt or mismatched directory: one line naming the file and the tensor or field, and
// nothing written (no checkpoint, no tokenizer)
TEST(HfImport, BadDirectoriesAreOneLineAndWriteNothing) {
  NEEDS_TRANSFORMERS();
  auto expect_refused = [](const std::string& dir, const std::vector<std::string>& needles) {
    std::string base = temp_dir();
    CommandResult r = run_cli(base, "import --from " + dir);
    expect_one_error_line(r, needles);
    EXPECT_FALSE(path_exists(base + "/base_checkpoints")) << dir;
    EXPECT_FALSE(path_exists(base + "/tokenizer")) << dir;
  };
  auto edit_config = [](const std::string& dir, const std::function<void(json&)>& edit) {
    json c = json::parse(read_file(dir + "/config.json"));
    edit(c);
    std::ofstream(dir + "/config.json") << c.dump(2);
  };
  auto edit_tensors = [](const std::string& dir, const std::function<void(NamedTensors&)>& edit) {
    SafetensorsFile st = safetensors_load(dir + "/model.safetensors");
    edit(st.tensors);
    safetensors_save(dir + "/model.safetensors", st.tensors, st.metadata);
  };
  std::string d = copy_hf_dir();
  edit_tensors(d, [](NamedTensors& t) {
    for (auto& [name, x] : t)
      if (name == "model.layers.1.mlp.fc1.weight") x = x.narrow(0, 0, 128).contiguous();
  });
  expect_refused(d, {"model.safetensors", "model.layers.1.mlp.fc1.weight", "shape"});

  d = copy_hf_dir();
  edit_tensors(d, [](NamedTensors& t) {
    t.erase(
        std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "model.layers.0.self_attn.k_proj.weight"; }),
        t.end());
  });
  expect_refused(d, {"model.layers.0.self_attn.k_proj.weight", "missing"});

  d = copy_hf_dir();
  edit_tensors(d, [](NamedTensors& t) { t.emplace_back("model.layers.0.self_attn.q_proj.bias", torch::zeros({64})); });
  expect_refused(d, {"model.safetensors", "model.layers.0.self_attn.q_proj.bias"});

  d = copy_hf_dir();
  std::string st = read_file(d + "/model.safetensors");
  std::ofstream(d + "/model.safetensors", std::ios::binary) << st.substr(0, st.size() / 2);
  expect_refused(d, {"model.safetensors"});

  d = copy_hf_dir();
  edit_config(d, [](json& c) { c["model_type"] = "llama"; });
  expect_refused(d, {"config.json", "model_type", "llama"});
  const std::vector<std::pair<std::string, json>> unsupported = {{"hidden_act", "gelu"},
                                                                 {"tie_word_embeddings", true},
                                                                 {"attention_bias", true},
                                                                 {"intermediate_size", 100},
                                                                 {"final_logit_softcapping", nullptr}};
  for (const auto& field_value : unsupported) {
    d = copy_hf_dir();
    edit_config(d, [&](json& c) { c[field_value.first] = field_value.second; });
    expect_refused(d, {"config.json", field_value.first});
  }
  d = copy_hf_dir();
  edit_config(d, [](json& c) {
    c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
  });
  expect_refused(d, {"config.json", "rope_parameters"});

  d = temp_dir() + "/sharded";
  ASSERT_EQ(
      std::system(("cp -r " + fixtures().dir + "/hf_sharded " + d + " && rm " + d + "/model-00003-of-00009.safetensors")
                      .c_str()),
      0);
  expect_refused(d, {"model.safetensors.index.json", "model-00003-of-00009.safetensors"});

  d = copy_hf_dir();
  ASSERT_EQ(std::remove((d + "/tokenizer.json").c_str()), 0);
  expect_refused(d, {"tokenizer.json"});
}

// a transformers directory whose tokenizer has BpeTrainer's layout (specials at ids 0..8):
// the import permutes the vocab rows into our order, so our greedy continuation, in the
// file's ids, is transformers' own
TEST(HfImport, SpecialsFirstLayoutGivesTransformersGreedy) {
  NEEDS_TRANSFORMERS();
  const std::string dir = fixtures().dir + "/hf_specials_first";
  const json e = json::parse(read_file(fixtures().dir + "/expected_specials_first.json"));
  std::string base = temp_dir();
  import_into(base, dir);
  LoadedGPT l = load(base, "d2");
  const std::vector<int32_t> file_ids = tokenizer_read_hf_json(dir + "/tokenizer.json").file_ids;
  std::vector<int64_t> ours_of(file_ids.size());
  for (size_t i = 0; i < file_ids.size(); i++) ours_of[file_ids[i]] = (int64_t)i;
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  EXPECT_EQ(file_ids[tok.bos_id()], 0);  // <|bos|> is the trainer's id 0
  for (size_t i = 0; i < e["prompts"].size(); i++) {
    std::vector<int64_t> prompt;
    for (int64_t id : e["prompts"][i].get<std::vector<int64_t>>()) prompt.push_back(ours_of.at(id));
    std::vector<int64_t> got;
    for (int64_t id : gpt_generate(l.model, prompt, 32, 0.0)) got.push_back(file_ids.at(id));
    EXPECT_EQ(got, e["greedy"][i].get<std::vector<int64_t>>()) << "prompt " << i;
  }
}

// export undoes the import's permutation: tokenizer.json gets the file's own ids back, and
// transformers' greedy continuation of the exported model, in those ids, is the original's
TEST(HfExport, SpecialsFirstLayoutRoundTripsWithTheFilesIds) {
  NEEDS_TRANSFORMERS();
  const std::string dir = fixtures().dir + "/hf_specials_first";
  const json e = json::parse(read_file(fixtures().dir + "/expected_specials_first.json"));
  std::string base = temp_dir();
  import_into(base, dir);
  std::string out = base + "/exported";
  CommandResult r = run_cli(base, "export --format hf --out " + out);
  ASSERT_EQ(r.rc, 0) << r.err;
  // token -> id, the vocab's and the added tokens' (the trainer lists its specials in both)
  auto ids_of = [](const std::string& path) {
    json j = json::parse(read_file(path));
    std::map<std::string, int64_t> ids;
    for (auto& [token, id] : j["model"]["vocab"].items()) ids[token] = id.get<int64_t>();
    for (auto& a : j["added_tokens"]) {
      const std::string token = a["content"].get<std::string>();
      EXPECT_TRUE(!ids.count(token) || ids[token] == a["id"]) << path << ": " << token << " has two ids";
      ids[token] = a["id"].get<int64_t>();
    }
    return ids;
  };
  const std::map<std::string, int64_t> original = ids_of(dir + "/tokenizer.json");
  EXPECT_EQ(ids_of(out + "/tokenizer.json"), original);
  json cfg = json::parse(read_file(out + "/config.json"));
  EXPECT_EQ(cfg["bos_token_id"], original.at("<|bos|>"));
  EXPECT_EQ(cfg["eos_token_id"], original.at("<|assistant_end|>"));
  for (size_t i = 0; i < e["prompts"].size(); i++) {
    const json& want = e["greedy"][i];
    CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " greedy " + out + " '" +
                                 e["prompts"][i].dump() + "' " + std::to_string(want.size()));
    ASSERT_EQ(py.rc, 0) << py.err;
    EXPECT_EQ(json::parse(py.out), want) << "prompt " << i;
  }
  // a tokenizer trained afterwards drops the kept ids: its own export has ours
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  tokenizer_save(tok, base + "/tokenizer");
  ASSERT_EQ(run_cli(base, "export --format hf --out " + out + "2").rc, 0);
  EXPECT_EQ(json::parse(read_file(out + "2/config.json"))["bos_token_id"], tok.bos_id());
  EXPECT_NE(tok.bos_id(), original.at("<|bos|>"));
}

// hostile imports: each ends with one error line naming the file, in under 5 s and 1 GB RSS,
// and writes nothing
TEST(HfImport, HostileFilesEndInOneLineQuickly) {
  NEEDS_TRANSFORMERS();
  auto expect_quick_refusal = [](const std::string& dir, const std::vector<std::string>& needles) {
    std::string base = temp_dir();
    auto start = std::chrono::steady_clock::now();
    const std::string rss_file = base + "/rss";
    CommandResult r = run_shell("timeout 20 /usr/bin/time -o " + rss_file +
                                " -f 'maxrss_kb=%M' env NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + kBin +
                                " import --from " + dir);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string rss = read_file(rss_file);
    size_t at = rss.find("maxrss_kb=");
    ASSERT_NE(at, std::string::npos) << rss;
    const long rss_kb = std::atol(rss.c_str() + at + 10);
    const std::string& err = r.err;
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(count_lines(err), 1) << dir << ": " << r.err;
    for (const auto& n : needles) EXPECT_NE(err.find(n), std::string::npos) << "'" << n << "' not in: " << err;
    EXPECT_LT(seconds, 5.0) << dir;
    EXPECT_LT(rss_kb, 1024 * 1024) << dir;
    EXPECT_FALSE(path_exists(base + "/base_checkpoints")) << dir;
  };
  auto edit_config = [](const std::string& dir, const std::function<void(json&)>& edit) {
    json c = json::parse(read_file(dir + "/config.json"));
    edit(c);
    std::ofstream(dir + "/config.json") << c.dump(2);
  };
  std::string d = copy_hf_dir();
  edit_config(d, [](json& c) { c["num_hidden_layers"] = 1000000000; });
  expect_quick_refusal(d, {"config.json", "n_layer 1000000000"});
  d = copy_hf_dir();
  edit_config(d, [](json& c) { c["num_hidden_layers"] = 3; });  // within limits, but the tensors have 2 blocks
  expect_quick_refusal(d, {"config.json", "n_layer 3", "block 2"});
  d = copy_hf_dir();
  edit_config(d, [](json& c) { c["vocab_size"] = 2000000000; });
  expect_quick_refusal(d, {"config.json", "vocab_size 2000000000"});
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("rm " + d + "/config.json && ln -s /dev/zero " + d + "/config.json").c_str()), 0);
  expect_quick_refusal(d, {"config.json", "a device"});
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("rm " + d + "/config.json && mkfifo " + d + "/config.json").c_str()), 0);
  expect_quick_refusal(d, {"config.json", "a FIFO"});
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("rm " + d + "/config.json && mkdir " + d + "/config.json").c_str()), 0);
  expect_quick_refusal(d, {"config.json", "a directory"});
  d = copy_hf_dir();  // 2 GB, sparse: costs no disk
  ASSERT_EQ(std::system(("truncate -s 2G " + d + "/config.json").c_str()), 0);
  expect_quick_refusal(d, {"config.json", "limit"});
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("rm " + d + "/tokenizer.json && mkfifo " + d + "/tokenizer.json").c_str()), 0);
  expect_quick_refusal(d, {"tokenizer.json", "a FIFO"});
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("rm " + d + "/model.safetensors && ln -s /dev/zero " + d + "/model.safetensors").c_str()), 0);
  expect_quick_refusal(d, {"model.safetensors", "a device"});
  // links are normal (a Hub snapshot is links into a blob store): a linked regular file imports
  d = copy_hf_dir();
  ASSERT_EQ(std::system(("mv " + d + "/config.json " + d + "/blob && ln -s blob " + d + "/config.json").c_str()), 0);
  EXPECT_EQ(run_cli(temp_dir(), "import --from " + d).rc, 0);
}

// a checkpoint's own meta is held to the same limits before chat-web or export builds a model
TEST(CheckpointLimits, MetaWithABillionLayersIsRefusedBeforeBuilding) {
  std::string base = temp_dir();
  BaseDirScope scope(base);
  GPT m = perturbed_gpt(tiny_gpt_config(265), 1, 0.01);
  nlohmann::ordered_json meta;
  meta["step"] = 1;
  meta["model_config"] = gpt_config_to_json(m->config);
  meta["model_config"]["n_layer"] = 1000000000;
  checkpoint_save_model(checkpoint_dir("base", "d2"), 1, checkpoint_gpt_tensors(m), meta);
  checkpoint_mark_complete(checkpoint_dir("base", "d2"), 1, 0);
  try {
    checkpoint_load_gpt("base", "d2", -1, torch::kCPU, torch::kFloat32, -1);
    ADD_FAILURE() << "a billion layers loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer 1000000000"), std::string::npos) << e.what();
  }
  meta["model_config"]["n_layer"] = 3;  // within limits; the tensors hold 2 blocks
  checkpoint_save_model(checkpoint_dir("base", "d3"), 1, checkpoint_gpt_tensors(m), meta);
  checkpoint_mark_complete(checkpoint_dir("base", "d3"), 1, 0);
  try {
    checkpoint_load_gpt("base", "d3", -1, torch::kCPU, torch::kFloat32, -1);
    ADD_FAILURE() << "3 layers loaded from 2 layers' tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block 2"), std::string::npos) << e.what();
  }
}

// docs/checkpoints.md's walk-through run as written (download, import, chat-web), a local
// directory standing in for the Hub: `hf` links the repository's files into --local-dir (as a
// Hub snapshot links into its blob store), `nanochat` is our binary (chat-web on a free port).
// The repository is the one with BpeTrainer's id layout; the openai client's greedy reply is
// transformers' greedy continuation of the same chat.
TEST(HfServe, DocsWalkthroughAnswersTheOpenAIClient) {
  NEEDS_TRANSFORMERS();
  if (run_shell(std::string(NANOCHAT_PYTHON) + " -c 'import openai'").rc != 0)
    GTEST_SKIP() << "missing Python package: openai";
  const std::string doc = read_file(std::string(NANOCHAT_SOURCE_DIR) + "/docs/checkpoints.md");
  size_t marker = doc.find("<!-- walkthrough:");
  ASSERT_NE(marker, std::string::npos);
  size_t begin = doc.find("```bash\n", marker), end = doc.find("```\n", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const std::string block = doc.substr(begin + 8, end - begin - 8);
  ASSERT_NE(block.find("nanochat chat-web"), std::string::npos) << block;

  const std::string root = temp_dir(), hub = root + "/hub", bin = root + "/bin", home = root + "/home";
  const std::string base = root + "/base", log = root + "/walkthrough.log";
  ASSERT_EQ(std::system(("mkdir -p " + hub + "/user " + bin + " " + home + " && cp -r " + fixtures().dir +
                         "/hf_specials_first " + hub + "/user/name")
                            .c_str()),
            0);
  std::ofstream(bin + "/hf") << "#!/bin/sh\n# hf download REPO --local-dir DIR: links to the local hub's files\n"
                                "[ \"$1\" = download ] && [ \"$3\" = --local-dir ] || exit 2\n"
                                "mkdir -p \"$4\" && for f in " +
                                    hub + "/\"$2\"/*; do ln -s \"$f\" \"$4\"/; done\n";
  std::ofstream(bin + "/nanochat") << "#!/bin/sh\nif [ \"$1\" = chat-web ]; then exec " + kBin +
                                          " \"$@\" --port 0 --device-type cpu --workers 1; fi\nexec " + kBin +
                                          " \"$@\"\n";
  std::ofstream(root + "/walkthrough.sh") << "set -e\n" << block;
  ASSERT_EQ(std::system(("chmod +x " + bin + "/hf " + bin + "/nanochat").c_str()), 0);
  ASSERT_EQ(std::system(("cd " + root + " && HOME=" + home + " NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 PATH=" +
                         bin + ":$PATH setsid bash walkthrough.sh > " + log + " 2>&1 & echo $! > " + root + "/pid")
                            .c_str()),
            0);
  const std::string pid = read_file(root + "/pid");
  struct Kill {
    // no "--": dash's kill (std::system's sh) takes it for a pid and kills nothing
    std::string pid;
    ~Kill() {
      if (std::system(("kill -9 -" + pid + " 2>/dev/null").c_str()) != 0)
        std::fprintf(stderr, "walkthrough already gone\n");
    }
  } kill_group{pid.substr(0, pid.find('\n'))};
  int port = 0;
  for (int i = 0; i < 1200 && port == 0; i++) {  // up to 2 minutes: the import, then the model loads
    std::string text = read_file(log);
    size_t at = text.find("ready on http://");
    if (at != std::string::npos) port = std::stoi(text.substr(text.find(':', at + 16) + 1));
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(port, 0) << read_file(log);
  EXPECT_NE(read_file(log).find("imported step(s) 0"), std::string::npos) << read_file(log);

  // transformers' greedy reply to the rendered chat, in the file's ids
  const std::string text = "The caf\xc3\xa9 costs";
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  const std::vector<int32_t> file_ids = tokenizer_read_hf_json(hub + "/user/name/tokenizer.json").file_ids;
  std::vector<int64_t> ours_of(file_ids.size());
  for (size_t i = 0; i < file_ids.size(); i++) ours_of[file_ids[i]] = (int64_t)i;
  json conversation = {{"messages", {{{"role", "user"}, {"content", text}}, {{"role", "assistant"}, {"content", ""}}}}};
  std::vector<int64_t> prompt;
  for (int32_t id : render_for_completion(tok, conversation)) prompt.push_back(file_ids.at(id));
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " greedy " + hub + "/user/name '" +
                               json(prompt).dump() + "' 12");
  ASSERT_EQ(py.rc, 0) << py.err;
  std::vector<int32_t> reply;
  for (int64_t file_id : json::parse(py.out).get<std::vector<int64_t>>()) {
    const int32_t id = (int32_t)ours_of.at(file_id);
    if (id == tok.special_id("<|assistant_end|>") || id == tok.bos_id()) break;
    reply.push_back(id);
  }
  CommandResult client = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript +
                                   " chat http://127.0.0.1:" + std::to_string(port) + " '" + text + "' 12");
  ASSERT_EQ(client.rc, 0) << client.err << read_file(log);
  EXPECT_EQ(json::parse(client.out).get<std::string>(), tok.decode(reply));
}
