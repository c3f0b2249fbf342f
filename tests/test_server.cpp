// Tests for the server module, against the real `nanochat` binary
// on loopback with a tiny random model (tests/server_fixture.h):
//  - every endpoint over raw HTTP; both stream formats through a strict chunked + SSE parser;
//  - replies compared with an independent reference: the prompt built by hand (render_for_completion) and
//    the naive full-recompute greedy loop of upstream's GPT.generate (gpt_generate), cut at the stop token;
//  - every limit of upstream's chat_web.py and bad inputs -> 4xx JSON; 404/405/413; 1,000 bad requests in a
//    row and the server still healthy; a dropped client (streaming or not) frees its worker; /health
//    answers when every worker and connection is busy; SIGTERM drains;
//  - the official `openai` Python client and a Playwright-driven Chromium against the UI;
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_raw_client.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/device.h"
#include "nanochat/common/utf8.h"
#include "nanochat/engine.h"
#include "nanochat/server.h"
#include "server/stop_matcher.h"
#include "server_fixture.h"
#include "test_util.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

struct World {
  std::string base;
  std::unique_ptr<Tokenizer> tok;
  GPT model{nullptr};
  std::unique_ptr<ServerProcess> server;
  int port = 0;
  ~World() {
    server.reset();  // killed before its files go
    if (base.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + base).c_str());
  }
};
World& world() {
  static World w;
  if (w.base.empty()) {
    w.base = tiny_chat_base_dir();
    w.tok = std::make_unique<Tokenizer>(tokenizer_load(w.base + "/tokenizer"));
    w.model = checkpoint_load_gpt("sft", "d2", 0, torch::kCPU, torch::kFloat32, w.tok->vocab_size()).model;
    w.server = std::make_unique<ServerProcess>(NANOCHAT_BIN, w.base, std::vector<std::string>{"--workers", "2", "-q"});
    w.port = w.server->port();
    wait_until_healthy(w.port);
  }
  return w;
}
int port() { return world().port; }

std::vector<int64_t> prompt_by_hand(const std::vector<std::string>& turns) {
  return tiny_chat_prompt_by_hand(*world().tok, turns);
}
using Reference = GreedyReference;
Reference greedy_from_ids(const std::vector<int64_t>& prompt, int64_t max_tokens) {
  return tiny_chat_greedy_reference(world().model, *world().tok, prompt, max_tokens);
}
Reference greedy_reference(const std::vector<std::string>& turns, int64_t max_tokens) {
  return greedy_from_ids(prompt_by_hand(turns), max_tokens);
}

json user_messages(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

json parse_json(const std::string& s) {
  json j = json::parse(s, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << s;
  return j;
}

void expect_json_error(const RawResponse& r, int status, const std::string& needle, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << ": " << r.body;
  EXPECT_NE(r.headers.count("content-type") ? r.headers.at("content-type").find("application/json") : std::string::npos,
            std::string::npos)
      << what;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << what << ": " << r.body;
  ASSERT_TRUE(j.contains("error") && j["error"]["message"].is_string()) << what << ": " << r.body;
  EXPECT_EQ(j["error"]["code"], status) << what;
  EXPECT_EQ(j["detail"], j["error"]["message"]) << what;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos)
      << what << ": '" << needle << "' not in " << r.body;
}

// greedy through the engine in this process (KV cache): for replies too long for the naive loop
std::string engine_greedy_text(const std::string& user, int64_t budget, bool* stopped = nullptr) {
  static Engine engine(world().model, *world().tok);
  std::vector<int64_t> p64 = prompt_by_hand({user});
  GenerateOptions o;
  o.max_tokens = budget;
  o.temperature = 0;
  GenerateResult r = engine.generate(std::vector<int32_t>(p64.begin(), p64.end()), o);
  if (stopped) *stopped = r.finish[0] == FinishReason::stop;
  return world().tok->decode(std::vector<int32_t>(r.tokens[0].begin() + (int64_t)p64.size(), r.tokens[0].end()));
}

// a prompt whose greedy reply runs the whole budget (for the long-stream tests)
std::string long_prompt(int64_t budget) {
  for (const char* p :
       {"hello", "what is two plus three", "cats", "the model talks", "numbers and cats", "a small chat"}) {
    bool stopped = true;
    engine_greedy_text(p, budget, &stopped);
    if (!stopped) return p;
  }
  return "";
}

int64_t stats_field(const char* name) {
  return parse_json(raw_http(port(), "GET", "/stats").body)[name].get<int64_t>();
}

}  // namespace

// ---- in-process units ---------------------------------------------------------------------------

TEST(ServerUnits, StopMatcherHoldsBackPartialStops) {
  StopMatcher m({"END", "xy"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X"), "ENX");  // not a stop after all
  EXPECT_EQ(m.push("q x"), "q ");
  EXPECT_EQ(m.push("yz"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.finish(), "");
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("tail E"), "tail ");
  EXPECT_EQ(n.finish(), "E");
  EXPECT_FALSE(n.stopped());
  StopMatcher e({});
  EXPECT_EQ(e.push("anything"), "anything");
}

TEST(ServerUnits, SystemMessageMergesIntoFirstUserTurn) {
  ChatRequest r = server_parse_chat_request(
      R"({"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"!"}]}]})",
      true, ChatDefaults{});
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0]["content"], "be brief\n\nhi!");
  EXPECT_EQ(r.temperature, 0.8);
  EXPECT_EQ(r.top_k, 50);
  EXPECT_EQ(r.max_tokens, 512);
}

