#!/usr/bin/env python3
"""Streaming load on a running `nanochat chat-web`, for bench/gpu/run.sh (python3's standard
library only: the GPU machine has no requests or openai package).

For each level of --clients N: N threads, each on its own keep-alive connection, send
POST /v1/chat/completions with "stream": true back to back for --seconds (a request started
before then runs to its end), each with a prompt of its own (no prefix-cache hits between
them). Per level: the tokens of all finished streams (the usage chunk's completion_tokens)
over the time from the level's start to its last stream's end, time to first token (request
sent to the first chunk with text) at p50 and p99, the median stream's own decode rate, the
requests finished and failed. It waits first for GET /health to say ready, and skips a level
that would not fit in --budget. A readable line per level, each followed by one JSON line of
every level so far: the last line is the whole result even when it is killed part way.
"""
import argparse
import http.client
import json
import math
import sys
import threading
import time


def percentile(xs, q):
    """nearest rank: the smallest value with at least q of the values at or below it"""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def wait_ready(port, timeout):
    """seconds until GET /health said ready, or None"""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status == 200 and json.loads(body).get("ready"):
                return time.monotonic() - start
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    return None


def one_stream(conn, body):
    """one streamed request: (ttft seconds or None, completion tokens, finish reason)"""
    sent = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        detail = resp.read()[:200].decode("utf-8", "replace")
        raise RuntimeError(f"HTTP {resp.status}: {detail}")
    ttft, chunks, tokens, finish = None, 0, None, None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            tokens = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("delta", {}).get("content"):
                chunks += 1
                if ttft is None:
                    ttft = time.monotonic() - sent
            finish = choice.get("finish_reason") or finish
    resp.read()  # the rest of the chunked body, so that the connection can carry the next request
    return ttft, tokens if tokens is not None else chunks, finish, time.monotonic() - sent


def run_level(port, n, seconds, max_tokens, timeout):
    start = time.monotonic()
    stop_at = start + seconds
    lock = threading.Lock()
    done, errors, ends = [], [], []

    def client(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        k = 0
        while time.monotonic() < stop_at:
            body = json.dumps({"messages": [{"role": "user", "content": f"Request {k} of client {i} of {n}: "
                                             f"tell me about the history of the number {k}."}],
                               "stream": True, "max_tokens": max_tokens,
                               "stream_options": {"include_usage": True}})
            k += 1
            try:
                r = one_stream(conn, body)
                with lock:
                    done.append(r)
            except Exception as e:  # a refused or broken stream: counted, and a fresh connection
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                time.sleep(0.05)
        conn.close()
        with lock:
            ends.append(time.monotonic())

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(ends) - start if ends else time.monotonic() - start
    tokens = sum(r[1] for r in done)
    ttfts = [r[0] for r in done if r[0] is not None]
    # a stream's own rate: its tokens after the first over the time after its first token
    rates = [(r[1] - 1) / (r[3] - r[0]) for r in done if r[0] is not None and r[1] > 1 and r[3] > r[0]]
    ms = lambda x: round(x * 1000, 1) if x is not None else None
    return {"clients": n, "requests": len(done), "errors": len(errors), "tokens": tokens,
            "seconds": round(wall, 2), "tok_per_sec": round(tokens / wall, 1) if wall > 0 else None,
            "ttft_p50_ms": ms(percentile(ttfts, 0.5)), "ttft_p99_ms": ms(percentile(ttfts, 0.99)),
            "stream_tok_per_sec_p50": round(percentile(rates, 0.5), 1) if rates else None,
            "finish_reasons": sorted({r[2] for r in done if r[2]}),
            "first_errors": sorted(set(errors))[:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", default="1,16,64", help="concurrent streaming clients per level, comma-separated")
    ap.add_argument("--seconds", type=float, default=8, help="seconds each level sends requests")
    ap.add_argument("--max-tokens", type=int, default=128, help="max_tokens of every request")
    ap.add_argument("--ready-timeout", type=float, default=60, help="seconds to wait for GET /health to say ready")
    ap.add_argument("--budget", type=float, default=600, help="seconds in all: a level that would not fit is skipped")
    ap.add_argument("--timeout", type=float, default=30, help="socket timeout of every connection")
    a = ap.parse_args()
    start = time.monotonic()
    result = {}
    ready = wait_ready(a.port, min(a.ready_timeout, a.budget))
    result["ready_s"] = round(ready, 2) if ready is not None else None
    if ready is None:
        print(f"chat-web on port {a.port} was not ready within {a.ready_timeout} s")
        print(json.dumps(result))
        return 1
    for n in [int(x) for x in a.clients.split(",") if x]:
        left = a.budget - (time.monotonic() - start)
        # the level's seconds, then its last requests' time to finish (a guess: a few seconds)
        if left < a.seconds + 5:
            result[str(n)] = {"skipped": f"out of time ({left:.0f} s left)"}
            print(f"{n:>3} clients: skipped, out of time")
        else:
            r = result[str(n)] = run_level(a.port, n, a.seconds, a.max_tokens, a.timeout)
            print(f"{n:>3} clients: {r['tok_per_sec']} tok/s, TTFT p50 {r['ttft_p50_ms']} ms p99 {r['ttft_p99_ms']} ms, "
                  f"{r['requests']} requests, {r['errors']} errors{' ' + str(r['first_errors']) if r['errors'] else ''}")
        print(json.dumps(result), flush=True)
    return 0 if all(v.get("errors", 0) == 0 and v.get("requests", 1) > 0
                    for k, v in result.items() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
