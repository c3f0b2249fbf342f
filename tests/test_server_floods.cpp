// The chat-web server under connection floods (the real binary with the tiny model of
// server_fixture.h, on loopback): the attacker connects from 127.0.0.2 ... 127.0.0.254, the
// legitimate client from 127.0.0.1.
//  - RequestReader, the event loop's judge of where a request ends, on hand-counted bytes;
//  - 1,000 slowloris connections at one byte a second, and a 10,000-connection flood (the
//    server under `ulimit -n 1024`): /health answers within 200 ms at p99, >= 95% of the
//    legitimate chats succeed, and the server's descriptors stay within the cap plus a
//    constant;
//  - kept-alive clients whose next request waits in the kernel are not shed to make room, and
//    a connection closed after its answer frees its place before its client sees the end;
//  - fair admission: key A's flood gets A's own 503s, and key B goes ahead of A's backlog.
// Every loop here is bounded in count and in time; each attack lasts a few seconds.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http_raw_client.h"
#include "nanochat/common/percentile.h"
#include "server/request_reader.h"
#include "server_fixture.h"

using namespace nanochat;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

const std::string& base_dir() { return tiny_chat_shared_base_dir(); }

struct Server {
  ServerProcess proc;
  explicit Server(std::vector<std::string> args) : proc(NANOCHAT_BIN, base_dir(), args) {
    wait_until_healthy(proc.port());
  }
  int port() const { return proc.port(); }
};

const std::string kHello = R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":2})";

json stats_of(int port) { return json::parse(raw_http(port, "GET", "/stats").body); }

std::string times(const std::vector<double>& ms) {
  std::string out;
  for (double v : ms) out += std::to_string((int)v) + " ";
  return out;
}

void expect_legit_served(const Legit& l, const char* attack) {
  std::printf("%s: /health ms: %s\nchats ms: %s\n", attack, times(l.health_ms).c_str(), times(l.chat_ms).c_str());
  ASSERT_GE(l.health_ms.size(), 20u) << attack;
  const double p99 = percentile(l.health_ms, 0.99);
  EXPECT_LT(p99, 200.0) << attack << ": /health p99 " << p99 << " ms over " << l.health_ms.size() << " tries ("
                        << l.health_ok << " answered 200)";
  ASSERT_GT(l.chats, 4) << attack;
  EXPECT_GE(l.chats_ok, (int)std::ceil(0.95 * l.chats))
      << attack << ": " << l.chats_ok << " of " << l.chats << " chats succeeded";
}

}  // namespace

// ---- units: where a request ends ----------------------------------------------------------------

TEST(RequestReaderUnits, ContentLengthBodyEndsAtItsLengthAndTheRestIsTheNext) {
  RequestLimits limits;
  RequestReader r(limits);
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n";  // 34 + 2 + 9 + 19 + 2 = 66 bytes
  const std::string bytes = head + "hello" + "GET /health HTTP/1.1\r\n";
  ASSERT_EQ(head.size(), 66u);
  EXPECT_EQ(r.feed(bytes.data(), bytes.size()), 71u);  // 66 + 5: the pipelined GET is not its
  EXPECT_EQ(r.state(), RequestReader::State::whole);
  EXPECT_EQ(r.request_line(), "POST /v1/chat/completions HTTP/1.1");
  ASSERT_EQ(r.fields().size(), 2u);
  EXPECT_EQ(r.fields()[1].first, "Content-Length");
  EXPECT_EQ(r.fields()[1].second, "5");
}

TEST(RequestReaderUnits, OneByteAtATimeIsWholeOnlyAtTheLastByte) {
  RequestLimits limits;
  const std::string bytes =
      "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nTrailer: t\r\n\r\n";
  RequestReader r(limits);
  for (size_t i = 0; i < bytes.size(); i++) {
    ASSERT_NE(r.state(), RequestReader::State::whole) << "whole before byte " << i;
    ASSERT_EQ(r.feed(&bytes[i], 1), 1u) << "byte " << i;
  }
  EXPECT_EQ(r.state(), RequestReader::State::whole);
  RequestReader more(limits);  // and a byte past the last chunk is left for the next request
  const std::string two = bytes + "G";
  EXPECT_EQ(more.feed(two.data(), two.size()), bytes.size());
}

TEST(RequestReaderUnits, GetWithoutBodyIsWholeAtTheBlankLine) {
  RequestLimits limits;
  RequestReader r(limits);
  const std::string bytes = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  EXPECT_EQ(r.feed(bytes.data(), bytes.size() - 1), bytes.size() - 1);
  EXPECT_EQ(r.state(), RequestReader::State::head);
  EXPECT_EQ(r.feed(bytes.data() + bytes.size() - 1, 1), 1u);
  EXPECT_EQ(r.state(), RequestReader::State::whole);
}

