"""Baselines for bench/tokenizer: upstream's tools on the same text in the same run.

Builds the corpus (Python sources and docs found on this machine, plus generated
multilingual text) as JSON lines, trains rustbpe on it, and times tiktoken's encode with the
resulting ranks. Usage: baseline.py OUT_DIR MEGABYTES VOCAB_SIZE ENCODE_MEGABYTES
"""
import base64, glob, json, os, random, sys, time

import rustbpe
import tiktoken

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
from tokenizer_reference import PATTERNS, make_corpus  # noqa: E402


def corpus(megabytes):
    docs, size = [], 0
    multilingual = make_corpus(20000, 7)
    roots = [os.path.dirname(os.__file__), os.path.dirname(tiktoken.__file__) + "/..", "/usr/share/doc"]
    files = sorted(f for r in roots for f in glob.glob(r + "/**/*", recursive=True)
                   if f.endswith((".py", ".txt", ".md", ".rst", "copyright")) and os.path.isfile(f))
    random.Random(0).shuffle(files)
    for i, f in enumerate(files):
        try:
            text = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        docs.append(text)
        docs.append(multilingual[i % len(multilingual)])
        size += len(text.encode()) + len(docs[-1].encode())
        if size >= megabytes * 1e6:
            break
    return docs


def main():
    out, mb, vocab, encode_mb = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    docs = corpus(mb)
    with open(f"{out}/corpus.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    t0 = time.perf_counter()
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(docs), vocab, pattern=PATTERNS["nanochat"])
    train_s = time.perf_counter() - t0
    ranks = {bytes(b): r for b, r in tok.get_mergeable_ranks()}
    with open(f"{out}/ranks.tiktoken", "w") as f:
        for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(b).decode() + f" {r}\n")
    enc = tiktoken.Encoding(name="bench", pat_str=PATTERNS["nanochat"], mergeable_ranks=ranks, special_tokens={})
    sample, size = [], 0
    for d in docs:
        sample.append(d)
        size += len(d.encode())
        if size >= encode_mb * 1e6:
            break
    t0 = time.perf_counter()
    n_tokens = sum(len(enc.encode_ordinary(d)) for d in sample)
    encode_s = time.perf_counter() - t0
    batch = {}
    for threads in (1, 2, 4):
        t0 = time.perf_counter()
        enc.encode_ordinary_batch(sample, num_threads=threads)
        batch[threads] = time.perf_counter() - t0
    json.dump({"corpus_bytes": sum(len(d.encode()) for d in docs), "train_seconds": train_s,
               "encode_docs": len(sample), "encode_bytes": size, "encode_tokens": n_tokens,
               "encode_seconds": encode_s, "batch_seconds": batch}, open(f"{out}/baseline.json", "w"))


if __name__ == "__main__":
    main()
