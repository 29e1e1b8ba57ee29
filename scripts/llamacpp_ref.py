#!/usr/bin/env python3
"""Reference losses from llama.cpp itself for strata's GGUF import.

For each GGUF file in tests/data/gguf, llama.cpp (llama-cpp-python) computes
the logits of a fixed token sequence; the script writes the sequence as a
strata token shard (tests/data/gguf/seq.bin) and the mean cross-entropy of
predicting each next token (tests/data/gguf/llamacpp.json). The test imports
the same file with `strata import` and runs `strata eval` on the shard: the
losses must agree, which checks the whole path (dequantization, the q/k
un-permutation, RoPE theta, GQA, norms) against an independent engine.

usage: scripts/llamacpp_ref.py        (pip install llama-cpp-python numpy)
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gguf")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_shard import write_shard  # noqa: E402

T = 48


def main():
    texts = json.load(open(os.path.join(D, "tokens.json")))
    seq = []
    for t in texts:
        seq += t["ids"]
    rng = np.random.default_rng(3)
    while len(seq) < T + 1:  # pad with seeded ids within the vocabulary
        seq.append(int(rng.integers(0, 320)))
    seq = seq[:T + 1]
    write_shard(os.path.join(D, "seq.bin"), seq, 320)
    out = {"tokens": seq, "seq_len": T, "losses": {}}
    for q in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"):
        # fp32 KV cache (type 0): its default f16 cache would round keys and values
        llm = Llama(model_path=os.path.join(D, "model-%s.gguf" % q), n_ctx=64, logits_all=True,
                    n_threads=2, verbose=False, type_k=0, type_v=0, flash_attn=False)
        llm.eval(seq[:T])
        logits = np.array(llm.scores[:T], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
        loss = float(np.mean(lse - logits[np.arange(T), seq[1:T + 1]]))
        out["losses"][q] = loss
        print("%s: llama.cpp loss %.6f" % (q, loss))
    import llama_cpp
    out["llama_cpp_python"] = llama_cpp.__version__
    with open(os.path.join(D, "llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
