#!/usr/bin/env python3
"""Soak load for a running `nanochat chat-web` (bench/soak_server.sh starts one).

`--concurrency` client threads send back-to-back requests for `--seconds`, drawn at random:
valid streaming and non-streaming chats (both endpoints), the hostile requests of test_server_hardening
(deep JSON, a long header line, many headers, an endless chunked body, a gzip bomb, a foreign
Host and Origin, a client-sent REMOTE_ADDR, a request that trickles in past the deadline) and
clients that disconnect mid-reply. Every answer is checked against the status its kind must
get. The server's RSS is sampled from /proc every second.

Prints: requests served, 5xx count, unexpected answers, p50/p99 latency of the valid requests
in the first and the last minute (or half, for a shorter run), and RSS growth from the end of
the first window to the end of the run. Exit status 1 if any 5xx, any unexpected answer, or
RSS growth of 10% or more, or a worker or KV row still taken at the end (GET /stats). Standard
library only.
"""
import argparse
import gzip
import json
import random
import socket
import threading
import time

HELLO = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
# a long prompt (several prefill chunks) and a two-turn chat (the prefix cache's case)
LONG = dict(HELLO, messages=[{"role": "user", "content": " ".join(["the model talks about numbers and cats"] * 20)}])
TURN2 = dict(HELLO, messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"},
                              {"role": "user", "content": "what is two plus three"}])


def connect(port, timeout=30.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s):
    out = bytearray()
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
    return bytes(out)


def status_of(raw):
    if raw.startswith(b"HTTP/1.1 ") and len(raw) >= 12:
        return int(raw[9:12])
    return 0


def exchange(port, head, body=b"", pieces=None):
    """Sends head+body (and `pieces`, tolerating a server that refuses midway); returns the status."""
    s = connect(port)
    try:
        try:
            s.sendall(head + body)
            for p in pieces or []:
                s.sendall(p)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return status_of(read_all(s))
    finally:
        s.close()


def post_head(path, body, extra=b"", host=b"127.0.0.1", ctype=b"application/json"):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\nContent-Type: " + ctype +
            b"\r\n" + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")


def chat(port, path, stream, base=HELLO):
    req = dict(base)
    if stream:
        req["stream"] = True
    body = json.dumps(req).encode()
    return exchange(port, post_head(path, body), body)


DEEP = b'{"stop":' + b"[" * 200000 + b"]" * 200000 + b"}"
BOMB = gzip.compress(b"\0" * (64 << 20), compresslevel=9)  # 64 MiB in ~64 KB
CHUNK = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"


def slow_request(port, deadline):
    """A header byte every 0.4 s until the server gives up on it (408)."""
    s = connect(port, timeout=0.4)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        give_up = time.time() + deadline + 5
        while time.time() < give_up:
            try:
                s.sendall(b"X")
                r = s.recv(65536)
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not r:
                break
            s.settimeout(5)
            return status_of(r + read_all(s))
        return 0
    finally:
        s.close()


def disconnect_stream(port):
    body = json.dumps(dict(HELLO, stream=True, max_tokens=200)).encode()
    s = connect(port)
    try:
        s.sendall(post_head(b"/v1/chat/completions", body) + body)
        raw = s.recv(4096)  # the headers (and maybe a first event), then gone
        return status_of(raw)
    finally:
        s.close()


def disconnect_plain(port):
    body = json.dumps(dict(HELLO, max_tokens=200)).encode()
    s = connect(port)
    try:
        s.sendall(post_head(b"/v1/chat/completions", body) + body)
        time.sleep(0.05)
        return -1  # no answer awaited
    finally:
        s.close()


