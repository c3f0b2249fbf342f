"""The report card's charts in Debian's Chromium (Playwright), driven by tests/test_report.cpp.

usage: report_charts_test.py NANOCHAT_BIN WORKDIR   prints one JSON object last; exit 1 on a failure.
A real tiny base-train run (d2, 30 steps) and synthetic metrics.jsonl files of a second base
run, an SFT run and an RL run, plus a run from before `report reset` (must not be charted);
then `nanochat report generate`. The charts the report should carry and each series' number
of points are worked out here from the metrics.jsonl files, with this file's own table of what
each chart plots. Every chart linked from report.md is opened in Chromium: it must parse as
SVG, render with a non-zero size and no page error, and each series must hold exactly its
expected points (data-n, the polyline's SVGPointList, the markers). The same images are then
shown through <img> tags, as a markdown viewer would. If the tensorboard package is there, the
real run's event files are read back and compared with its metrics.jsonl.
"""
import json
import os
import random
import re
import subprocess
import sys

from playwright.sync_api import sync_playwright

import chromium

nanochat, work = sys.argv[1], sys.argv[2]
base = os.path.join(work, "base")
env = dict(os.environ, NANOCHAT_BASE_DIR=base, OMP_NUM_THREADS="1")


def run(*args):
    r = subprocess.run([nanochat, *args], env=env, cwd=work, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: nanochat {' '.join(args)}\n{r.stderr[-3000:]}")


def write_jsonl(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


# ---- a corpus, a tokenizer, the report reset, one real base-train run ----
rng = random.Random(7)
words = (["the cat", "a dog", "my sister", "the bird"], ["sees", "likes", "finds"], ["the river", "a house", "the moon"])
os.makedirs(os.path.join(work, "data"), exist_ok=True)
for part in range(3):
    write_jsonl(os.path.join(work, "data", f"part_{part}.jsonl"),
                [{"text": " ".join(" ".join(rng.choice(w) for w in words) + "." for _ in range(rng.randint(1, 6)))}
                 for _ in range(300)])
run("tok-train", "--data", "data", "--vocab-size", "300")
old = os.path.join(base, "base_checkpoints", "old", "metrics.jsonl")
write_jsonl(old, [{"step": s, "loss": 9.0, "lrm": 1.0} for s in range(7)])
run("report", "reset")
os.utime(old, (1e9, 1e9))  # written before this report's run started
run("base-train", "--data", "data", "--depth", "2", "--max-seq-len", "64", "--device-batch-size", "4",
    "--total-batch-size", "256", "--num-iterations", "30", "--eval-every", "10", "--eval-tokens", "1024",
    "--core-metric-every", "-1", "--sample-every", "-1")

# ---- synthetic runs: a second base run with CORE, an SFT run, an RL run ----
d3 = []
for s in range(45):
    d3.append({"step": s, "loss": 6 - s / 20, "lrm": 1.0, "dt": 0.1, "tok_per_sec": 900 + s, "mfu": 0.5,
               "data_wait": 0.01, "total_training_flops": 2e12 * (s + 1)})
    if s % 15 == 0:
        d3.append({"step": s, "core_metric": 0.01 * s, "total_training_flops": 2e12 * s, "core/hellaswag": 0.3})
d3[5]["mfu"] = None  # not a number: no point
write_jsonl(os.path.join(base, "base_checkpoints", "d3", "metrics.jsonl"), d3)
sft = []
for s in range(25):
    sft.append({"step": s, "loss": 2 - s / 50, "loss_raw": 2.0, "lrm": 1 - s / 25, "dt": 0.2, "tok_per_sec": 500,
                "mfu": 0.1, "progress": s / 25})
    if s % 8 == 0:
        sft.append({"step": s, "val_bpb": 1.5 - s / 100})
sft.append({"step": 25, "chatcore": 0.1, "chatcore_cat": 0.15, "ARC-Easy": 0.3})
write_jsonl(os.path.join(base, "chatsft_checkpoints", "d2", "metrics.jsonl"), sft)
rl = []
for s in range(70):
    if s % 20 == 0:
        rl.append({"step": s, "pass@1": 0.1 + s / 1000, "pass@2": 0.2, "pass@4": 0.3})
    rl.append({"step": s, "reward": rng.random(), "sequence_length": 100 + s, "lrm": 1 - s / 70, "dt": 1.0})
write_jsonl(os.path.join(base, "chatrl_checkpoints", "d2", "metrics.jsonl"), rl)

run("report", "generate")

# ---- what the report should chart, from the metrics files ----
# stage -> chart name -> (x key, y keys); "pass@*" stands for every key with that prefix
PLOTS = {
    "base": {"train-loss-vs-step": ("step", ["loss"]), "val-bpb-vs-step": ("step", ["val_bpb"]),
             "train-loss-vs-flops": ("total_training_flops", ["loss"]),
             "val-bpb-vs-flops": ("total_training_flops", ["val_bpb"]), "lrm": ("step", ["lrm"]),
             "tok-per-sec": ("step", ["tok_per_sec"]), "mfu": ("step", ["mfu"]), "data-wait": ("step", ["data_wait"]),
             "core": ("step", ["core_metric"])},
    "sft": {"train-loss-vs-step": ("step", ["loss"]), "val-bpb-vs-step": ("step", ["val_bpb"]),
            "lrm": ("step", ["lrm"]), "tok-per-sec": ("step", ["tok_per_sec"]), "mfu": ("step", ["mfu"]),
            "chatcore": ("step", ["chatcore", "chatcore_cat"])},
    "rl": {"reward": ("step", ["reward"]), "sequence-length": ("step", ["sequence_length"]),
           "lrm": ("step", ["lrm"]), "pass-at-k": ("step", ["pass@*"])},
}
RUNS = {"base": ["d2", "d3"], "sft": ["d2"], "rl": ["d2"]}  # "old" predates the report
ROOT = {"base": "base_checkpoints", "sft": "chatsft_checkpoints", "rl": "chatrl_checkpoints"}


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def load(path):
    lines = []
    with open(path) as f:
        for line in f:
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return lines


expected = {}  # chart file -> {series name: points}
for stage, charts in PLOTS.items():
    runs = {tag: load(os.path.join(base, ROOT[stage], tag, "metrics.jsonl")) for tag in RUNS[stage]}
    for name, (x, ys) in charts.items():
        series = {}
        for tag, lines in runs.items():
            keys = []
            for y in ys:
                if y.endswith("*"):
                    keys += sorted({k for j in lines for k in j if k.startswith(y[:-1])})
                else:
                    keys.append(y)
            for key in keys:
                n = sum(1 for j in lines if is_number(j.get(x)) and is_number(j.get(key)))
                if n == 0:
                    continue
                label = " ".join(([tag] if len(runs) > 1 else []) + ([key] if len(keys) > 1 else [])) or tag
                series[label] = n
        if series:
            expected[f"chart-{stage}-{name}.svg"] = series

report_dir = os.path.join(base, "report")
with open(os.path.join(report_dir, "report.md")) as f:
    md = f.read()
linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", md)
assert sorted(linked) == sorted(expected), f"charts linked {sorted(linked)} != expected {sorted(expected)}"
assert "old/metrics.jsonl" not in md, "a run from before the report was charted"
assert expected["chart-base-train-loss-vs-step.svg"] == {"d2": 30, "d3": 45}, expected["chart-base-train-loss-vs-step.svg"]

# ---- each chart in Chromium ----
out = {"charts": len(linked), "series": 0, "points": 0}
with sync_playwright() as p:
    browser = chromium.launch(p)
    page = browser.new_page(viewport={"width": 800, "height": 500})
    errors = chromium.collect_errors(page, console=True)
    for file in linked:
        page.goto("file://" + os.path.join(report_dir, file))
        seen = page.evaluate("""() => {
          const root = document.documentElement;
          const box = root.getBoundingClientRect();
          return {tag: root.tagName, parseerror: !!document.querySelector('parsererror'),
                  width: box.width, height: box.height,
                  series: [...document.querySelectorAll('g.series')].map(g => {
                    const line = g.querySelector('polyline.line'), b = g.getBBox();
                    return {name: g.dataset.name, n: Number(g.dataset.n),
                            polyline: line ? line.points.numberOfItems : -1,
                            markers: g.querySelectorAll('circle.mk').length, w: b.width, h: b.height};
                  })};
        }""")
        assert seen["tag"] == "svg" and not seen["parseerror"], f"{file}: not a valid SVG document: {seen['tag']}"
        assert seen["width"] > 0 and seen["height"] > 0, f"{file}: renders with size {seen['width']}x{seen['height']}"
        got = {s["name"]: s["n"] for s in seen["series"]}
        assert got == expected[file], f"{file}: series {got} != expected {expected[file]}"
        for s in seen["series"]:
            assert s["polyline"] == s["n"], f"{file} {s['name']}: polyline of {s['polyline']} points, not {s['n']}"
            assert s["markers"] == (s["n"] if s["n"] <= 60 else 0), f"{file} {s['name']}: {s['markers']} markers"
            assert s["w"] > 0 or s["h"] > 0, f"{file} {s['name']}: nothing drawn"
            out["series"] += 1
            out["points"] += s["n"]
    # as a markdown viewer shows them: <img> tags that load
    html = os.path.join(report_dir, "charts_check.html")
    with open(html, "w") as f:
        f.write("".join(f'<img src="{file}">' for file in linked))
    page.goto("file://" + html)
    page.wait_for_load_state("load")
    loaded = page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth > 0)")
    assert loaded == [True] * len(linked), f"images not loaded: {loaded}"
    os.remove(html)
    assert not errors, f"page errors: {errors}"
    browser.close()

# ---- the real run's TensorBoard events carry its metrics.jsonl ----
try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    event_accumulator = None
if event_accumulator is not None:
    import struct

    run_dir = os.path.join(base, "base_checkpoints", "d2")
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    plotted = {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    want = {}
    for j in load(os.path.join(run_dir, "metrics.jsonl")):
        for k, v in j.items():
            if k != "step" and is_number(v):
                want.setdefault(k, []).append((j["step"], struct.unpack("f", struct.pack("f", v))[0]))
    assert plotted == want, f"TensorBoard scalars differ from metrics.jsonl: {sorted(plotted)} vs {sorted(want)}"
    out["tensorboard_scalars"] = sum(len(v) for v in want.values())
print(json.dumps(out))
