"""Times an upstream (Python) nanochat checkout's own training step -- its GPT under
torch.compile and its MuonAdamW from setup_optimizer -- so that bench/gpu/run.sh can print our
base-train's tok/s as a ratio against it on the same machine, shapes and optimizer cadence.
A step is upstream base_train.py's: --grad-accum micro-steps of --batch x --seq-len tokens, each
loss divided by the accumulation before its backward, then one optimizer step. The tokens are
real text when --tokens names a JSON array of ids (run.sh writes one with our tokenizer from the
corpus our base-train reads; consecutive windows of seq-len + 1, wrapping around), else random.
Nothing of upstream is copied here: the checkout is imported from its folder.

usage: upstream_step.py UPSTREAM_DIR [--depth 12] [--seq-len 2048] [--batch 16] [--grad-accum 1]
       [--tokens FILE] [--vocab 32768] [--window-pattern L] [--steps 10] [--warmup 3]
       [--device cuda] [--no-compile]
Prints one JSON line: tok_per_sec (timed steps only), step_ms, compile_s (the warm-up), the
first and last loss, peak_mem_mb (CUDA).
"""
import argparse
import json
import os
import sys
import time

# upstream's base_train.py sets the CUDA allocator's expandable segments before torch allocates
# (less fragmentation, a lower peak): its figures are taken the same way (a caller's own wins)
if "PYTORCH_ALLOC_CONF" not in os.environ and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ:
    os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402  (after the allocator's setting, which torch reads at its first allocation)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--tokens", default="")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--window-pattern", default="L")  # FA3 cannot be downloaded there: SDPA, full windows
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--aspect-ratio", type=int, default=64)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--no-compile", action="store_true")  # eager, for a quick check on a CPU
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
    if not args.no_compile:
        model = torch.compile(model, dynamic=False)

    rows = args.batch * args.grad_accum  # rows of one optimizer step
    if args.tokens:
        with open(args.tokens) as f:
            ids = torch.tensor(json.load(f), dtype=torch.long)
        if int(ids.max()) >= args.vocab:
            sys.exit(f"error: {args.tokens}: token id {int(ids.max())} is not below --vocab {args.vocab}")
        n = args.seq_len + 1
        if ids.numel() < n:  # a tiny file: repeated up to one window
            ids = ids.repeat(n // max(1, ids.numel()) + 1)
        windows = ids.numel() // n
        ids = ids[: windows * n].view(windows, n)
    else:
        gen = torch.Generator(device="cpu").manual_seed(0)
    cursor = 0

    def next_step_batches():  # the grad_accum micro-batches of one step, (x, y) each
        nonlocal cursor
        if args.tokens:
            sel = (torch.arange(rows) + cursor) % ids.size(0)
            cursor += rows
            w = ids[sel].to(device)
        else:
            w = torch.randint(args.vocab, (rows, args.seq_len + 1), generator=gen).to(device)
        return [(w[i * args.batch:(i + 1) * args.batch, :-1].contiguous(),
                 w[i * args.batch:(i + 1) * args.batch, 1:].contiguous()) for i in range(args.grad_accum)]

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step():
        batches = next_step_batches()
        total = 0.0
        for x, y in batches:
            loss = model(x, y)
            (loss / args.grad_accum).backward()
            total += loss.detach()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        return total / args.grad_accum

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
    print(json.dumps({"impl": "upstream " + ("eager" if args.no_compile else "torch.compile"), "depth": args.depth,
                      "n_embd": dim, "batch": args.batch, "grad_accum": args.grad_accum,
                      "data": "tokens of " + args.tokens if args.tokens else "random",
                      "seq_len": args.seq_len, "window_pattern": args.window_pattern, "device": args.device,
                      "tok_per_sec": rows * args.seq_len / dt, "step_ms": 1000 * dt, "compile_s": compile_s,
                      "loss_first": first, "loss_last": loss.item(),
                      "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None}))


if __name__ == "__main__":
    main()
