// Tests for the transformers interop: `nanochat import` of a transformers `nanochat` directory
// (single file and shards) and of upstream's October-2025 .pt, `nanochat export --format hf`,
// and the one-line refusals of bad files. Every expected value comes from transformers itself
// (tests/fixtures/hf_fixtures.py: a tiny random NanoChatForCausalLM saved with save_pretrained
// and a tokenizer.json trained by the tokenizers library); skipped when those are not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
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
  CommandResult r = run_cli(base, "sft --mixture spelling --num-iterations 2 --device-batch-size 2 --max-seq-len 64"
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
  json conversation = {{"messages", {{{"role", "user"}, {"content", "The caf\xc3\xa9 costs"}}, {{"role", "assistant"}, {"content", ""}}}}};
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
  json req = {{"messages", {{{"role", "user"}, {"content", "The caf\xc3\xa9 costs"}}}}, {"temperature", 0}, {"max_tokens", 12}};
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
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " logits " + out + " " +
                               fixtures().dir + "/expected.json");
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
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " logits " + out + " " + base + "/prompts.json");
  ASSERT_EQ(py.rc, 0) << py.err;
  json got = json::parse(py.out);
  EXPECT_EQ(got["class"], "NanochatCppForCausalLM");
  m->eval();
  EXPECT_LT(max_logit_diff(m, json(prompts), got["logits"]), 1e-5);
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
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "model.layers.0.self_attn.k_proj.weight"; }),
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
  edit_config(d, [](json& c) { c["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}}; });
  expect_refused(d, {"config.json", "rope_parameters"});

  d = temp_dir() + "/sharded";
  ASSERT_EQ(std::system(("cp -r " + fixtures().dir + "/hf_sharded " + d + " && rm " + d + "/model-00003-of-00009.safetensors").c_str()), 0);
  expect_refused(d, {"model.safetensors.index.json", "model-00003-of-00009.safetensors"});

  d = copy_hf_dir();
  ASSERT_EQ(std::remove((d + "/tokenizer.json").c_str()), 0);
  expect_refused(d, {"tokenizer.json"});
}