TEST(RequestReaderUnits, LimitsRefuseAsTheBytesCome) {
  RequestLimits limits;
  limits.max_line = 28;  // "Transfer-Encoding: chunked" and its CR are 27
  limits.max_headers = 2;
  limits.max_body = 10;
  limits.max_raw_body = 40;
  auto judge = [&](const std::string& bytes) {
    RequestReader r(limits);
    r.feed(bytes.data(), bytes.size());
    return std::make_pair(r.state() == RequestReader::State::refused ? r.status() : 0, r.message());
  };
  EXPECT_EQ(judge("GET /0123456789abcdef HTTP/1.1\r\n").first, 414);  // 30 bytes before its CR: past 28
  EXPECT_EQ(judge("GET / HTTP/1.1\r\nX-Long: 0123456789abcdefghijk\r\n").first, 431);  // 29 bytes
  EXPECT_EQ(judge("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n").first, 431);        // a third header line
  const auto big = judge("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\n");  // refused before the body
  EXPECT_EQ(big.first, 413);
  EXPECT_NE(big.second.find("11 bytes"), std::string::npos) << big.second;
  // chunked: 4 chunks of 9 bytes are 4 x (3 + 9 + 2) = 56 bytes on the wire, past 40
  std::string chunked = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; i++) chunked += "9\r\n123456789\r\n";
  EXPECT_EQ(judge(chunked).first, 413);
  EXPECT_EQ(judge("POST / HTTP/1.1\r\nHost: a\r\n\r\n").first, 411);  // framing.h's rules apply
  EXPECT_EQ(judge("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").first, 400);
}

TEST(RequestReaderUnits, ExpectContinueWaitsBeforeTheBodyOnly) {
  RequestLimits limits;
  RequestReader r(limits);
  const std::string head = "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n";
  r.feed(head.data(), head.size());
  EXPECT_TRUE(r.awaits_continue());
  r.feed("h", 1);
  EXPECT_FALSE(r.awaits_continue());
  EXPECT_EQ(r.state(), RequestReader::State::body);
  r.feed("i", 1);
  EXPECT_EQ(r.state(), RequestReader::State::whole);
}

// ---- floods ------------------------------------------------------------------------------------

// 1,000 connections, each sending its request line and then one byte a second; those the
// server sheds come back at once (so 1,000 keep trying). The cap is 256 connections.
TEST(Floods, ThousandSlowlorisConnectionsLeaveHealthAndChatsServed) {
  constexpr int kSlow = 1000, kRounds = 6;
  ASSERT_TRUE(raise_fd_limit(4096)) << "this test needs 4,096 descriptors (ulimit -Hn)";
  Server s({"-q", "--workers", "1"});
  const int port = s.port();
  const int base_fds = open_fds(s.proc.pid());
  FdWatch fds(s.proc.pid());
  Slowloris attack(port, kSlow, kRounds);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the first round is in
  const Legit l = legit_traffic(port, 3.5, kHello);
  const json st = stats_of(port);
  attack.stop();
  const int peak = fds.stop();
  expect_legit_served(l, "1,000 slowloris connections");
  EXPECT_LE(peak, base_fds + 256 + 16 + 8) << "descriptors at the peak, from " << base_fds << " at rest";
  EXPECT_GT(st["connections"]["shed_partial"].get<int64_t>(), 0) << st.dump();  // the cap was reached
  EXPECT_LE(st["connections"]["peak"].get<int64_t>(), 256 + 16) << st.dump();
  EXPECT_EQ(raw_http(port, "GET", "/health").status, 200);
}

// 10,000 connections opened at once (silent) and held, against a server under ulimit -n 1024
TEST(Floods, TenThousandConnectionFloodUnderUlimit1024) {
  rlimit hard{};
  getrlimit(RLIMIT_NOFILE, &hard);
  const int flood = hard.rlim_max == RLIM_INFINITY ? 10000 : (int)std::min<rlim_t>(10000, hard.rlim_max - 600);
  if (flood < 2000) GTEST_SKIP() << "the hard limit on descriptors (" << hard.rlim_max << ") is too low for a flood";
  ASSERT_TRUE(raise_fd_limit((rlim_t)flood + 512));
  Server s({"-q", "--workers", "1"});
  const int port = s.port();
  const rlimit server_limit{1024, 1024};
  ASSERT_EQ(prlimit(s.proc.pid(), RLIMIT_NOFILE, &server_limit, nullptr), 0);
  const int base_fds = open_fds(s.proc.pid());
  FdWatch fds(s.proc.pid());
  ConnectionFlood attack(port, flood, 6.0);
  const Legit l = legit_traffic(port, 4.0, kHello);
  const json st = stats_of(port);
  attack.stop();
  const int peak = fds.stop();
  EXPECT_GE(attack.opened.load(), flood * 9 / 10) << "the flood itself did not happen";
  expect_legit_served(l, "a 10,000-connection flood");
  EXPECT_LE(peak, base_fds + 256 + 16 + 8) << "descriptors at the peak, from " << base_fds << " at rest";
  EXPECT_GT(st["connections"]["accepted"].get<int64_t>(), 256) << st.dump();
  EXPECT_LE(st["connections"]["peak"].get<int64_t>(), 256 + 16) << st.dump();
  EXPECT_EQ(raw_http(port, "GET", "/health").status, 200);
}