// ---- endpoints ------------------------------------------------------------------------------------

TEST(ServerApi, HealthStatsModels) {
  ASSERT_GT(port(), 0) << world().server->log();
  RawResponse h = raw_http(port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  json hj = parse_json(h.body);
  EXPECT_EQ(hj, json({{"status", "ok"}, {"ready", true}, {"num_gpus", 0}, {"available_workers", 2}}));
  json s = parse_json(raw_http(port(), "GET", "/stats").body);
  EXPECT_EQ(s["total_workers"], 2);
  EXPECT_EQ(s["available_workers"], 2);
  EXPECT_EQ(s["busy_workers"], 0);
  EXPECT_EQ(s["workers"], json::parse(R"([{"gpu_id":0,"device":"cpu"},{"gpu_id":1,"device":"cpu"}])"));
  json m = parse_json(raw_http(port(), "GET", "/v1/models").body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "d2");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(h.headers.count("access-control-allow-origin"), 0u);  // no CORS unless --cors-origin
}

// ---- continuous batching -------------------------------------------------------------------------

// many greedy requests at once share the decode batch; each reply is still its own greedy one
TEST(ServerApi, ConcurrentGreedyRequestsEachMatchTheReference) {
  const std::vector<std::string> users = {
      "hello",       "cats",    "what is two plus three", "the model talks", "numbers and cats", "a small chat",
      "hello world", "two cats"};
  std::vector<Reference> refs;
  for (auto& u : users) refs.push_back(greedy_reference({u}, 16));
  std::vector<json> got(users.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < users.size(); i++)
    threads.emplace_back([&, i] {
      json req = {{"messages", user_messages(users[i])}, {"temperature", 0}, {"max_tokens", 16}};
      got[i] = json::parse(raw_http(port(), "POST", "/v1/chat/completions", req.dump()).body, nullptr, false);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < users.size(); i++) {
    ASSERT_TRUE(got[i].contains("choices")) << got[i].dump();
    EXPECT_EQ(got[i]["choices"][0]["message"]["content"], refs[i].text) << users[i];
    EXPECT_EQ(got[i]["usage"]["completion_tokens"], refs[i].tokens) << users[i];
  }
  json s = parse_json(raw_http(port(), "GET", "/stats").body);
  EXPECT_EQ(s["batch"]["max_rows"], 16);  // 2 workers x 8 rows
  EXPECT_GT(s["batch"]["mean_rows_per_step"].get<double>(), 1.0) << "requests shared decode steps";
  EXPECT_GE(s["batch"]["prefill_forwards"].get<int64_t>(), 1);  // (whether prompts shared one depends on timing)
  // every reply's tokens but its first came from a decode step's row; the forwards took time
  int64_t decoded = 0;
  for (const auto& r : refs) decoded += r.tokens - 1;
  EXPECT_GE(s["batch"]["decode_rows"].get<int64_t>(), decoded);
  EXPECT_GT(s["batch"]["prefill_seconds"].get<double>(), 0);
  EXPECT_GT(s["batch"]["decode_seconds"].get<double>(), 0);
  EXPECT_GT(s["batch"]["sample_seconds"].get<double>(), 0);
  EXPECT_EQ(s["kv_pool"]["rows"], 16);
  EXPECT_EQ(s["kv_pool"]["positions_per_row"], 1280);  // 10 x sequence_len 128
  EXPECT_GT(s["kv_pool"]["bytes"].get<int64_t>(), 0);
  for (int i = 0; i < 100 && parse_json(raw_http(port(), "GET", "/stats").body)["kv_pool"]["rows_in_use"] != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s = parse_json(raw_http(port(), "GET", "/stats").body);
  EXPECT_EQ(s["kv_pool"]["rows_in_use"], 0);
  EXPECT_EQ(s["running_requests"], 0);
  EXPECT_EQ(s["waiting_requests"], 0);
}

// the next turn of a chat reuses the KV of the previous one; the reply is the same without it
TEST(ServerApi, PrefixReuseReportsCachedTokensAndKeepsTheText) {
  ServerProcess plain(NANOCHAT_BIN, world().base, {"--workers", "1", "--max-batch", "2", "--no-prefix-cache", "-q"});
  ServerProcess cached(NANOCHAT_BIN, world().base, {"--workers", "1", "-q"});
  ASSERT_GT(plain.port(), 0) << plain.log();
  ASSERT_GT(cached.port(), 0) << cached.log();
  wait_until_healthy(plain.port());
  wait_until_healthy(cached.port());
  auto ask = [](int p, const json& messages) {
    json req = {{"messages", messages}, {"temperature", 0}, {"max_tokens", 8}};
    RawResponse r = raw_http(p, "POST", "/v1/chat/completions", req.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  };
  json t1 = ask(cached.port(), user_messages("cats"));
  EXPECT_EQ(t1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string reply = t1["choices"][0]["message"]["content"];
  json turn2 = json::array({{{"role", "user"}, {"content", "cats"}},
                            {{"role", "assistant"}, {"content", reply}},
                            {{"role", "user"}, {"content", "hello"}}});
  json with = ask(cached.port(), turn2), without = ask(plain.port(), turn2);
  const int64_t first_prompt = (int64_t)prompt_by_hand({"cats"}).size();
  const int64_t reused = with["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GE(reused, first_prompt) << "at least the first turn's prompt is reused";
  EXPECT_LT(reused, with["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(without["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(with["choices"][0]["message"]["content"], without["choices"][0]["message"]["content"]);
  EXPECT_EQ(with["choices"][0]["message"]["content"], greedy_reference({"cats", reply, "hello"}, 8).text);
  json st = parse_json(raw_http(cached.port(), "GET", "/stats").body);
  EXPECT_EQ(st["prefix_cache"]["cached_tokens"], reused);
  EXPECT_EQ(parse_json(raw_http(plain.port(), "GET", "/stats").body)["prefix_cache"]["enabled"], false);
  // more samples than --max-batch rows: refused, not queued forever
  json many = {{"messages", user_messages("cats")}, {"n", 3}, {"max_tokens", 4}};
  expect_json_error(raw_http(plain.port(), "POST", "/v1/chat/completions", many.dump()), 400, "--max-batch",
                    "n > max-batch");
}

TEST(ServerApi, ServesTheEmbeddedUi) {
  RawResponse r = raw_http(port(), "GET", "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(r.body, read_file(std::string(NANOCHAT_SOURCE_DIR) + "/web/ui.html"));  // the bytes of web/
  for (const char* f : {"ui.js", "ui.css", "logo.svg"}) {
    RawResponse a = raw_http(port(), "GET", std::string("/") + f);
    EXPECT_EQ(a.status, 200) << f;
    EXPECT_EQ(a.body, read_file(std::string(NANOCHAT_SOURCE_DIR) + "/web/" + f)) << f;
  }
  EXPECT_EQ(raw_http(port(), "GET", "/ui.js").headers["content-type"], "text/javascript; charset=utf-8");
  EXPECT_EQ(raw_http(port(), "GET", "/logo.svg").headers["content-type"], "image/svg+xml");
  // nothing from a CDN: every script and stylesheet is local
  EXPECT_EQ(r.body.find("http://"), std::string::npos);
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
}

TEST(ServerApi, UpstreamStreamMatchesGreedyReference) {
  Reference ref = greedy_reference({"hello world"}, 24);
  ASSERT_FALSE(ref.text.empty()) << "the random model stops at once; change its seed";
  json req = {{"messages", user_messages("hello world")}, {"temperature", 0.0}, {"max_tokens", 24}};
  RawResponse r = raw_http(port(), "POST", "/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  std::vector<std::string> events = sse_parse_strict(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), R"({"done":true})");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); i++) {
    EXPECT_EQ(events[i].rfind("{\"token\":", 0), 0u) << "upstream's key order: " << events[i];
    json e = parse_json(events[i]);
    ASSERT_EQ(e.size(), 2u) << events[i];
    ASSERT_TRUE(e["token"].is_string()) << events[i];
    EXPECT_TRUE(e["gpu"] == 0 || e["gpu"] == 1) << events[i];
    EXPECT_FALSE(e["token"].get<std::string>().empty());
    text += e["token"].get<std::string>();
  }
  EXPECT_EQ(text, ref.text);
  EXPECT_EQ(text.find("<|assistant_end|>"), std::string::npos);
  // non-ASCII goes out as UTF-8, not \u escapes (ensure_ascii=False)
  EXPECT_TRUE(utf8_is_valid(r.body));
}

TEST(ServerApi, OpenAiNonStream) {
  Reference ref = greedy_reference({"what is two plus three"}, 6);
  json req = {
      {"model", "d2"}, {"messages", user_messages("what is two plus three")}, {"temperature", 0}, {"max_tokens", 6}};
  RawResponse r = raw_http(port(), "POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  json j = parse_json(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "d2");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], ref.text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], ref.stopped ? "stop" : "length");
  const int64_t prompt_len = (int64_t)prompt_by_hand({"what is two plus three"}).size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_len);
  EXPECT_EQ(j["usage"]["completion_tokens"], ref.tokens);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt_len + ref.tokens);

  // n samples with a seed: reproducible, and the rows sample independently
  json many = {{"messages", user_messages("cats")}, {"temperature", 1.5}, {"max_tokens", 12}, {"n", 4}, {"seed", 123}};
  json a = parse_json(raw_http(port(), "POST", "/v1/chat/completions", many.dump()).body);
  json b = parse_json(raw_http(port(), "POST", "/v1/chat/completions", many.dump()).body);
  ASSERT_EQ(a["choices"].size(), 4u);
  std::set<std::string> distinct;
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["message"], b["choices"][i]["message"]);
    distinct.insert(a["choices"][i]["message"]["content"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);
}

TEST(ServerApi, OpenAiStreamEqualsNonStream) {
  json req = {{"messages", json::array({{{"role", "system"}, {"content", "be nice"}},
                                        {{"role", "user"}, {"content", "hello"}},
                                        {{"role", "assistant"}, {"content", "hello world"}},
                                        {{"role", "user"}, {"content", "numbers and cats"}}})},
              {"temperature", 0.9},
              {"top_p", 0.9},
              {"max_tokens", 16},
              {"seed", 7},
              {"n", 2}};
  json plain = parse_json(raw_http(port(), "POST", "/v1/chat/completions", req.dump()).body);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  RawResponse r = raw_http(port(), "POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  std::vector<std::string> events = sse_parse_strict(r.body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> text(2);
  std::vector<std::string> finish(2);
  std::vector<bool> got_role(2, false);
  json usage;
  std::string id;
  for (size_t i = 0; i + 1 < events.size(); i++) {
    json c = parse_json(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (id.empty()) id = c["id"];
    EXPECT_EQ(c["id"], id);      // one id for the whole stream
    if (c["choices"].empty()) {  // the usage chunk, last
      EXPECT_EQ(i + 2, events.size());
      usage = c["usage"];
      continue;
    }
    EXPECT_TRUE(c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    int k = c["choices"][0]["index"];
    const json& d = c["choices"][0]["delta"];
    EXPECT_TRUE(finish[k].empty()) << "chunk after finish_reason";
    if (d.contains("role")) {
      EXPECT_EQ(d["role"], "assistant");
      EXPECT_FALSE(got_role[k]);
      got_role[k] = true;
    } else {
      EXPECT_TRUE(got_role[k]) << "content before the role chunk";
    }
    if (d.contains("content")) text[k] += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish[k] = c["choices"][0]["finish_reason"];
  }
  for (int k = 0; k < 2; k++) {
    EXPECT_EQ(text[k], plain["choices"][k]["message"]["content"]) << k;
    EXPECT_EQ(finish[k], plain["choices"][k]["finish_reason"]) << k;
  }
  // the second request may reuse the first one's prompt (prefix cache): all else is equal
  EXPECT_LE(usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), usage["prompt_tokens"].get<int64_t>() - 1);
  usage.erase("prompt_tokens_details");
  plain["usage"].erase("prompt_tokens_details");
  EXPECT_EQ(usage, plain["usage"]);
  // the system text is merged into the first user turn (as render_conversation)
  EXPECT_EQ(usage["prompt_tokens"],
            (int64_t)prompt_by_hand({"be nice\n\nhello", "hello world", "numbers and cats"}).size());
}

TEST(ServerApi, StopStringsCutTheText) {
  Reference ref = greedy_reference({"hello"}, 20);
  // two ASCII bytes from the middle of the reply (a valid UTF-8 stop string)
  std::string stop;
  for (size_t i = 2; i + 2 <= ref.text.size() && stop.empty(); i++)
    if ((unsigned char)ref.text[i] < 0x80 && (unsigned char)ref.text[i + 1] < 0x80) stop = ref.text.substr(i, 2);
  if (stop.empty()) GTEST_SKIP() << "no ASCII pair in the reply: " << ref.text;
  std::string want = ref.text.substr(0, ref.text.find(stop));
  json req = {{"messages", user_messages("hello")}, {"temperature", 0}, {"max_tokens", 20}, {"stop", stop}};
  json j = parse_json(raw_http(port(), "POST", "/v1/chat/completions", req.dump()).body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], want);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  req["stream"] = true;
  req["stop"] = json::array({"\x01never", stop});
  std::string streamed;
  for (auto& e : sse_parse_strict(raw_http(port(), "POST", "/v1/chat/completions", req.dump()).body))
    if (e != "[DONE]") {
      json c = parse_json(e);
      if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
        streamed += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  EXPECT_EQ(streamed, want);
}

TEST(ServerApi, LimitsAndBadInputAre400Json) {
  std::string big(8001, 'a'), ok7000(7000, 'b');
  json too_many = json::array();
  for (int i = 0; i < 501; i++) too_many.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "x"}});
  json total = json::array();
  for (int i = 0; i < 5; i++) total.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", ok7000}});
  auto msgs = [](json m, json extra = json::object()) {
    json j = {{"messages", m}};
    j.update(extra);
    return j.dump();
  };
  const json hi = user_messages("hi");
  struct Case {
    std::string body, needle;
    bool upstream_too;
  };
  std::vector<Case> cases = {
      {msgs(json::array()), "At least one message is required", true},
      {msgs(too_many), "Too many messages. Maximum 500", true},
      {msgs(user_messages(big)), "Message 0 is too long. Maximum 8000 characters", true},
      {msgs(total), "Total conversation is too long. Maximum 32000 characters", true},
      {msgs(hi, {{"temperature", 2.5}}), "Temperature must be between 0.0 and 2.0", true},
      {msgs(hi, {{"temperature", -0.1}}), "Temperature must be between", true},
      {msgs(hi, {{"top_k", 201}}), "top_k must be between 0 and 200", true},
      {msgs(hi, {{"top_k", -1}}), "top_k must be between", true},
      {msgs(hi, {{"max_tokens", 0}}), "max_tokens must be between 1 and 4096", true},
      {msgs(hi, {{"max_tokens", 4097}}), "max_tokens must be between 1 and 4096", true},
      {msgs(json::array({{{"role", "tool"}, {"content", "x"}}})), "invalid role", true},
      {msgs(json::array({{{"role", "user"}, {"content", ""}}})), "Message 0 has empty content", true},
      {msgs(json::array({{{"role", "user"}}})), "Message 0 has empty content", true},
      {msgs(json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}})), "alternate",
       true},
      {msgs(json::array({{{"role", "assistant"}, {"content", "a"}}})), "alternate", true},
      {R"({"messages": "hi"})", "messages must be a list", true},
      {R"({"messages": [5]})", "must be an object", true},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "string role", true},
      {R"({"messages": [{"role": "user", "content": 5}]})", "content must be a string", true},
      {msgs(hi, {{"temperature", "hot"}}), "temperature must be a number", true},
      {msgs(hi, {{"temperature", true}}), "temperature must be a number", true},
      {msgs(hi, {{"top_k", 1.5}}), "top_k must be an integer", true},
      {msgs(hi, {{"max_tokens", "9"}}), "max_tokens must be an integer", true},
      {R"({"messages": [{"role": "user", "content": "hi"}])", "not valid JSON", true},
      {"", "not valid JSON", true},
      {"[1,2]", "must be a JSON object", true},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", "not valid UTF-8", true},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"\xed\xa0\x80\"}]}", "not valid UTF-8",
       true},  // a surrogate
      {R"({})", "messages is required", true},
      // OpenAI-only fields
      {msgs(hi, {{"n", 9}}), "n must be between 1 and 8", false},
      {msgs(hi, {{"n", 0}}), "n must be between", false},
      {msgs(hi, {{"top_p", 0}}), "top_p must be in [1e-06, 1]", false},
      {msgs(hi, {{"top_p", 1.5}}), "top_p must be in", false},
      {msgs(hi, {{"stop", json::array({"a", "b", "c", "d", "e"})}}), "at most 4", false},
      {msgs(hi, {{"stop", json::array({1})}}), "stop must be a string", false},
      {msgs(hi, {{"stop", ""}}), "must not be empty", false},
      {msgs(hi, {{"stream", "yes"}}), "stream must be a boolean", false},
      {msgs(hi, {{"seed", "x"}}), "seed must be an integer", false},
      {msgs(hi, {{"model", 3}}), "model must be a string", false},
      {msgs(hi, {{"max_completion_tokens", 5000}}), "max_tokens must be between", false},
      {msgs(json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"text", "x"}}})}}})),
       "unsupported content part type", false},
  };
  for (const Case& c : cases) {
    expect_json_error(raw_http(port(), "POST", "/v1/chat/completions", c.body), 400, c.needle,
                      "v1: " + c.body.substr(0, 80));
    if (c.upstream_too)
      expect_json_error(raw_http(port(), "POST", "/chat/completions", c.body), 400, c.needle,
                        "upstream: " + c.body.substr(0, 80));
  }
  // upstream's endpoint takes no system message; the OpenAI one only first
  json sys = json::array({{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}});
  expect_json_error(raw_http(port(), "POST", "/chat/completions", msgs(sys)), 400, "invalid role", "upstream system");
  json late_sys = json::array({{{"role", "user"}, {"content", "u"}}, {{"role", "system"}, {"content", "s"}}});
  expect_json_error(raw_http(port(), "POST", "/v1/chat/completions", msgs(late_sys)), 400, "invalid role",
                    "late system");
  // exactly at the limits is fine: 8000 characters pass the character check (the tiny model's
  // 1280 positions refuse them next), temperature 2 and top_k 200 generate
  expect_json_error(raw_http(port(), "POST", "/v1/chat/completions", msgs(user_messages(std::string(8000, 'c')))), 400,
                    "the model handles at most", "8000 characters");
  json at_limit = {{"messages", user_messages("hi")}, {"max_tokens", 1}, {"temperature", 2.0}, {"top_k", 200}};
  EXPECT_EQ(raw_http(port(), "POST", "/v1/chat/completions", at_limit.dump()).status, 200);
  // a conversation longer than the model's positions (10 x 128) is refused before generating
  std::string words;
  for (int i = 0; i < 1300; i++) words += "\xe2\x9c\x93 ";  // ~1 token each
  expect_json_error(raw_http(port(), "POST", "/v1/chat/completions", msgs(user_messages(words))), 400,
                    "the model handles at most", "too many tokens");
  EXPECT_EQ(raw_http(port(), "GET", "/health").status, 200);
}

