// The server module (upstream's scripts/chat_web.py): `nanochat chat-web`. One HTTP server (cpp-httplib) with
//   GET  /                      the chat UI (web/, embedded into the binary at build time)
//   POST /chat/completions      upstream's SSE stream: {"token","gpu"} ... {"done":true}
//   POST /v1/chat/completions   OpenAI-compatible (stream and not), GET /v1/models
//   GET  /health, GET /stats    readiness (503 while loading) and the worker pool
// Requests are checked here (upstream's limits, types, UTF-8, JSON nesting) before any model
// work; a bad one is a 4xx with a JSON error. A request goes to the least loaded worker (one
// model per device, --max-batch rows each), waits there for its rows in its API key's queue (the
// client address's without keys; rows go round-robin across waiting keys, --max-queue waiting
// per key, 503 beyond), and joins that worker's running decode batch
// (engine/scheduler.h); its tokens come back to the connection's thread. A client that
// goes away cancels it. Hostile clients are bounded before httplib buffers anything (connection.cpp): header
// lines and count, a deadline for the head and body, body bytes whatever the encoding, a
// connection cap with /health still answered beyond it; server_guard (guards.cpp) holds the
// Host, Origin and API-key checks.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/tokenizer.h"

namespace nanochat {

// upstream chat_web.py's module constants plus the API's own caps
struct ServerLimits {
  int64_t max_messages = 500;
  int64_t max_message_chars = 8000;  // Unicode code points, like Python's len()
  int64_t max_total_chars = 32000;
  double max_temperature = 2.0;
  int64_t max_top_k = 200;  // 0 = the full vocabulary
  int64_t max_max_tokens = 4096;
  int64_t max_choices = 8;       // OpenAI's n
  int64_t max_stop_strings = 4;  // OpenAI's limit
  int64_t max_stop_chars = 256;
  int64_t max_body_bytes = 1 << 20;     // 413 beyond (after decompression too)
  int64_t max_json_depth = 64;          // 400 beyond, checked before parsing
  int64_t max_json_values = 16384;      // 413 beyond (a scalar, array or object is one), counted first
  int64_t max_parsing_bytes = 8 << 20;  // bodies read and parsed at once, in all (past it: 2 s wait, then 503)
  int64_t max_header_line = 8192;       // bytes of the request line (414) or a header line (431)
  int64_t max_headers = 100;            // header lines (431 beyond)
};
extern const ServerLimits kServerLimits;

// a request the server refuses: HTTP status + one line for the client
struct ServerError : std::runtime_error {
  int status;
  int retry_after_s;  // > 0: the response says Retry-After (a refusal that passes with time)
  ServerError(int s, const std::string& m, int retry_after = 0)
      : std::runtime_error(m), status(s), retry_after_s(retry_after) {}
};

struct ChatRequest {
  nlohmann::json messages;  // validated: roles alternate user/assistant, starting with user
  double temperature = 0.8;
  int64_t top_k = 50;
  double top_p = 1.0;
  int64_t max_tokens = 512;
  int64_t n = 1;
  bool seed_given = false;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings (OpenAI); the text stops before them
  bool stream = false;            // OpenAI only; /chat/completions always streams
  bool include_usage = false;     // stream_options.include_usage
  std::string cache_salt;         // vLLM's field: the prefix cache is shared only with requests of the same salt
};
struct ChatDefaults {
  double temperature = 0.8;
  int64_t top_k = 50;
  int64_t max_tokens = 512;
};
// Parses and checks a request body. openai=false: upstream's /chat/completions (messages,
// temperature, top_k, max_tokens, cache_salt; roles user/assistant only). openai=true: also model,
// top_p, n, stop, seed, stream, stream_options, max_completion_tokens, a leading system
// message, and content as a list of text parts. Throws ServerError(400) with the reason.
ChatRequest server_parse_chat_request(const std::string& body, bool openai, const ChatDefaults& defaults,
                                      const ServerLimits& limits = kServerLimits);

// deepest nesting of [ and { outside strings, stopping once past `limit` (a cheap scan that
// runs before any parse, so a deep body never reaches a recursive copy or destructor)
int64_t server_json_depth(const std::string& body, int64_t limit);

// Host header values a loopback-bound server answers (DNS rebinding guard): localhost,
// 127.0.0.1, [::1], each with an optional :port
bool server_host_is_loopback_name(const std::string& host);
bool server_bind_is_loopback(const std::string& bind_host);
// a request path or method for a log line: control bytes, DEL and backslash as \xNN
std::string server_log_escape(const std::string& s);
// Authorization: the Bearer scheme in any case (RFC 9110), one or more spaces, then the key,
// compared in constant time
bool server_bearer_ok(const std::string& authorization, const std::string& key);
// which of `keys` the Authorization header carries (every key compared, each in constant
// time), or -1
int server_bearer_key(const std::string& authorization, const std::vector<std::string>& keys);
// The API keys: `flag` (--api-key's value, null when not given), else the lines of `file`
// (--api-key-file; one key per line, blank lines skipped), else NANOCHAT_API_KEY; none of them:
// no key. Errors (one line, never the key): a key that is empty (what --api-key "$KEY" gives
// with KEY unset), a file readable or writable by other users (mode & 077), without keys, or
// repeating one; a key with a space or control character.
std::vector<std::string> server_api_keys_resolve(const std::string* flag, const std::string& file);
// Whose KV a request may reuse (the scheduler's prefix cache): the API key it came with (its
// index; -1 without keys) and its cache_salt. Requests of different scopes share nothing.
std::string server_cache_scope(int key_index, const std::string& cache_salt);
// Whose queue a request waits in for rows (fair admission, engine/wait_queues.h): its API key
// (index), or on a server without keys the client's address
std::string server_queue_key(int key_index, const std::string& address);
// the message a client gets for an unexpected exception: generic (LibTorch's errors carry
// backtraces, paths and addresses); the exception's own text goes to the server log
std::string server_internal_error(const char* where, const std::exception& e);

// the prompt of upstream's render_for_completion: <|bos|>, the turns, <|assistant_start|>
std::vector<int32_t> server_prompt_tokens(const Tokenizer& tok, const nlohmann::json& messages);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string source = "sft", model_tag, device_type;
  std::string dtype;  // --dtype: "" (the device's compute dtype), float32, bfloat16, int8 (gpt_prepare_for_inference)
  int64_t step = -1;
  int num_gpus = 1;   // CUDA: one model copy per GPU
  int workers = 1;    // CPU: decode threads (sharing one model copy)
  int max_batch = 0;  // rows decoded together per worker (continuous batching); 0: 8 on CPU, 32 on CUDA
  int64_t kv_len =
      0;  // KV positions per row; 0: CPU the model's limit (10 x sequence_len) within a 2 GiB pool, CUDA sequence_len
  bool prefix_cache = true;  // reuse the KV of a finished conversation's tokens
  int max_queue = 64;        // requests waiting for rows, per API key (or client address) per worker; beyond this 503
  ChatDefaults defaults;
  ServerLimits limits;
  bool quiet = false;                  // no per-request log lines
  std::string cors_origin;             // the one Origin allowed to read replies cross-origin (none by default)
  std::vector<std::string> api_keys;   // when set: Authorization: Bearer <one of them> on every API route but
                                       // /health; each key is its own prefix-cache scope
  int max_connections = 256;           // open connections; beyond, one without a request is shed (docs/serving.md)
  int max_connections_per_client = 0;  // open connections from one client address; 0: max_connections / 4
  double request_deadline = 10;        // seconds for a request's head and body to arrive (408 after)
};
// Binds, serves the UI and /health at once (503 until the models are loaded), loads one model
// per device in the background, then serves until SIGINT/SIGTERM: the listener closes,
// queued requests get 503, in-flight streams run to their end (a second signal cancels them,
// each stream still ending with its final event), and it returns 0. Error if the port cannot
// be bound or a model fails to load.
int server_run(const ServerOptions& options);
// --max-connections-per-client as given, or its default: a quarter of --max-connections (at least 1)
int server_max_per_client(const ServerOptions& options);

// the files of web/ embedded at build time (web_assets.cpp, generated into the build directory
// by web/embed_web.cmake)
struct WebAsset {
  const char* path;  // "/ui.html", "/ui.js", ...
  const unsigned char* data;
  size_t size;
};
const WebAsset* server_web_asset(const std::string& path);  // nullptr if absent
const std::vector<WebAsset>& server_web_assets();

}  // namespace nanochat
