// The load generator of the serving benches (bench_server, bench_serving): streaming POST
// /chat/completions requests, each on a fresh loopback connection (tests/http_raw_client.h),
// from `clients` threads sending back to back.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "http_raw_client.h"

namespace nanochat {

struct StreamSample {
  double ttft = 0;           // seconds, request sent -> first token event (the whole request when none came)
  std::vector<double> gaps;  // seconds between token events
  int64_t tokens = 0;        // token events
};

// one streaming request; false when it could not connect or the reply is no complete 200 stream
inline bool bench_stream_chat(int port, const std::string& body, StreamSample& s) {
  auto seconds = [](bench_clock::time_point a, bench_clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const bench_clock::time_point t0 = bench_clock::now();
  const int fd = raw_connect(port);
  if (fd < 0) return false;
  raw_send(
      fd,
      "POST /chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string got;
  char buf[8192];
  size_t scanned = 0;
  bench_clock::time_point last = t0;
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, (size_t)n);
    const bench_clock::time_point now = bench_clock::now();
    for (size_t at; (at = got.find("data: {\"token\":", scanned)) != std::string::npos; scanned = at + 1) {
      if (s.tokens == 0) s.ttft = seconds(t0, now);
      else s.gaps.push_back(seconds(last, now));
      last = now;
      s.tokens++;
    }
  }
  close(fd);
  if (s.tokens == 0) s.ttft = bench_seconds_since(t0);
  return got.rfind("HTTP/1.1 200", 0) == 0 && got.find("{\"done\":true}") != std::string::npos;
}

struct LoadLevel {
  double seconds = 0;  // wall time of the level
  int done = 0, failures = 0;
  int64_t tokens = 0;
  std::vector<double> ttft, gaps;  // seconds, over every completed request
};

// `requests` requests from `clients` threads, none started after `max_seconds`
inline LoadLevel bench_http_load(int port, int clients, int requests, double max_seconds, const std::string& body) {
  LoadLevel lv;
  std::mutex mu;
  std::atomic<int> next{0};
  const bench_clock::time_point t0 = bench_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; c++)
    threads.emplace_back([&] {
      while (next.fetch_add(1) < requests && bench_seconds_since(t0) < max_seconds) {
        StreamSample s;
        const bool ok = bench_stream_chat(port, body, s);
        std::lock_guard<std::mutex> lock(mu);
        if (!ok) {
          lv.failures++;
          continue;
        }
        lv.done++;
        lv.tokens += s.tokens;
        lv.ttft.push_back(s.ttft);
        lv.gaps.insert(lv.gaps.end(), s.gaps.begin(), s.gaps.end());
      }
    });
  for (auto& t : threads) t.join();
  lv.seconds = bench_seconds_since(t0);
  return lv;
}

}  // namespace nanochat
