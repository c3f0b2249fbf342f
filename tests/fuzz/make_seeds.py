"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/<target>/): a few small
valid inputs per parser, written by the reference writers (pyarrow, torch, safetensors,
tiktoken's format), and the hand-made hostile inputs that crashed or asked for GBs before
the parsers bounded them (regress-*: the tests in test_parquet/test_checkpoint/
test_tokenizer load these same files). Run from the repository root:

    .venv/bin/python tests/fuzz/make_seeds.py
"""
import base64
import io
import json
import os
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- parquet: Thrift compact protocol, just what a footer and page headers need ----------
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def zigzag(n):
    return varint((n << 1) ^ (n >> 63))


class Struct:
    """fields added in increasing id order; bytes() ends it with STOP"""

    def __init__(self):
        self.out, self.last = b"", 0

    def field(self, fid, wire):
        delta = fid - self.last
        self.last = fid
        self.out += bytes([(delta << 4) | wire]) if 0 < delta <= 15 else bytes([wire]) + zigzag(fid)
        return self

    def i32(self, fid, v):
        return self.field(fid, 5)._raw(zigzag(v))

    def i64(self, fid, v):
        return self.field(fid, 6)._raw(zigzag(v))

    def binary(self, fid, b):
        return self.field(fid, 8)._raw(varint(len(b)) + b)

    def struct(self, fid, s):
        return self.field(fid, 12)._raw(s.bytes())

    def list(self, fid, wire, items):
        n = len(items)
        head = bytes([(n << 4) | wire]) if n < 15 else bytes([0xF0 | wire]) + varint(n)
        return self.field(fid, 9)._raw(head + b"".join(items))

    def _raw(self, b):
        self.out += b
        return self

    def bytes(self):
        return self.out + b"\x00"


INT32, BYTE_ARRAY = 1, 6
PLAIN, RLE, RLE_DICTIONARY = 0, 3, 8
UNCOMPRESSED, ZSTD = 0, 6


def page_header(page_type, uncompressed, compressed, num_values, encoding, dictionary=False):
    h = Struct().i32(1, page_type).i32(2, uncompressed).i32(3, compressed)
    if dictionary:
        return h.struct(7, Struct().i32(1, num_values).i32(2, encoding)).bytes()
    return h.struct(5, Struct().i32(1, num_values).i32(2, encoding).i32(3, RLE).i32(4, RLE)).bytes()


def parquet_file(name, ptype, repetition, rows, num_values, pages, codec=UNCOMPRESSED):
    """one column `name`, one row group of `rows`; pages = the column chunk's bytes"""
    root = Struct().binary(4, b"schema").i32(5, 1).bytes()
    leaf = Struct().i32(1, ptype).i32(3, repetition).binary(4, name.encode()).bytes()
    chunk_at, chunk_len = 4, len(pages)
    meta = (Struct().i32(1, ptype).list(2, 5, [zigzag(PLAIN)]).list(3, 8, [varint(len(name)) + name.encode()])
            .i32(4, codec).i64(5, num_values).i64(6, chunk_len).i64(7, chunk_len).i64(9, chunk_at))
    column = Struct().i64(2, chunk_at).struct(3, meta).bytes()
    group = Struct().list(1, 12, [column]).i64(2, chunk_len).i64(3, rows).bytes()
    footer = Struct().i32(1, 1).list(2, 12, [root, leaf]).i64(3, rows).list(4, 12, [group]).bytes()
    return b"PAR1" + pages + footer + struct.pack("<I", len(footer)) + b"PAR1"


def parquet_seeds():
    # 32 pages of 2^26 null levels each (one RLE run: header varint, value byte): ~2^31
    # levels, 2 GB of definition levels and far more as rows, from ~1 KB; each page was
    # within the old per-page cap
    run = struct.pack("<I", 6) + varint((1 << 26) << 1) + b"\x00"
    pages = b""
    total = 0
    for i in range(32):
        n = (1 << 26) - (1 if i == 31 else 0)
        pages += page_header(0, len(run), len(run), n, PLAIN) + run
        total += n
    write("parquet", "regress-rle-levels.parquet", parquet_file("x", INT32, 1, total, total, pages))

    # a 1000-byte string in the dictionary, then 2^20 indices in one RLE run of bit width 0:
    # 1 GB of strings from ~1.1 KB
    dict_page = struct.pack("<I", 1000) + b"a" * 1000
    data = b"\x00" + varint((1 << 20) << 1)  # bit width 0, one run of 2^20 copies of index 0
    pages = (page_header(2, len(dict_page), len(dict_page), 1, PLAIN, dictionary=True) + dict_page +
             page_header(0, len(data), len(data), 1 << 20, RLE_DICTIONARY) + data)
    write("parquet", "regress-dictionary-strings.parquet", parquet_file("s", BYTE_ARRAY, 0, 1 << 20, 1 << 20, pages))

    # a 13-byte zstd frame whose page header says 2^30 - 1 bytes: the buffer was allocated
    # before the codec could object
    import pyarrow as pa
    frame = pa.compress(struct.pack("<i", 7), codec="zstd", asbytes=True)
    pages = page_header(0, (1 << 30) - 1, len(frame), 1, PLAIN) + frame
    write("parquet", "regress-zstd-page-size.parquet", parquet_file("x", INT32, 0, 1, 1, pages, codec=ZSTD))

    # small files from pyarrow: flat and nested, each codec, dictionary and delta encodings, v2
    import pyarrow as pa
    import pyarrow.parquet as pq
    t = pa.table({
        "text": ["hello", None, "world", "hello", "a" * 40],
        "n": pa.array([1, 2, None, -4, 5], pa.int64()),
        "f": pa.array([0.5, None, 2.0, 1e300, -0.0], pa.float64()),
        "b": [True, False, None, True, True],
        "tags": [["x", "y"], [], None, ["z"], ["x"]],
        "msg": [{"role": "user", "content": "hi"}, None, {"role": "assistant", "content": None},
                {"role": "user", "content": "yo"}, {"role": None, "content": "c"}],
    })
    for codec in ["NONE", "SNAPPY", "GZIP", "ZSTD"]:
        for version in ["1.0", "2.0"]:
            b = io.BytesIO()
            pq.write_table(t, b, compression=codec, data_page_version=version, row_group_size=3)
            write("parquet", f"pyarrow-{codec.lower()}-v{version[0]}.parquet", b.getvalue())
    b = io.BytesIO()
    pq.write_table(t.select(["text", "n"]), b, use_dictionary=False, compression="NONE", data_page_version="2.0",
                   column_encoding={"text": "DELTA_BYTE_ARRAY", "n": "DELTA_BINARY_PACKED"})
    write("parquet", "pyarrow-delta.parquet", b.getvalue())
    b = io.BytesIO()
    pq.write_table(t.select(["text"]), b, use_dictionary=False, compression="NONE",
                   column_encoding={"text": "DELTA_LENGTH_BYTE_ARRAY"})
    write("parquet", "pyarrow-delta-length.parquet", b.getvalue())


# ---- safetensors -------------------------------------------------------------------------
def safetensors_file(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    import torch
    from safetensors.torch import save
    write("safetensors", "valid.safetensors",
          save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, 2], dtype=torch.int64),
                "h": torch.ones(2, dtype=torch.bfloat16)}, metadata={"step": "3"}))
    write("safetensors", "empty-tensor.safetensors", safetensors_file({"e": {"dtype": "F16", "shape": [0, 4], "data_offsets": [0, 0]}}))
    # a shape nested 20000 deep: the error message's dump and the conversion between JSON
    # types recursed once per level (a stack overflow)
    deep = b'{"t":{"dtype":"F32","shape":' + b"[" * 20000 + b"]" * 20000 + b',"data_offsets":[0,0]}}'
    write("safetensors", "regress-deep-header.safetensors", struct.pack("<Q", len(deep)) + deep)


