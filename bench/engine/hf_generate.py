"""transformers' generate() on an exported nanochat model (export --format hf), for bench_cpu_dtypes.
usage: hf_generate.py MODEL_DIR bfloat16|float32 BATCHES PROMPT DECODE THREADS
Prints one JSON line: rss and, per batch, prefill tok/s (generate of one token: the prompt's forward
and one step) and decode tok/s ((N-1) x rows over generate(N) minus generate(1)), greedy; and the
decode's tokens per CPU-second of the process (every thread), as the bench gives ours."""
import json
import resource
import sys
import time

import torch
import transformers

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
model_dir, dtype, batches, prompt, decode, threads = sys.argv[1:7]
torch.set_num_threads(int(threads))
prompt, decode = int(prompt), int(decode)
model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
with open("/proc/self/statm") as f:
    rss_loaded = int(f.read().split()[1]) * 4096 / 2**30
ids = torch.tensor([[(i * 7919) % 256 for i in range(prompt)]])


def timed(rows, n):
    x = ids.repeat(rows, 1)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       pad_token_id=0)
    return time.perf_counter() - t0, time.process_time() - c0


runs = []
timed(1, 2)  # warm-up
for rows in [int(b) for b in batches.split(",")]:
    one, one_cpu = min(timed(rows, 1), timed(rows, 1))
    full, full_cpu = timed(rows, decode)
    runs.append({"rows": rows, "prefill_tok_s": rows * prompt / one,
                 "decode_tok_s": rows * (decode - 1) / max(full - one, 1e-9),
                 "decode_tok_per_cpu_s": rows * (decode - 1) / max(full_cpu - one_cpu, 1e-9)})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"dtype": dtype, "rss_loaded_gib": rss_loaded, "runs": runs, "rss_peak_gib": peak}))
