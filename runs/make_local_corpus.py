"""A small English corpus from texts every Debian machine with Python has, for runs without
internet (runs/runcpu.sh falls back to it when the ClimbMix shards cannot be downloaded).

Documents: the Python reference manual's topics (pydoc_data), the docstrings of the
standard library's modules, classes and functions, and the system's English manual pages
(roff markup stripped). Where that is under 20M characters (a container image without manual
pages: too little text for a 32768-token vocabulary), the docstrings of the installed packages
(site-packages: torch, numpy, ...) fill it up. Written as jsonl shards {"text": ...};
the last shard is the validation split, like the parquet shards.

usage: python3 runs/make_local_corpus.py OUT_DIR [--shards N]
"""
import ast
import glob
import gzip
import json
import os
import re
import sys
import sysconfig


def docstrings(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("test", "tests", "site-packages", "idlelib", "__pycache__"))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) >= 200:
                        yield doc


def pydoc_topics():
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return
    for key in sorted(topics):
        # one document per paragraph group of the (long) topic pages
        text = topics[key]
        for part in text.split("\n\n\n"):
            if len(part.strip()) >= 200:
                yield part.strip()


TARGET_CHARS = 20_000_000  # enough text for tok-train's default vocabulary

ROFF_ESCAPE = re.compile(r"\\f[BIRP0-9]|\\f\(..|\\\(..|\\[-&|^e%]|\\s[-+]?\d|\\\*.")


def man_pages(max_chars=40_000_000):
    total = 0
    for path in sorted(glob.glob("/usr/share/man/man[1-8]/*.gz")):
        if os.path.basename(path).startswith("gcloud"):  # thousands of near-identical CLI pages
            continue
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="strict") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        words = []
        for line in lines:
            if line.startswith((".", "'")):  # roff requests and comments
                if line.startswith((".SH", ".SS", ".PP", ".P", ".LP", ".TP", ".IP")):
                    words.append("\n")
                continue
            words.append(ROFF_ESCAPE.sub("", line).replace("\\", "\\"))
        text = re.sub(r"\n{3,}", "\n\n", " ".join(words).replace(" \n ", "\n")).strip()
        if len(text) >= 500:
            total += len(text)
            yield text
            if total >= max_chars:
                return


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    shards = int(sys.argv[sys.argv.index("--shards") + 1]) if "--shards" in sys.argv else 4
    docs = list(pydoc_topics()) + list(docstrings(sysconfig.get_paths()["stdlib"])) + list(man_pages())
    chars = sum(len(d) for d in docs)
    for doc in docstrings(sysconfig.get_paths()["purelib"]):
        if chars >= TARGET_CHARS:
            break
        docs.append(doc)
        chars += len(doc)
    if len(docs) < shards * 10:
        sys.exit(f"error: only {len(docs)} documents found; is the Python standard library installed?")
    os.makedirs(out, exist_ok=True)
    per = (len(docs) + shards - 1) // shards
    for i in range(shards):
        path = os.path.join(out, f"shard_{i:05d}.jsonl")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            for doc in docs[i::shards]:  # interleaved, so every shard mixes both sources
                f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
        os.replace(path + ".tmp", path)
    print(f"wrote {len(docs)} documents ({chars / 1e6:.1f}M characters) to {shards} shards in {out}")


if __name__ == "__main__":
    main()