TEST(ServerApi, UnknownRoutes404AndWrongMethods405) {
  expect_json_error(raw_http(port(), "GET", "/nope"), 404, "no such path", "GET /nope");
  expect_json_error(raw_http(port(), "POST", "/nope", "{}"), 404, "no such path", "POST /nope");
  RawResponse r = raw_http(port(), "GET", "/chat/completions");
  expect_json_error(r, 405, "not allowed", "GET /chat/completions");
  EXPECT_EQ(r.headers["allow"], "POST, OPTIONS");
  expect_json_error(raw_http(port(), "GET", "/v1/chat/completions"), 405, "not allowed", "GET v1");
  expect_json_error(raw_http(port(), "DELETE", "/health"), 405, "not allowed", "DELETE /health");
  expect_json_error(raw_http(port(), "PUT", "/v1/chat/completions", "{}"), 405, "not allowed", "PUT v1");
  expect_json_error(raw_http(port(), "POST", "/health", "{}"), 405, "not allowed", "POST /health");
  RawResponse o = raw_http(port(), "OPTIONS", "/v1/chat/completions");
  EXPECT_EQ(o.status, 204);
  EXPECT_EQ(o.headers["allow"], "POST, OPTIONS");
  EXPECT_EQ(o.headers.count("access-control-allow-origin"), 0u);
}