# ---- .pt (torch.save zip, restricted unpickler) ------------------------------------------
def pickle_seeds():
    import torch
    b = io.BytesIO()
    torch.save({"w": torch.arange(4, dtype=torch.float32), "v": torch.arange(4, dtype=torch.float32)[1:3]}, b)
    archive = b.getvalue()
    write("torch_pickle", "state-dict.pt", archive)
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    write("torch_pickle", "state-dict.pkl", pkl)  # the harness wraps it with a data/0 of 2 floats
    b = io.BytesIO()
    torch.save({"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "params": [0], "n": None}]}, b)
    with zipfile.ZipFile(io.BytesIO(b.getvalue())) as z:
        write("torch_pickle", "optimizer.pkl", z.read(next(n for n in z.namelist() if n.endswith("data.pkl"))))

    # 50000 lists, each appended to the one below: destroying the chain recursed per level
    write("torch_pickle", "regress-deep.pkl", b"\x80\x02" + b"]" * 50000 + b"a" * 49999 + b".")
    # a list that contains itself: a reference cycle, leaked
    write("torch_pickle", "regress-cycle.pkl", b"\x80\x02]q\x00h\x00a.")
    # 60 lists, each holding the one before twice (memo gets): 2^60 nodes as a tree
    p = b"\x80\x02]q\x000"
    for i in range(1, 61):
        p += b"(h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"lq" + bytes([i]) + b"0"
    write("torch_pickle", "regress-shared-2-60.pkl", p + b"h\x3c.")
    # a storage of 2^62 + 2 floats: times 4 bytes it wraps to the 8 bytes of data/0, and a
    # 16 EB tensor was allocated
    numel = (1 << 62) + 2
    p = (b"\x80\x02}(X\x01\x00\x00\x00w" + b"ctorch._utils\n_rebuild_tensor_v2\n(" +
         b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu" +
         b"\x8a\x08" + struct.pack("<q", numel) + b"tQK\x00K\x01\x85K\x01\x85\x89NtRu.")
    write("torch_pickle", "regress-numel-wraps.pkl", p)


# ---- tokenizer files ---------------------------------------------------------------------
def tiktoken_text(ranks):
    return b"".join(base64.b64encode(r) + b" " + str(i).encode() + b"\n" for i, r in enumerate(ranks))


def tokenizer_seeds():
    ranks = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b" world"]
    specials = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
    meta = {"pattern": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
            "bos_token": "<|bos|>", "vocab_size": len(ranks) + len(specials),
            "special_tokens": {s: len(ranks) + i for i, s in enumerate(specials)}}
    write("tokenizer", "dir-valid", tiktoken_text(ranks) + b"\x00" + json.dumps(meta).encode())
    write("tokenizer", "bare-ranks.tiktoken", tiktoken_text(ranks))
    # a special token at id 2^31-1: the tokenizer made room for every id up to it (64 GB)
    bad = dict(meta, special_tokens=dict(meta["special_tokens"], **{"<|output_end|>": 2**31 - 1}))
    bad.pop("vocab_size")
    write("tokenizer", "regress-special-id.dir", tiktoken_text(ranks) + b"\x00" + json.dumps(bad).encode())


# ---- chat requests (first byte: 0 = /chat/completions, 1 = /v1/chat/completions) ----------
def chat_request_seeds():
    upstream = {"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"},
                             {"role": "user", "content": "Why is the sky blue?"}], "temperature": 0.7, "top_k": 40,
                "max_tokens": 64}
    write("chat_request", "upstream.json", b"\x00" + json.dumps(upstream).encode())
    openai = {"model": "nanochat", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}],
              "stream": True, "stream_options": {"include_usage": True}, "n": 2, "stop": ["\n\n", "END"],
              "seed": 42, "top_p": 0.9, "max_completion_tokens": 32}
    write("chat_request", "openai.json", b"\x01" + json.dumps(openai).encode())
    tool = {"messages": [{"role": "user", "content": "compute"},
                         {"role": "assistant", "content": [{"type": "python", "text": "1+1"},
                                                           {"type": "python_output", "text": "2"},
                                                           {"type": "text", "text": "It is 2."}]},
                         {"role": "user", "content": "thanks"}]}
    write("chat_request", "python-parts.json", b"\x01" + json.dumps(tool).encode())
    # the hostile body, at 2000 levels: "stop": [[[[...]]]]
    write("chat_request", "regress-deep-stop.json",
          b'\x01{"messages":[{"role":"user","content":"hi"}],"stop":' + b"[" * 2000 + b"]" * 2000 + b"}")
    write("chat_request", "invalid-utf8.json", b'\x00{"messages":[{"role":"user","content":"\xff\xfe"}]}')


if __name__ == "__main__":
    which = sys.argv[1:] or ["parquet", "safetensors", "pickle", "tokenizer", "chat_request"]
    for w in which:
        globals()[w + "_seeds"]()
