// `nanochat generate`: raw text completion from a checkpoint with the naive loop of upstream's GPT.generate
// (gpt_generate; <|bos|> prepended like upstream's base-model sampling). Text streams to
// stdout as tokens arrive, never splitting a UTF-8 character; --json prints one object:
// {"prompt_ids", "generated_ids", "text", "logprobs"} where logprobs[i] is the log-probability
// of generated token i under the model's own softmax (temperature 1, no top-k), i.e. what
// the model thinks of the text, independent of the sampling settings.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/utf8_stream.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

struct GenerateFlags {
  std::string source = "base", tag, prompt, device_type, dtype;
  int64_t step = -1, max_tokens = 128, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 42;
  bool json = false;
};

static int generate_run(const GenerateFlags& f) {
  const std::string device_type = device_autodetect(f.device_type);
  cpu_threads_setup(1);
  const torch::Device device = device_for_rank(device_type, 0);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  LoadedGPT m = checkpoint_load_gpt(f.source, f.tag, f.step, device, gpt_inference_compute_dtype(f.dtype, device_type),
                                    tok.vocab_size());
  gpt_prepare_for_inference(m.model, f.dtype);

  std::vector<int64_t> ids = {tok.bos_id()};
  for (int32_t id : tok.encode(f.prompt)) ids.push_back(id);
  const int64_t limit = 10 * m.config.sequence_len;  // the rotary cache
  if ((int64_t)ids.size() + f.max_tokens > limit)
    fail("prompt (%zu tokens) + --max-tokens %lld exceed the model's %lld positions", ids.size(),
         (long long)f.max_tokens, (long long)limit);

  Utf8Stream stream;
  if (!f.json) {
    std::fputs(f.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto on_token = [&](int64_t id) {
    if (f.json) return;
    std::string text = stream.push(tok.decode_single_token_bytes((int32_t)id));
    if (!text.empty()) {
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    }
  };
  std::vector<int64_t> gen = gpt_generate(m.model, ids, f.max_tokens, f.temperature, f.top_k, f.seed, on_token);
  if (!f.json) {
    std::printf("%s\n", stream.finish().c_str());
    return 0;
  }

  // one forward over prompt + completion: position P-1+i predicts generated token i
  std::vector<double> logprobs;
  if (!gen.empty()) {
    torch::NoGradGuard no_grad;
    std::vector<int64_t> all = ids;
    all.insert(all.end(), gen.begin(), gen.end());
    torch::Tensor x = torch::tensor(all, torch::kLong).to(device).unsqueeze(0);
    torch::Tensor logp = m.model->forward(x)[0].to(torch::kFloat64).log_softmax(-1).cpu();
    const int64_t p = (int64_t)ids.size();
    for (size_t i = 0; i < gen.size(); i++) logprobs.push_back(logp[p - 1 + (int64_t)i][gen[i]].item<double>());
  }
  std::vector<int32_t> gen32(gen.begin(), gen.end());
  nlohmann::ordered_json out;
  out["prompt_ids"] = ids;
  out["generated_ids"] = gen;
  out["text"] = tok.decode(gen32);
  out["logprobs"] = logprobs;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

void cli_register_generate(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("generate", "Complete a text prompt with a checkpoint (streams text; --json for ids)");
  static GenerateFlags f;
  cli_add_checkpoint_flags(sub, f.source, f.tag, f.step);
  cli_add_inference_dtype_flag(sub, f.dtype);
  sub->add_option("-p,--prompt", f.prompt, "the text to complete")->required();
  sub->add_option("--max-tokens", f.max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", f.temperature, "0 is greedy (argmax)")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", f.top_k, "sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", f.seed, "sampling seed");
  sub->add_flag("--json", f.json, "print {prompt_ids, generated_ids, text, logprobs} instead of streaming text");
  sub->add_option("--device-type", f.device_type, "cuda or cpu (default: cuda when available)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->callback([&exit_code] { exit_code = generate_run(f); });
}

}  // namespace nanochat