TEST(ServerApi, OversizedBody413) {
  json big = {{"messages", user_messages(std::string(1100000, 'z'))}};
  expect_json_error(raw_http(port(), "POST", "/v1/chat/completions", big.dump()), 413, "too large", "1.1 MB body");
  // a Content-Length beyond the cap is refused without reading the body
  int fd = raw_connect(port());
  raw_send(
      fd,
      "POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{");
  RawResponse r = parse_response(raw_read_response(fd));
  close(fd);
  expect_json_error(r, 413, "too large", "Content-Length 50 MB");
  EXPECT_EQ(r.headers["connection"], "close") << "the unread body ends the connection";
}

TEST(ServerApi, ClientDisconnectFreesItsWorker) {
  const int64_t budget = 1000;
  std::string prompt = long_prompt(budget);
  ASSERT_FALSE(prompt.empty()) << "no prompt runs the whole budget greedily";
  const int64_t tokens_before = stats_field("tokens_generated");
  int fd = raw_connect(port());
  json req = {{"messages", user_messages(prompt)}, {"temperature", 0}, {"max_tokens", budget}};
  std::string body = req.dump();
  raw_send(fd,
           "POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {  // the stream has begun
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, (size_t)n);
  }
  close(fd);
  // the worker comes back long before the 1000 tokens would have been generated
  for (int i = 0; i < 500 && stats_field("available_workers") != 2; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(stats_field("available_workers"), 2);
  const int64_t generated = stats_field("tokens_generated") - tokens_before;
  EXPECT_LT(generated, budget / 2) << "the generation ran on after the client left";
  EXPECT_GE(generated, 1);
}

