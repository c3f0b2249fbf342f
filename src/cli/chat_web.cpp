// `nanochat chat-web`: the chat UI and the API of upstream's chat_web.py (the server module does it all).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/server.h"

namespace nanochat {

void cli_register_chat_web(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "chat-web",
      "Chat in a browser: the UI at /, upstream's POST /chat/completions stream, an OpenAI-compatible\n"
      "POST /v1/chat/completions and GET /v1/models, GET /health and /stats. It listens on 127.0.0.1\n"
      "(this machine only) and answers only Host names of this machine (localhost, 127.0.0.1, [::1]);\n"
      "to reach it from elsewhere pass --host 0.0.0.0 (all interfaces; add --api-key, or use it only on a\n"
      "trusted network) or keep 127.0.0.1 and tunnel: ssh -L 8000:localhost:8000 HOST");
  static ServerOptions o;
  sub->add_option("-n,--num-gpus", o.num_gpus, "GPUs to serve on, one model copy and one worker each")
      ->check(CLI::Range(1, 64));
  sub->add_option("--workers", o.workers,
                  "on the CPU: decode threads, each with its own batch (they share one model copy)")
      ->check(CLI::Range(1, 64));
  sub->add_option("--max-batch", o.max_batch,
                  "rows (conversations, or samples of one) decoded together per worker: requests join and leave the "
                  "running batch between steps (default 8 on the CPU, 32 per GPU)")
      ->check(CLI::Range(1, 1024));
  sub->add_option(
         "--kv-len", o.kv_len,
         "KV cache positions per row, prompt and reply together (default on the CPU: the model's limit of 10 x "
         "its sequence length, less if the pool would pass 2 GiB, not below the sequence length; on CUDA: "
         "the sequence length); the pool holds max-batch such rows, allocated at start, and must fit in 3/4 of the "
         "device's free memory: defaults are cut to fit, flags that do not fit stop the server")
      ->check(CLI::Range(16, 1 << 20));
  static bool no_prefix_cache = false;
  sub->add_flag("--no-prefix-cache", no_prefix_cache,
                "do not reuse the KV of a finished conversation's tokens for a prompt that begins with them");
  cli_add_checkpoint_flags(sub, o.source, o.model_tag, o.step);
  cli_add_inference_dtype_flag(sub, o.dtype);
  sub->add_option("-t,--temperature", o.defaults.temperature, "default temperature")->check(CLI::Range(0.0, 2.0));
  sub->add_option("-k,--top-k", o.defaults.top_k, "default top-k (0: all tokens)")->check(CLI::Range(0, 200));
  sub->add_option("-m,--max-tokens", o.defaults.max_tokens, "default max tokens per reply")->check(CLI::Range(1, 4096));
  sub->add_option("-p,--port", o.port, "port (0: any free port, printed at start)")->check(CLI::Range(0, 65535));
  sub->add_option("--host", o.host, "address to listen on; 0.0.0.0 exposes it to the network");
  sub->add_option("--max-queue", o.max_queue,
                  "requests of one API key (or client address, without keys) that may wait for rows, per worker; "
                  "more get 503")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--device-type", o.device_type, "cuda or cpu (default: cuda when available)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_flag("-q,--quiet", o.quiet, "no log line per request");
  sub->add_option("--cors-origin", o.cors_origin,
                  "the one web origin (e.g. https://app.example) whose pages may call the API and read its replies; "
                  "other origins get 403");
  static std::string api_key, api_key_file;
  auto* key_flag = sub->add_option("--api-key", api_key,
                                   "require Authorization: Bearer KEY on the API routes (all but /health and the UI's "
                                   "files); other users of this machine can read a command line: prefer --api-key-file "
                                   "or NANOCHAT_API_KEY");
  sub->add_option("--api-key-file", api_key_file,
                  "read the API keys from this file (mode 600; one key per line, each key its own prefix-cache scope)")
      ->excludes(key_flag);
  sub->add_option("--max-connections", o.max_connections,
                  "open connections; beyond, the one waiting longest without a request is closed (16 more get "
                  "GET /health only), else new ones wait in the kernel's backlog")
      ->check(CLI::Range(4, 4096));
  sub->add_option("--max-connections-per-client", o.max_connections_per_client,
                  "open connections from one client address (default: a quarter of --max-connections)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--request-deadline", o.request_deadline,
                  "seconds a request's headers and body may take to arrive (slow clients get 408)")
      ->check(CLI::Range(0.5, 600.0));
  sub->callback([&exit_code, key_flag] {
    // a key on the command line is visible to every user of the machine (ps, /proc/PID/cmdline)
    o.api_keys = server_api_keys_resolve(key_flag->count() ? &api_key : nullptr, api_key_file);
    o.prefix_cache = !no_prefix_cache;
    exit_code = server_run(o);
  });
}

}  // namespace nanochat
