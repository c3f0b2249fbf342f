"""Times an upstream (Python) nanochat checkout's own training step -- its GPT under
torch.compile and its MuonAdamW from setup_optimizer -- on random tokens, so that
bench/gpu/run.sh can print our base-train's tok/s as a ratio against it on the same machine
and shapes. Nothing of upstream is copied here: the checkout is imported from its folder.

usage: upstream_step.py UPSTREAM_DIR [--depth 12] [--seq-len 2048] [--batch 16] [--vocab 32768]
       [--window-pattern L] [--steps 10] [--warmup 3] [--device cuda]
Prints one JSON line: tok_per_sec (timed steps only), step_ms, compile_s (the warm-up), the
first and last loss, peak_mem_mb (CUDA).
"""
import argparse
import json
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--window-pattern", default="L")  # FA3 cannot be downloaded there: SDPA, full windows
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--aspect-ratio", type=int, default=64)
    ap.add_argument("--head-dim", type=int, default=128)
    args = ap.parse_args()
    sys.path.insert(0, args.upstream)
    from nanochat.gpt import GPT, GPTConfig  # the checkout's own model

    # upstream's base_train.build_model_meta: width rounded up to the head dim
    dim = -(-args.depth * args.aspect_ratio // args.head_dim) * args.head_dim
    heads = dim // args.head_dim
    config = GPTConfig(sequence_len=args.seq_len, vocab_size=args.vocab, n_layer=args.depth, n_head=heads,
                       n_kv_head=heads, n_embd=dim, window_pattern=args.window_pattern)
    device = torch.device(args.device)
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=device)
    model.init_weights()
    optimizer = model.setup_optimizer()
    model = torch.compile(model, dynamic=False)

    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randint(args.vocab, (args.batch, args.seq_len), generator=gen).to(device)
    y = torch.randint(args.vocab, (args.batch, args.seq_len), generator=gen).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.time()
    first = None
    for _ in range(args.warmup):
        loss = step()
        first = loss.item() if first is None else first
    sync()
    compile_s = time.time() - t0
    t0 = time.time()
    for _ in range(args.steps):
        loss = step()
    sync()
    dt = (time.time() - t0) / args.steps
    print(json.dumps({"impl": "upstream torch.compile", "depth": args.depth, "n_embd": dim, "batch": args.batch,
                      "seq_len": args.seq_len, "window_pattern": args.window_pattern, "device": args.device,
                      "tok_per_sec": args.batch * args.seq_len / dt, "step_ms": 1000 * dt, "compile_s": compile_s,
                      "loss_first": first, "loss_last": loss.item(),
                      "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None}))


if __name__ == "__main__":
    main()
