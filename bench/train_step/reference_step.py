# defines: the Python baseline of bench_train_step (one JSON line of step timings)
"""The project's independent Python reference for a whole pretraining step: nanochat's GPT
(upstream's gpt.py) and MuonAdamW (gpt.py's setup_optimizer, optim.py) written in plain PyTorch after upstream's Python, not from
the C++ code. Attention is F.scaled_dot_product_attention (causal for L layers, an explicit
FA3-style band mask for S layers). Master weights are fp32; matmuls run in the compute dtype;
wte, value_embeds and the rotary tables are stored in it (upstream's COMPUTE_DTYPE rule).

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
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- model (gpt.py) ---------------------------------------------------------------------


def has_ve(i, n_layer):
    return i % 2 == (n_layer - 1) % 2


def window_sizes(seq_len, pattern, n_layer):
    short = -(-seq_len // 4 // 128) * 128
    pattern = pattern.upper()
    w = [seq_len if pattern[i % len(pattern)] == "L" else short for i in range(n_layer)]
    w[-1] = seq_len  # the final layer is always long
    return w


def norm(x):
    return F.rms_norm(x, (x.size(-1),))  # no weight, default eps, as upstream


class Linear(nn.Module):  # no bias; fp32 master weight cast to the activation dtype
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_out, n_in))

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype))


def rope(x, cos, sin):  # half-split, rotating by -theta (gpt.py's apply_rotary_emb)
    d = x.size(3) // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=3)


class Attention(nn.Module):
    def __init__(self, d, n_head, n_kv_head, layer, n_layer):
        super().__init__()
        self.n_head, self.n_kv_head, self.hd = n_head, n_kv_head, d // n_head
        self.c_q = Linear(d, n_head * self.hd)
        self.c_k = Linear(d, n_kv_head * self.hd)
        self.c_v = Linear(d, n_kv_head * self.hd)
        self.c_proj = Linear(d, d)
        self.ve_gate = Linear(12, n_kv_head) if has_ve(layer, n_layer) else None

    def forward(self, x, ve, cos, sin, window):
        B, T, C = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.hd)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.hd)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.hd)
        if ve is not None:  # value residual, gate in (0, 3)
            gate = 3 * torch.sigmoid(self.ve_gate(x[..., :12]))
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.n_kv_head, self.hd)
        q = norm(rope(q, cos, sin)) * 1.2
        k = norm(rope(k, cos, sin)) * 1.2
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        gqa = self.n_head != self.n_kv_head
        if window >= T:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:  # FA3 window (left, 0): query i sees keys i-left..i
            i = torch.arange(T, device=x.device)[:, None]
            j = torch.arange(T, device=x.device)[None, :]
            mask = (j <= i) & ((i - j) <= window)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Linear(d, 4 * d)
        self.c_proj = Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, d, n_head, layer, n_layer):
        super().__init__()
        self.attn = Attention(d, n_head, n_head, layer, n_layer)
        self.mlp = MLP(d)

    def forward(self, x, ve, cos, sin, window):
        x = x + self.attn(norm(x), ve, cos, sin, window)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self, depth, vocab, seq_len, pattern, dtype):
        super().__init__()
        d = math.ceil(depth * 64 / 128) * 128  # aspect ratio 64, head_dim 128
        n_head = d // 128
        self.n_layer, self.n_embd, self.vocab, self.dtype = depth, d, vocab, dtype
        Vp = -(-vocab // 64) * 64
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(Vp, d),
            h=nn.ModuleList([Block(d, n_head, i, depth) for i in range(depth)])))
        self.lm_head = Linear(d, Vp)
        self.resid_lambdas = nn.Parameter(torch.empty(depth))
        self.x0_lambdas = nn.Parameter(torch.empty(depth))
        self.smear_gate = Linear(24, 1)
        self.smear_lambda = nn.Parameter(torch.empty(1))
        self.backout_lambda = nn.Parameter(torch.empty(1))
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(Vp, d) for i in range(depth) if has_ve(i, depth)})
        self.windows = window_sizes(seq_len, pattern, depth)
        # rotary tables for 10x the context, base 100000, stored in the compute dtype
        hd = 128
        inv = 1.0 / (100000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        f = torch.outer(torch.arange(10 * seq_len, dtype=torch.float32), inv)
        self.register_buffer("cos", f.cos()[None, :, None, :].to(dtype), persistent=False)
        self.register_buffer("sin", f.sin()[None, :, None, :].to(dtype), persistent=False)

    @torch.no_grad()
    def init_weights(self):  # gpt.py's init_weights, in its order
        L, d = self.n_layer, self.n_embd
        s = 3 ** 0.5 * d ** -0.5
        nn.init.normal_(self.transformer.wte.weight, 0.0, 0.8)
        nn.init.normal_(self.lm_head.weight, 0.0, 0.001)
        for b in self.transformer.h:
            for w in (b.attn.c_q, b.attn.c_k, b.attn.c_v):
                nn.init.uniform_(w.weight, -s, s)
            nn.init.zeros_(b.attn.c_proj.weight)
            nn.init.uniform_(b.mlp.c_fc.weight, -0.4 * s, 0.4 * s)
            nn.init.zeros_(b.mlp.c_proj.weight)
        for i in range(L):
            self.resid_lambdas[i] = 1.15 - 0.10 * i / max(L - 1, 1)
            self.x0_lambdas[i] = 0.20 - 0.15 * i / max(L - 1, 1)
        self.smear_lambda.fill_(0.0)
        self.backout_lambda.fill_(0.2)
        nn.init.uniform_(self.smear_gate.weight, 0.0, 0.02)
        for k in self.value_embeds:
            nn.init.uniform_(self.value_embeds[k].weight, -s, s)
        for b in self.transformer.h:
            if b.attn.ve_gate is not None:
                nn.init.uniform_(b.attn.ve_gate.weight, 0.0, 0.02)
        if self.dtype != torch.float16:  # embedding tables live in the compute dtype
            self.transformer.wte.to(self.dtype)
            self.value_embeds.to(self.dtype)

    def forward(self, idx, targets):
        B, T = idx.shape
        cos, sin = self.cos[:, :T], self.sin[:, :T]
        x = norm(self.transformer.wte(idx).to(self.dtype))
        # smear: position t>0 mixes in the (pre-smear) embedding of t-1
        gate = self.smear_lambda.to(x.dtype) * torch.sigmoid(self.smear_gate(x[:, 1:, :24]))
        x = torch.cat([x[:, :1], x[:, 1:] + gate * x[:, :-1]], dim=1)
        x0, x_backout = x, None
        for i, block in enumerate(self.transformer.h):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0  # 0-dim fp32 keeps x's dtype
            ve = self.value_embeds[str(i)](idx).to(x.dtype) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin, self.windows[i])
            if i == self.n_layer // 2:
                x_backout = x
        x = norm(x - self.backout_lambda.to(x.dtype) * x_backout)
        logits = self.lm_head(x)[..., :self.vocab].float()
        logits = 15 * torch.tanh(logits / 15)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


# ---- optimizer (optim.py) -----------------------------------------------------------------

POLAR_EXPRESS = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
                 (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                 (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                 (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                 (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]


def adamw_step(p, grad, exp_avg, exp_avg_sq, step_t, lr_t, beta1_t, beta2_t, eps_t, wd_t):
    # fp32 math whatever the storage dtype (wte, value_embeds and their moments may be bf16)
    p32, m32, v32, g32 = p.float(), exp_avg.float(), exp_avg_sq.float(), grad.float()
    p32.mul_(1 - lr_t * wd_t)
    m32.lerp_(g32, 1 - beta1_t)
    v32.lerp_(g32.square(), 1 - beta2_t)
    bias1 = 1 - beta1_t ** step_t
    bias2 = 1 - beta2_t ** step_t
    p32.sub_((lr_t / bias1) * m32 / ((v32 / bias2).sqrt() + eps_t))
    p.copy_(p32)
    exp_avg.copy_(m32)
    exp_avg_sq.copy_(v32)


def muon_step(G, P, mbuf, vbuf, momentum_t, lr_t, wd_t, beta2_t, ns_steps: int, red_dim: int, bf16: bool):
    # Nesterov momentum: buf <- lerp(buf, G, 1-mu); G <- lerp(G, buf, mu)
    mu = momentum_t.to(G.dtype)
    mbuf.lerp_(G, 1 - mu)
    G = G.lerp_(mbuf, mu)
    X = G.bfloat16() if bf16 else G
    # MuonEq: every row rescaled to the mean row norm
    rows, cols = X.size(-2), X.size(-1)
    target = X.float().norm(dim=(-2, -1), keepdim=True) / rows ** 0.5
    row_norm = X.float().norm(dim=-1, keepdim=True).clamp_min(1e-6)
    X = X * (target / row_norm).to(X.dtype)
    # Polar Express
    X = X / (X.norm(dim=(-2, -1), keepdim=True) * 1.01 + 1e-6)
    for a, b, c in POLAR_EXPRESS[:ns_steps]:
        if rows > cols:
            A = X.mT @ X
            X = a * X + X @ (b * A + c * (A @ A))
        else:
            A = X @ X.mT
            X = a * X + (b * A + c * (A @ A)) @ X
    G = X.to(P.dtype)
    # Muon+: Frobenius norm snapped to sqrt(min(rows, cols))
    G = G * (min(rows, cols) ** 0.5 / G.float().norm(dim=(-2, -1), keepdim=True).clamp_min(1e-6)).to(G.dtype)
    # NorMuon: per-row (or per-column) second moment, total norm preserved
    v_mean = G.float().square().mean(dim=red_dim, keepdim=True)
    n = G.size(red_dim)
    v_norm = (v_mean.sum(dim=(-2, -1), keepdim=True) * n).sqrt()
    vbuf.lerp_(v_mean.to(vbuf.dtype), 1 - beta2_t.to(vbuf.dtype))
    step = vbuf.clamp_min(1e-10).rsqrt()
    v_norm_new = (v_mean * n * step.float().square()).sum(dim=(-2, -1), keepdim=True).sqrt()
    G = G * (step * (v_norm / v_norm_new.clamp_min(1e-10))).to(G.dtype)
    # cautious weight decay: decay only where the update and the weight agree in sign
    lr, wd = lr_t.to(G.dtype), wd_t.to(G.dtype)
    mask = (G * P) >= 0
    P.sub_(lr * G + lr * wd * P * mask)


class MuonAdamW:
    def __init__(self, groups, compute_dtype, compiled):
        self.groups, self.bf16 = groups, compute_dtype == torch.bfloat16
        self.adamw = torch.compile(adamw_step, dynamic=False, fullgraph=True) if compiled else adamw_step
        self.muon = torch.compile(muon_step, dynamic=False, fullgraph=True) if compiled else muon_step
        self.state = {}
        # 0-D CPU fp32 hyperparameters: new values never trigger a recompile
        self.t = {k: torch.tensor(0.0) for k in ("step", "lr", "b1", "b2", "eps", "wd", "mom")}

    @torch.no_grad()
    def step(self):
        t = self.t
        for g in self.groups:
            if g["kind"] == "adamw":
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    s = self.state.setdefault(p, {"step": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
                    s["step"] += 1
                    t["step"].fill_(s["step"]); t["lr"].fill_(g["lr"]); t["b1"].fill_(g["betas"][0])
                    t["b2"].fill_(g["betas"][1]); t["eps"].fill_(g["eps"]); t["wd"].fill_(g["weight_decay"])
                    self.adamw(p, p.grad, s["m"], s["v"], t["step"], t["lr"], t["b1"], t["b2"], t["eps"], t["wd"])
            else:  # muon: the whole same-shape group as one stack
                ps = g["params"]
                rows, cols = ps[0].shape
                s = self.state.get(ps[0])
                if s is None:
                    vshape = (len(ps), rows, 1) if rows >= cols else (len(ps), 1, cols)
                    s = self.state[ps[0]] = {"m": torch.zeros(len(ps), rows, cols, device=ps[0].device),
                                             "v": torch.zeros(vshape, device=ps[0].device)}
                G = torch.stack([p.grad for p in ps])
                P = torch.stack(ps)
                t["mom"].fill_(g["momentum"]); t["b2"].fill_(g["beta2"]); t["wd"].fill_(g["weight_decay"])
                t["lr"].fill_(g["lr"] * max(1.0, rows / cols) ** 0.5)
                self.muon(G, P, s["m"], s["v"], t["mom"], t["lr"], t["wd"], t["b2"], g["ns_steps"],
                          -1 if rows >= cols else -2, self.bf16)
                torch._foreach_copy_(ps, list(P.unbind(0)))

    def zero_grad(self):
        for g in self.groups:
            for p in g["params"]:
                p.grad = None


def param_groups(model, unembedding_lr=0.004, embedding_lr=0.2, matrix_lr=0.02, weight_decay=0.0, scalar_lr=0.5):
    dls = (model.n_embd / 768) ** -0.5  # only the embedding / unembedding groups scale with width
    adamw = lambda params, lr, betas, wd: dict(kind="adamw", params=params, lr=lr, betas=betas, eps=1e-10, weight_decay=wd)
    groups = [adamw([model.lm_head.weight], unembedding_lr * dls, (0.8, 0.96), 0.01),
              adamw([model.transformer.wte.weight], embedding_lr * dls, (0.8, 0.995), 0.001),
              adamw(list(model.value_embeds.parameters()), embedding_lr * dls * 0.5, (0.8, 0.995), 0.01),
              adamw([model.resid_lambdas], scalar_lr * 0.01, (0.8, 0.95), 0.05),
              adamw([model.x0_lambdas], scalar_lr, (0.96, 0.95), 0.0),
              adamw([model.smear_gate.weight, model.smear_lambda, model.backout_lambda], 0.2, (0.8, 0.95), 0.0)]
    matrices = list(model.transformer.h.parameters())
    for shape in sorted({p.shape for p in matrices}):
        groups.append(dict(kind="muon", params=[p for p in matrices if p.shape == shape], lr=matrix_lr,
                           momentum=0.95, ns_steps=5, beta2=0.9, weight_decay=weight_decay))
    return groups


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
        model = GPT(a.depth, a.vocab, a.seq_len, a.window_pattern, dtype)
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