def kinds(port, deadline):
    """name -> (weight, function returning the status, the statuses it may get, valid?)"""
    ok = {200}
    return {
        "chat": (25, lambda: chat(port, b"/v1/chat/completions", False), ok, True),
        "chat_stream": (15, lambda: chat(port, b"/v1/chat/completions", True), ok, True),
        "upstream_stream": (15, lambda: chat(port, b"/chat/completions", True), ok, True),
        "long_prompt": (5, lambda: chat(port, b"/v1/chat/completions", False, LONG), ok, True),
        "second_turn": (5, lambda: chat(port, b"/v1/chat/completions", True, TURN2), ok, True),
        "health": (5, lambda: exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), {200}, False),
        "deep_json": (3, lambda: exchange(port, post_head(b"/v1/chat/completions", DEEP, ctype=b"text/plain"), DEEP), {400}, False),
        "long_header": (3, lambda: exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", b"h" * (1 << 20)), {431}, False),
        "many_headers": (3, lambda: exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
                                             b"".join(b"X-%d: v\r\n" % i for i in range(2000)) + b"\r\n"), {431}, False),
        "chunked_flood": (3, lambda: exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                              b"Transfer-Encoding: chunked\r\n\r\n", pieces=[CHUNK] * 64), {413}, False),
        "gzip_bomb": (3, lambda: exchange(port, post_head(b"/v1/chat/completions", BOMB, b"Content-Encoding: gzip\r\n"), BOMB), {413}, False),
        "foreign_host": (3, lambda: exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"), {403}, False),
        "foreign_origin": (3, lambda: exchange(port, post_head(b"/chat/completions", b"{}", b"Origin: http://evil.example\r\n"), b"{}"), {403}, False),
        "remote_addr": (2, lambda: exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nREMOTE_ADDR: 1.2.3.4\r\nConnection: close\r\n\r\n"), {400}, False),
        "bad_json": (3, lambda: exchange(port, post_head(b"/v1/chat/completions", b"{bad"), b"{bad"), {400}, False),
        "slow": (1, lambda: slow_request(port, deadline), {408}, False),
        "disconnect_stream": (5, lambda: disconnect_stream(port), {200}, False),
        "disconnect_plain": (5, lambda: disconnect_plain(port), {-1}, False),
    }


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--deadline", type=float, default=2.0, help="the server's --request-deadline")
    args = ap.parse_args()

    table = kinds(args.port, args.deadline)
    names = list(table)
    weights = [table[n][0] for n in names]
    records = []  # (start offset s, kind, status, latency s)
    lock = threading.Lock()
    t0 = time.time()
    end = t0 + args.seconds

    def client(seed):
        rng = random.Random(seed)
        while time.time() < end:
            name = rng.choices(names, weights)[0]
            start = time.time()
            try:
                status = table[name][1]()
            except OSError as e:
                status = "conn:" + type(e).__name__
            with lock:
                records.append((start - t0, name, status, time.time() - start))

    rss = []  # (offset s, kB)
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            rss.append((time.time() - t0, rss_kb(args.pid)))
            stop.wait(1.0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    sam = threading.Thread(target=sampler)
    sam.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    sam.join()
    elapsed = time.time() - t0
    # every worker and KV row free once the load is gone (disconnected clients included)
    stats = {}
    for _ in range(100):
        s = connect(args.port)
        try:
            s.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            raw = read_all(s)
        finally:
            s.close()
        try:
            stats = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        except (IndexError, ValueError):
            stats = {}
        if stats.get("kv_pool", {}).get("rows_in_use") == 0 and stats.get("running_requests") == 0:
            break
        time.sleep(0.1)
    free = (stats.get("kv_pool", {}).get("rows_in_use") == 0 and stats.get("running_requests") == 0 and
            stats.get("available_workers") == stats.get("total_workers"))

    window = min(60.0, elapsed / 2)
    served = [r for r in records if isinstance(r[2], int) and r[2] > 0]
    five_xx = [r for r in served if r[2] >= 500]
    unexpected = [r for r in records if r[2] not in table[r[1]][2]]
    valid = [r for r in records if table[r[1]][3] and r[2] == 200]
    first = [r[3] * 1000 for r in valid if r[0] < window]
    last = [r[3] * 1000 for r in valid if r[0] >= elapsed - window]
    rss_first = [kb for (t, kb) in rss if t <= window]
    rss_last = [kb for (t, kb) in rss if t >= elapsed - window]
    base_kb = rss_first[-1] if rss_first else rss[0][1]
    end_kb = max(rss_last) if rss_last else rss[-1][1]
    growth = end_kb / base_kb - 1.0

    by_kind = {}
    for r in records:
        by_kind.setdefault(r[1], {}).setdefault(str(r[2]), 0)
        by_kind[r[1]][str(r[2])] += 1
    print("soak: %.0f s at concurrency %d against chat-web pid %d" % (elapsed, args.concurrency, args.pid))
    for name in names:
        print("  %-18s %s" % (name, " ".join("%s:%d" % kv for kv in sorted(by_kind.get(name, {}).items()))))
    print("requests served: %d (valid chats answered 200: %d)" % (len(served), len(valid)))
    print("5xx: %d   unexpected answers: %d" % (len(five_xx), len(unexpected)))
    print("valid latency first %.0f s: p50 %.0f ms p99 %.0f ms (n=%d)" % (window, pct(first, 50), pct(first, 99), len(first)))
    print("valid latency last  %.0f s: p50 %.0f ms p99 %.0f ms (n=%d)" % (window, pct(last, 50), pct(last, 99), len(last)))
    print("RSS: %.1f MB at %.0f s -> %.1f MB max in the last %.0f s: growth %+.1f%%" %
          (base_kb / 1024, window, end_kb / 1024, window, growth * 100))
    print("at the end: %s workers of %s free, KV rows in use %s, running %s, mean rows per decode step %.2f" %
          (stats.get("available_workers"), stats.get("total_workers"), stats.get("kv_pool", {}).get("rows_in_use"),
           stats.get("running_requests"), stats.get("batch", {}).get("mean_rows_per_step", 0.0)))
    for r in unexpected[:10]:
        print("  unexpected: %s got %s after %.2f s" % (r[1], r[2], r[3]))
    result = {"seconds": round(elapsed), "concurrency": args.concurrency, "served": len(served), "5xx": len(five_xx),
              "unexpected": len(unexpected), "p50_first_ms": round(pct(first, 50)), "p99_first_ms": round(pct(first, 99)),
              "p50_last_ms": round(pct(last, 50)), "p99_last_ms": round(pct(last, 99)), "rss_growth_pct": round(growth * 100, 1),
              "all_free_at_end": free}
    print(json.dumps(result))
    return 1 if five_xx or unexpected or growth >= 0.10 or not free else 0


if __name__ == "__main__":
    raise SystemExit(main())
