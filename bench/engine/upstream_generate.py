"""Upstream (Python) nanochat's Engine on a checkpoint that bench_cpu_dtypes wrote, for its table.
usage: upstream_generate.py UPSTREAM_DIR CHECKPOINT_DIR float32|bfloat16 BATCHES PROMPT DECODE THREADS
UPSTREAM_DIR is a checkout of upstream nanochat (its nanochat/ package is imported from there, nothing
of it is copied here); CHECKPOINT_DIR holds our model_000000.safetensors and meta_000000.json, whose
tensor names are upstream's state-dict keys. The model is built as upstream's checkpoint_manager
builds one (on the meta device, then load_state_dict(assign=True)), so on a CPU the weights stay
fp32 and in bfloat16 (NANOCHAT_DTYPE, upstream's switch) its Linears cast them per call.
Parts of upstream's current architecture that the checkpoint lacks get the values that make them
the identity (value embeddings 0, smear lambda 0, resid lambdas 1, x0 and backout lambdas 0); upstream
hard-codes q and k times 1.2 after their norm, so the checkpoint must say qk_scale 1.2.
Timed the way bench_cpu_dtypes times ours: prefill tok/s is one forward of rows x prompt into a fresh
KVCache (best of 2); decode tok/s is Engine.generate's greedy token columns, first to last.
Prints one JSON line, as hf_generate.py does, with row 0's greedy tokens of the batch-1 run."""
import json
import os
import resource
import sys
import time

upstream_dir, ckpt_dir, dtype, batches, prompt, decode, threads = sys.argv[1:8]
os.environ["NANOCHAT_DTYPE"] = dtype  # read once, when nanochat.common is first imported
sys.path.insert(0, upstream_dir)
try:
    import torch
    from safetensors.torch import load_file
    from nanochat.gpt import GPT, GPTConfig
    from nanochat.engine import Engine, KVCache
    from nanochat.common import COMPUTE_DTYPE
except Exception as e:  # noqa: BLE001 -- the bench prints this one line and skips the row
    sys.exit(f"cannot import upstream's nanochat.gpt and nanochat.engine from {upstream_dir}: {type(e).__name__}: {e}")

torch.set_num_threads(int(threads))
prompt, decode = int(prompt), int(decode)
with open(os.path.join(ckpt_dir, "meta_000000.json")) as f:
    cfg = json.load(f)["model_config"]
if cfg.get("qk_scale", 1.2) != 1.2 or cfg.get("softcap", 15.0) != 15.0 or cfg.get("norm_eps", 0.0) != 0.0:
    sys.exit(f"{ckpt_dir}: qk_scale, softcap and norm_eps must be upstream's fixed 1.2, 15 and 0: {cfg}")
config = GPTConfig(**{k: cfg[k] for k in
                      ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "window_pattern")})

state = load_file(os.path.join(ckpt_dir, "model_000000.safetensors"))
n, d = config.n_layer, config.n_embd
kv_dim = config.n_kv_head * (d // config.n_head)
with torch.device("meta"):
    model = GPT(config)
if not cfg.get("layer_scalars", True):
    state |= {"resid_lambdas": torch.ones(n), "x0_lambdas": torch.zeros(n), "backout_lambda": torch.zeros(1)}
if not cfg.get("smear", True):
    state |= {"smear_lambda": torch.zeros(1), "smear_gate.weight": torch.zeros(1, 24)}
if not cfg.get("value_embeds", True):
    for name, p in model.named_parameters():
        if name.startswith("value_embeds."):  # one zero row seen V times: 0 adds nothing, allocates nothing
            state[name] = torch.zeros(1, kv_dim).expand(p.shape)
        elif name.endswith("attn.ve_gate.weight"):
            state[name] = torch.zeros(p.shape)
model.load_state_dict(state, strict=True, assign=True)
head_dim = d // config.n_head
model.cos, model.sin = model._precompute_rotary_embeddings(model.rotary_seq_len, head_dim,
                                                           base=cfg.get("rope_theta", 100000.0))
model.eval()
del state
with open("/proc/self/statm") as f:
    rss_loaded = int(f.read().split()[1]) * 4096 / 2**30


class BenchTokenizer:
    """What Engine asks of a tokenizer. Every special is -1, a token no model emits: like ours in the
    bench (no stops, no calculator), each row runs its DECODE tokens whatever it samples."""
    def encode_special(self, s):
        return -1

    def get_bos_token_id(self):
        return -1


engine = Engine(model, BenchTokenizer())
tokens = [(i * 7919) % 256 for i in range(prompt)]


def prefill_seconds(rows):
    best = 1e30
    for _ in range(2):
        kv = KVCache(batch_size=rows, num_heads=config.n_kv_head, seq_len=prompt + 1, head_dim=head_dim,
                     num_layers=n, device="cpu", dtype=COMPUTE_DTYPE)
        ids = torch.tensor([tokens] * rows, dtype=torch.long)
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.forward(ids, kv_cache=kv)
        best = min(best, time.perf_counter() - t0)
    return best


def generate_columns(rows, n_tokens):
    times, cpu, columns = [], [], []
    for column, _ in engine.generate(tokens, num_samples=rows, max_tokens=n_tokens, temperature=0.0):
        times.append(time.perf_counter())
        cpu.append(time.process_time())
        columns.append(column)
    return times, cpu, columns


generate_columns(1, 4)  # warm-up, as ours
runs, first_row = [], []
for rows in [int(b) for b in batches.split(",")]:
    prefill = prefill_seconds(rows)
    times, cpu, columns = generate_columns(rows, decode)
    steps = sorted(b - a for a, b in zip(times, times[1:]))
    run = {"rows": rows, "prefill_tok_s": rows * prompt / prefill,
           "decode_tok_s": rows * (len(times) - 1) / max(times[-1] - times[0], 1e-9),
           "decode_tok_s_median_step": rows / steps[len(steps) // 2] if steps else 0.0,
           "decode_tok_per_cpu_s": rows * (len(times) - 1) / max(cpu[-1] - cpu[0], 1e-9)}
    runs.append(run)
    if rows == 1:
        first_row = [c[0] for c in columns]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"dtype": dtype, "rss_loaded_gib": rss_loaded, "runs": runs, "rss_peak_gib": peak,
                  "tokens": first_row}))
