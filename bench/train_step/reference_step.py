"""The Python baseline of a whole pretraining step: the project's reference GPT and MuonAdamW
(tests/fixtures/gpt_reference.py and optim_reference.py, plain PyTorch written after upstream's
Python, not from the C++ code) with attention through F.scaled_dot_product_attention (causal for
L layers, an explicit FA3-style band mask for S layers), as upstream runs it on a CPU.

--compile 1 does what upstream's base_train does: torch.compile(model, dynamic=False) around a
forward that returns the loss, and the optimizer's fused AdamW and Muon steps each compiled with
fullgraph=True (hyperparameters as 0-D CPU tensors so schedule changes never recompile).
Warm-up steps (which include compilation) are timed apart and excluded from tok/s.

usage: reference_step.py --depth 4 --seq-len 512 --batch 8 --vocab 32768 --dtype float32
                         --threads 2 --steps 5 --warmup 2 --compile 0|1 [--device cpu|cuda]
prints one JSON line: tok_per_sec (mean step), tok_per_sec_best (fastest step), step_ms, peak_rss_mb,
compile_s, loss_first, loss_last, ...
"""
import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from gpt_reference import GPT, config_from_depth  # noqa: E402
from optim_reference import MuonAdamW, param_groups  # noqa: E402


# ---- the timed loop --------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--window-pattern", default="L")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    with torch.device(dev):
        model = GPT(config_from_depth(a.depth, a.vocab, a.seq_len, a.window_pattern), dtype, attention="sdpa")
    torch.manual_seed(42)  # after construction (nn.Embedding draws there; upstream builds on meta)
    model.init_weights()
    opt = MuonAdamW(param_groups(model), dtype, a.compile)
    step_model = torch.compile(model, dynamic=False) if a.compile else model
    # one fixed random batch: the loss must fall step over step (a check that training trains)
    g = torch.Generator().manual_seed(1234)
    idx = torch.randint(a.vocab, (a.batch, a.seq_len), generator=g).to(dev)
    tgt = torch.randint(a.vocab, (a.batch, a.seq_len), generator=g).to(dev)

    losses = []

    def step():
        loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())  # the host sync base_train also does each step

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    step_s = sum(times) / len(times)
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    out = dict(
        impl="torch.compile" if a.compile else "eager", torch=torch.__version__, device=a.device,
        depth=a.depth, n_embd=model.n_embd, seq_len=a.seq_len, batch=a.batch, vocab=a.vocab, dtype=a.dtype,
        threads=torch.get_num_threads(), steps=a.steps, warmup=a.warmup,
        tok_per_sec=a.batch * a.seq_len / step_s, step_ms=1000 * step_s,
        tok_per_sec_best=a.batch * a.seq_len / min(times), step_ms_all=[1000 * t for t in times],
        warmup_s=warmup_s, compile_s=max(0.0, warmup_s - a.warmup * step_s) if a.compile else 0.0,
        peak_rss_mb=peak_rss_mb,
        peak_cuda_mb=torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else None,
        loss_first=losses[0], loss_last=losses[-1], losses=losses)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