// a non-streaming request has no write to fail while it generates: the server watches the
// socket instead, so the worker is free a few steps after the client leaves
TEST(ServerApi, NonStreamingClientDisconnectFreesItsWorker) {
  const int64_t budget = 1000;
  std::string prompt = long_prompt(budget);
  ASSERT_FALSE(prompt.empty()) << "no prompt runs the whole budget greedily";
  const int64_t tokens_before = stats_field("tokens_generated"), served_before = stats_field("requests_served");
  int fd = raw_connect(port());
  json req = {{"messages", user_messages(prompt)}, {"temperature", 0}, {"max_tokens", budget}};
  std::string body = req.dump();
  raw_send(
      fd,
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
  for (int i = 0; i < 500 && stats_field("available_workers") == 2; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  close(fd);
  for (int i = 0; i < 500 && stats_field("available_workers") != 2; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(stats_field("available_workers"), 2);
  // the request went through generation and was counted (its tokens are added when it ends:
  // how many depends on how soon the first decode step saw the closed socket, maybe none)
  for (int i = 0; i < 100 && stats_field("requests_served") == served_before; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(stats_field("requests_served"), served_before + 1);
  const int64_t generated = stats_field("tokens_generated") - tokens_before;
  EXPECT_LT(generated, budget / 2) << "the generation ran on after the client left";
}

// every worker generating, the connection cap reached by requests being answered (none to
// shed): /health still answers (on a connection beyond the cap, which serves nothing else)
TEST(ServerLifecycle, HealthAnswersWhenEverythingIsBusy) {
  const int64_t budget = 1000;
  std::string prompt = long_prompt(budget);
  ASSERT_FALSE(prompt.empty());
  ServerProcess s(
      NANOCHAT_BIN, world().base,
      {"--workers", "1", "--max-queue", "4", "--max-connections", "4", "--max-connections-per-client", "8", "-q"});
  ASSERT_GT(s.port(), 0) << s.log();
  wait_until_healthy(s.port());
  json req = {{"messages", user_messages(prompt)}, {"temperature", 0}, {"max_tokens", budget}, {"stream", true}};
  std::string body = req.dump();
  const std::string post =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  // 4 connections, the cap, each with 5 long streams pipelined (httplib's keep-alive count: a
  // connection closes after its fifth request): when one stream ends, the connection's next
  // request is already waiting, so none of them is ever idle (a tiny model runs one stream of
  // 1,000 tokens in well under a second, and an idle one would be shed)
  std::vector<int> held;
  for (int i = 0; i < 4; i++) {
    int fd = raw_connect(s.port());
    std::string pipelined;
    for (int k = 0; k < 5; k++) pipelined += post;
    raw_send(fd, pipelined);
    held.push_back(fd);
  }
  for (int i = 0; i < 500 && parse_json(raw_http(s.port(), "GET", "/health").body)["available_workers"] != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const auto start = std::chrono::steady_clock::now();
  RawResponse h = raw_http(s.port(), "GET", "/health");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(parse_json(h.body)["available_workers"], 0);
  EXPECT_LT(secs, 1.0);
  RawResponse other = raw_http(s.port(), "GET", "/v1/models");
  EXPECT_EQ(other.status, 503) << other.body;
  EXPECT_NE(other.body.find("too many connections"), std::string::npos) << other.body;
  for (int fd : held) close(fd);
  // once they are gone, everything is served again
  for (int i = 0; i < 300 && raw_http_status(s.port(), "GET", "/v1/models") != 200; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(raw_http_status(s.port(), "GET", "/v1/models"), 200);
}

// On its own server, which must then exit cleanly on SIGTERM: in an ASan build
// (runs/test_asan.sh) a heap error aborts it and LeakSanitizer turns a leak into a non-zero exit
// with its report in the log.
TEST(ServerApi, ThousandBadRequestsInARowThenHealthy) {
  ServerProcess s(NANOCHAT_BIN, world().base, {"--workers", "2", "-q"});
  ASSERT_GT(s.port(), 0) << s.log();
  wait_until_healthy(s.port());
  // {bytes, a reply is due}: a request the server can judge gets a 4xx; one it must wait on
  // (a body cut short, a TLS hello) is dropped by the client
  std::vector<std::pair<std::string, bool>> raw_requests = {
      {"garbage\r\n\r\n", true},
      {"GET\r\n\r\n", true},
      {"POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\n{bad}", true},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n[]", true},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999\r\n\r\n", true},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n", true},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n{\"a\"", false},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true},
      {"BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true},
      {"GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true},
      {"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(100000, 'h') + "\r\n\r\n", true},
      {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), false},
      {"POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 19\r\n\r\n{\"messages\":[\"\xc3\x28\"]}",
       true},
      {"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1200000\r\n\r\n" +
           std::string(1200000, '{'),
       true},
      {"DELETE /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true},
      {"GET /../../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true},
  };
  int answered = 0, due = 0;
  for (int i = 0; i < 1000; i++) {
    int fd = raw_connect(s.port());
    ASSERT_GE(fd, 0) << "connect failed at request " << i;
    const auto& [req, reply_due] = raw_requests[i % raw_requests.size()];
    raw_send(fd, req);
    std::string resp = reply_due ? raw_read_response(fd) : "";
    close(fd);
    if (!reply_due) continue;
    due++;
    if (resp.rfind("HTTP/1.1 4", 0) == 0 && resp.find("{\"error\":{\"message\":") != std::string::npos) answered++;
    else
      ADD_FAILURE() << "request " << i << " (kind " << i % raw_requests.size() << ") answered '" << resp.substr(0, 60)
                    << "'";
  }
  EXPECT_EQ(answered, due);
  RawResponse h = raw_http(s.port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_FALSE(s.exited());
  // and it still generates
  json req = {{"messages", user_messages("hi")}, {"max_tokens", 3}};
  EXPECT_EQ(raw_http(s.port(), "POST", "/v1/chat/completions", req.dump()).status, 200);
  kill(s.pid(), SIGTERM);
  EXPECT_EQ(s.wait_exit(60), 0) << s.log();
  EXPECT_EQ(s.log().find("Sanitizer"), std::string::npos) << s.log();
}

// the Python packages (and Chromium) come from runs/setup.sh; a machine without them skips
static bool python_has(const std::string& module) {
  return run_shell(std::string(NANOCHAT_PYTHON) + " -c 'import " + module + "'").rc == 0;
}

TEST(ServerApi, OpenAiPythonClient) {
  if (!python_has("openai")) GTEST_SKIP() << "the openai package is not installed";
  Reference ref = greedy_reference({"hello world"}, 8);
  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                              "/tests/fixtures/openai_client.py http://127.0.0.1:" + std::to_string(port()));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  json j = parse_json(r.out);
  EXPECT_EQ(j["models"], json::array({"d2"}));
  EXPECT_EQ(j["plain"], ref.text);
  EXPECT_EQ(j["streamed"], ref.text);
  EXPECT_EQ(j["finish"], ref.stopped ? "stop" : "length");
  EXPECT_EQ(j["usage_completion"], ref.tokens);
  EXPECT_EQ(j["bad_request_status"], 400);
}

TEST(ServerApi, BrowserDrivesTheUi) {
  if (!python_has("playwright") || access("/usr/bin/chromium", X_OK) != 0)
    GTEST_SKIP() << "playwright or /usr/bin/chromium is missing (runs/test.sh installs them)";
  const std::string shot = std::string(NANOCHAT_BINARY_DIR) + "/chat_web_ui.png";
  std::remove(shot.c_str());
  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                              "/tests/browser/ui_test.py http://127.0.0.1:" + std::to_string(port()) + " " + shot);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  json j = parse_json(r.out);
  // one shown text per token event (events that add no visible text aside): a reply of two or
  // more events must show at least two
  EXPECT_GE(j["token_events"].get<int>(), 1);
  EXPECT_GE(j["stream_updates"].get<int>(), std::min(2, j["token_events"].get<int>()))
      << "the reply did not arrive in pieces";
  EXPECT_EQ(j["after_edit_user"], json::array({"hello again"}));
  EXPECT_EQ(j["after_regenerate_assistants"], 1);
  EXPECT_EQ(j["after_clear_messages"], 0);
  EXPECT_EQ(j["settings"], "temperature 0.5 · top-k 50");
  EXPECT_GT(read_file(shot).size(), 1000u) << "no screenshot at " << shot;
  // on a 390-px phone screen the header is one line (ui_test.py measures it and shoots it)
  EXPECT_EQ(j["header_390"]["lines"], 1) << j["header_390"].dump();
  EXPECT_EQ(j["phone_screenshot_width"], 390);
  // every chat request of one browser carries its one random salt (16 bytes in hex), kept across
  // a reload; another browser has its own
  const json& salts = j["cache_salts"];
  ASSERT_GE(salts["requests"].size(), 3u) << salts.dump();
  const std::string salt = salts["requests"][0].get<std::string>();
  EXPECT_EQ(salt.size(), 32u) << salt;
  EXPECT_EQ(salt.find_first_not_of("0123456789abcdef"), std::string::npos) << salt;
  for (const json& s : salts["requests"]) EXPECT_EQ(s, salt);
  EXPECT_EQ(salts["after_reload"], salt);
  EXPECT_TRUE(salts["other_browser"].is_string() && salts["other_browser"] != salt) << salts.dump();
}

// ---- lifecycle ------------------------------------------------------------------------------------

TEST(ServerLifecycle, SigtermLetsTheInFlightStreamFinish) {
  const int64_t budget = 1000;
  std::string prompt = long_prompt(budget);
  ASSERT_FALSE(prompt.empty());
  ServerProcess s(NANOCHAT_BIN, world().base, {"--workers", "1"});
  ASSERT_GT(s.port(), 0) << s.log();
  wait_until_healthy(s.port());
  int fd = raw_connect(s.port());
  json req = {{"messages", user_messages(prompt)}, {"temperature", 0}, {"max_tokens", budget}};
  std::string body = req.dump();
  raw_send(
      fd,
      "POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, (size_t)n);
  }
  kill(s.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // draining: new work is refused, health says so
  RawResponse h = raw_http(s.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(parse_json(h.body)["status"], "shutting down");
  expect_json_error(raw_http(s.port(), "POST", "/chat/completions", json({{"messages", user_messages("x")}}).dump()),
                    503, "shutting down", "during drain");
  got += raw_read_all(fd);
  close(fd);
  RawResponse r = parse_response(got);  // complete and well framed
  std::vector<std::string> events = sse_parse_strict(r.body);
  EXPECT_EQ(events.back(), R"({"done":true})");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); i++) text += parse_json(events[i])["token"].get<std::string>();
  EXPECT_EQ(text, engine_greedy_text(prompt, budget));  // the whole reply, not cut short
  EXPECT_EQ(s.wait_exit(20), 0) << s.log();
  EXPECT_NE(s.log().find("stopped after 1 requests"), std::string::npos) << s.log();
}

TEST(ServerLifecycle, BadCheckpointExitsWithOneLine) {
  ServerProcess s(NANOCHAT_BIN, world().base, {"--model-tag", "d99"});
  EXPECT_EQ(s.wait_exit(30), 1) << s.log();
  std::string log = s.log();
  EXPECT_NE(log.find("error: chat-web:"), std::string::npos) << log;
  EXPECT_NE(log.find("d99"), std::string::npos) << log;
}

// The pool is allocated at start, zeroed: one that does not fit the machine is refused before
// it is, not found out by the OOM killer once its rows fill up
TEST(ServerLifecycle, AKVPoolBiggerThanTheMachineExitsWithOneLine) {
  // the tiny model: 2 layers x 2 KV heads x head_dim 64 x fp32, K and V = 2 KiB per position;
  // 1,280 positions (10 x sequence_len 128), 1,024 rows, 64 workers: 160 GiB
  const int64_t need = 64LL * 1024 * 1280 * (2 * 2 * 2 * 64 * 4);
  if (host_info().memory_available_bytes / 4 * 3 >= need) GTEST_SKIP() << "this machine could hold the 160 GiB pool";
  ServerProcess s(NANOCHAT_BIN, world().base, {"--workers", "64", "--max-batch", "1024", "--kv-len", "1048576"});
  EXPECT_EQ(s.wait_exit(60), 1) << s.log();
  std::string log = s.log();
  EXPECT_NE(
      log.find("error: chat-web: the KV pool needs 160.0 GiB (64 pools x 1024 rows x 1280 positions x 2.0 KiB each)"),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("lower --max-batch (1024), --kv-len (1280) or --workers (64)"), std::string::npos) << log;
}
