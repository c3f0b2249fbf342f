"""Writes a synthetic pretraining shard the way nanochat's dataset ships them (upstream's dataset.py):
one `text` string column, row_group_size=1024, no dictionary, zstd level 3, no statistics.
The text is multilingual-ish: Zipf-distributed pseudo-words in Latin, Cyrillic, Greek and
CJK scripts with punctuation, numbers and newlines, so it compresses about like real web text.

usage: make_text_shard.py OUT.parquet [TARGET_MB]   (TARGET_MB: compressed size, default 100)
"""
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq

out = sys.argv[1]
target = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
rng = random.Random(1234)
scripts = ["abcdefghijklmnopqrstuvwxyzéèàüößç", "абвгдежзийклмнопрстуфхцчшщыэюя", "αβγδεζηθικλμνξοπρστυφχψω",
           "的一是不了人我在有他这中大来上个国到说们为子和你地出会也时要就可以对生", "あいうえおかきくけこさしすせそたちつてとなにぬねの"]
weights = [70, 12, 5, 8, 5]


def make_word(script):
    n = rng.randint(1, 4) if len(script) > 40 else rng.randint(2, 9)
    return "".join(rng.choice(script) for _ in range(n))


vocab = []
for _ in range(60000):
    vocab.append(make_word(rng.choices(scripts, weights)[0]))
zipf = [1.0 / (i + 1) ** 1.05 for i in range(len(vocab))]
punct = [" ", " ", " ", " ", " ", " ", ", ", ". ", ".\n", "\n\n", "; ", " (", ") ", ": ", " - "]

docs, chars, approx_ratio = [], 0, 2.15  # chars per compressed byte with zstd-3 on such text
while chars < target * 1e6 * approx_ratio or len(docs) % 1024:
    words = rng.choices(vocab, zipf, k=rng.randint(60, 1500))
    seps = rng.choices(punct, k=len(words))
    doc = "".join(w + s for w, s in zip(words, seps))
    if rng.random() < 0.2:
        doc += " " + str(rng.randint(0, 10**9))
    docs.append(doc)
    chars += len(doc)
tmp = out + ".tmp"
pq.write_table(pa.Table.from_pydict({"text": docs}), tmp, row_group_size=1024, use_dictionary=False,
               compression="zstd", compression_level=3, write_statistics=False)
os.replace(tmp, out)
print(f"{out}: {len(docs)} docs, {chars / 1e6:.0f}M chars, {os.path.getsize(out) / 1e6:.1f} MB")
