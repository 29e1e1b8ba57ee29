#!/usr/bin/env python3
"""bench/encode: encoding the KJV text (4.1 MB) with a Hugging Face
byte-level BPE tokenizer, strata against the tokenizers library, same run.

strata: the whole `strata prepare --tokenizer FILE` (read, encode, write the
shards), wall time. The library: one `Tokenizer.encode` call over the same
text, without special tokens (strata adds only the file's <eos>). Each the
best of --reps runs; the token counts are printed so the two can be seen
to encode the same text (they differ by the <eos>).

usage: bench/encode.py [--tokenizer FILE] [--reps 3] [--json FILE]
       (the peer needs `pip install tokenizers`; without it strata alone runs)
"""
import argparse
import json
import os
import struct
import tempfile
import time

from benchutil import ROOT, STRATA, cpu_name
from benchutil import run as run_cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "tests", "data", "tokenizers", "llama3",
                                                        "tokenizer.json"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    with tempfile.TemporaryDirectory(prefix="strata-bench-encode-") as work:
        text = os.path.join(work, "kjv.txt")
        run_cmd([os.path.join(ROOT, "scripts", "get-corpus"), text], "bench/encode")
        size = os.path.getsize(text)
        best, tokens = 1e300, 0
        for i in range(a.reps):
            out = os.path.join(work, "d%d" % i)
            t = time.perf_counter()
            run_cmd([STRATA, "prepare", "--input", text, "--tokenizer", a.tokenizer, "--out", out,
                     "--val-fraction", "0"], "bench/encode")
            best = min(best, time.perf_counter() - t)
            with open(os.path.join(out, "train.bin"), "rb") as f:
                tokens = struct.unpack_from("<Q", f.read(64), 24)[0]  # the header's n_tokens
        res = {"bench": "encode", "cpu": cpu_name(), "bytes": size, "tokenizer": a.tokenizer,
               "strata_prepare_s": round(best, 4), "strata_tokens": tokens}
        print("strata prepare: %.3f s for %d bytes (%.1f MB/s)" % (best, size, size / best / 1e6))
        try:
            from tokenizers import Tokenizer
        except ImportError:
            Tokenizer = None
            print("tokenizers not installed: no peer (pip install tokenizers)")
        if Tokenizer:
            tk = Tokenizer.from_file(a.tokenizer)
            with open(text, encoding="utf-8") as f:
                s = f.read()
            lib, n = 1e300, 0
            for _ in range(a.reps):
                t = time.perf_counter()
                n = len(tk.encode(s, add_special_tokens=False).ids)
                lib = min(lib, time.perf_counter() - t)
            res.update(tokenizers_encode_s=round(lib, 4), tokenizers_tokens=n,
                       library_over_strata=round(lib / best, 2))
            print("tokenizers encode: %.3f s, %d tokens (strata: %d with the <eos>); strata is "
                  "%.1fx faster (its time includes reading and writing the shards)" % (lib, n, tokens, lib / best))
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(res, f, indent=1)
            os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