// At the cap, kept-alive connections whose next request already waits in the kernel are not
// the ones closed to make room. The server is stopped (SIGSTOP) while the 8 requests and 40
// new connections arrive, so that every one of them waits when it looks.
TEST(Floods, KeptAliveClientsWithBytesWaitingAreNotShed) {
  Server s({"-q", "--workers", "1", "--max-connections", "8", "--max-connections-per-client", "8"});
  const int port = s.port();
  const std::string health = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::vector<int> kept;
  for (int i = 0; i < 8; i++) {
    const int fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    raw_send(fd, health);
    ASSERT_EQ(parse_response(raw_read_response(fd, 5000)).status, 200) << "connection " << i;
    kept.push_back(fd);
  }
  ASSERT_EQ(kill(s.proc.pid(), SIGSTOP), 0);
  for (int fd : kept) raw_send(fd, health);
  std::vector<int> crowd;
  for (int i = 0; i < 40; i++) {
    const int fd = raw_connect_from(attacker_address(i), port, false);
    if (fd >= 0) crowd.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(kill(s.proc.pid(), SIGCONT), 0);
  for (size_t i = 0; i < kept.size(); i++) {
    const std::string raw = raw_read_response(kept[i], 5000);
    EXPECT_EQ(raw.rfind("HTTP/1.1 200 ", 0), 0u) << "kept-alive connection " << i << " lost its request: " << raw;
    close(kept[i]);
  }
  for (int fd : crowd) close(fd);
  // once the server has seen those closes (a thread may still be finishing with a connection its
  // client already closed, which holds the address's place until then), /health answers again
  int status = 0;
  for (int i = 0; i < 100 && (status = raw_http_status(port, "GET", "/health")) != 200; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(status, 200) << "server exited: " << s.proc.exited() << "\n" << s.proc.log();
}

// A connection the server closes after its answer gives its place back before its client sees
// the end: with one connection per client, a client that reads each answer to its end and
// connects again at once is served every time (it used to find its address's place still
// held by the connection it had just left, while the thread that answered let it go).
TEST(Floods, AClientThatReadsToTheEndFindsItsPlaceFree) {
  Server s({"-q", "--workers", "1", "--max-connections-per-client", "1"});
  int refused = 0;
  for (int i = 0; i < 400; i++) refused += raw_http_status(s.port(), "GET", "/health") != 200;
  EXPECT_EQ(refused, 0) << "of 400 connections one after another";
  EXPECT_EQ(stats_of(s.port())["connections"]["refused_per_client"], 0);
}

// 100 chat requests at once from one address (an evaluation harness, a proxy), past its cap of
// 16 connections: every one is answered, 200 or a 503 with Retry-After and a JSON error; none
// is reset or closed unanswered (a client that retries on 503 may not retry a reset).
TEST(Floods, HundredRequestsAtOnceFromOneAddressGet200OrA503) {
  Server s({"-q", "--workers", "1", "--max-connections-per-client", "16"});
  const int port = s.port();
  constexpr int kClients = 100;
  const std::string body = R"({"messages":[{"role":"user","content":"hello"}],"temperature":0,"max_tokens":16})";
  const std::string request =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<std::string> answers(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; i++)
    clients.emplace_back([&, i] {
      const int fd = raw_connect(port);
      if (fd < 0) return;
      raw_send(fd, request);  // a refused one may have its answer already: a failed send is not the end
      answers[i] = raw_read_all(fd, 30000);
      close(fd);
    });
  for (auto& t : clients) t.join();
  int ok = 0, refused = 0;
  for (int i = 0; i < kClients; i++) {
    SCOPED_TRACE("client " + std::to_string(i));
    ASSERT_EQ(answers[i].rfind("HTTP/1.1 ", 0), 0u) << "no answer (a reset or a bare close): " << answers[i];
    const RawResponse r = parse_response(answers[i]);
    if (r.status == 200) {
      ok++;
      continue;
    }
    ASSERT_EQ(r.status, 503) << r.body;
    refused++;
    EXPECT_EQ(r.headers.count("retry-after"), 1u) << answers[i];
    const json e = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(e.is_object() && e.contains("error")) << r.body;
  }
  std::printf("%d answered 200, %d refused 503\n", ok, refused);
  EXPECT_GT(ok, 0);
  EXPECT_GT(stats_of(port)["connections"]["refused_per_client"].get<int64_t>(), 0) << "the cap was never reached";
}

// ---- fair admission between keys ---------------------------------------------------------------

namespace {

// a chat request with a key, on its own connection; the status (0: no answer) and when the
// answer ended
struct KeyedChat {
  int fd = -1;
  int status = 0;
  bool retry_after = false;  // the response's head has a Retry-After
  Clock::time_point done;
};
void keyed_chat(KeyedChat& c, int port, const std::string& key, int max_tokens) {
  const std::string body = R"({"messages":[{"role":"user","content":"hello"}],"temperature":0,"max_tokens":)" +
                           std::to_string(max_tokens) + "}";
  c.fd = raw_connect(port);
  if (c.fd < 0) return;
  raw_send(c.fd,
           "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer " +
               key + "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n\r\n" + body);
  const std::string raw = raw_read_all(c.fd, 30000);
  c.status = raw.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(raw.substr(9, 3)) : 0;
  c.retry_after = raw.substr(0, raw.find("\r\n\r\n")).find("\r\nRetry-After: ") != std::string::npos;
  c.done = Clock::now();
}

int waiting_requests(int port, const std::string& key) {
  const int fd = raw_connect(port);
  if (fd < 0) return -1;
  raw_send(fd,
           "GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer " + key + "\r\n\r\n");
  const RawResponse r = parse_response(raw_read_all(fd, 5000));
  close(fd);
  const json j = json::parse(r.body, nullptr, false);
  return j.is_object() && j.contains("waiting_requests") ? j["waiting_requests"].get<int>() : -1;
}

}  // namespace

// One row (--max-batch 1), --max-queue 4. Key A sends 12 long requests at once: one runs,
// four wait, the other seven are refused 503. Then key B sends one: it is not refused (its
// own queue is empty), and it gets the row as soon as A's running request ends, ahead of A's
// four that waited longer: when B's answer is out, at most one more of A's has finished than
// had when B came.
TEST(FairAdmission, AFloodingKeyGetsItsOwn503sAndTheOtherKeyGoesNext) {
  const std::string keys = base_dir() + "/keys_fair";
  std::ofstream(keys) << "key-a\nkey-b\n";
  ASSERT_EQ(chmod(keys.c_str(), 0600), 0);
  Server s({"-q", "--workers", "1", "--max-batch", "1", "--max-queue", "4", "--api-key-file", keys});
  const int port = s.port();
  constexpr int kFlood = 12;
  std::vector<KeyedChat> a(kFlood);
  std::vector<std::thread> threads;
  for (int i = 0; i < kFlood; i++) threads.emplace_back([&, i] { keyed_chat(a[i], port, "key-a", 400); });
  // until exactly four wait (10 s at most): before the scheduler has taken the first request
  // into the free row, the queue holds it too (the cap counts the requests no free row takes)
  int waiting = 0;
  for (int i = 0; i < 500 && waiting != 4; i++) {
    waiting = waiting_requests(port, "key-a");
    if (waiting != 4) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(waiting, 4) << "A's backlog did not form";
  auto finished_a = [&] {
    int n = 0;
    for (auto& c : a) n += c.status == 200;
    return n;
  };
  const int a_done_before = finished_a();
  KeyedChat b;
  keyed_chat(b, port, "key-b", 2);
  const int a_done_with_b = finished_a();
  EXPECT_EQ(b.status, 200) << "B was refused while A flooded";
  EXPECT_LE(a_done_with_b, a_done_before + 1) << "A's waiting requests went ahead of B";
  for (auto& c : a)
    if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);  // the rest of A's are cancelled
  for (auto& t : threads) t.join();
  int refused = 0, refused_with_retry_after = 0;
  for (auto& c : a) {
    refused += c.status == 503;
    refused_with_retry_after += c.status == 503 && c.retry_after;
  }
  EXPECT_EQ(refused, kFlood - 1 - 4) << "A's own refusals: one running, four waiting, the rest 503";
  EXPECT_EQ(refused_with_retry_after, refused) << "a full queue's 503 says when to retry";
  for (auto& c : a)
    if (c.fd >= 0) close(c.fd);
}
