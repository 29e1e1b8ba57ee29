#!/usr/bin/env python3
"""Reference for strata's Hugging Face output: transformers loads what strata
wrote and computes the loss strata must match.

Takes model directories written by strata (`strata init`, single-file and
sharded), loads each with transformers' LlamaForCausalLM (float32, eager
attention), computes the logits of a fixed token window and its mean
next-token loss, and writes tests/data/hfref/ref.json plus the window as a
strata shard (seq.bin). The test runs `strata eval` on the same directories
and window: the losses must agree to float32 rounding.

usage: scripts/hf_ref.py OUTDIR MODEL_DIR...     (pip install torch transformers)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_shard import write_shard  # noqa: E402

T = 48


def main():
    out, dirs = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    ref = {"transformers": transformers.__version__, "torch": torch.__version__, "seq_len": T,
           "models": {}}
    seq = None
    for d in dirs:
        cfg = json.load(open(os.path.join(d, "config.json")))
        if seq is None:
            seq = [int(x) for x in np.random.default_rng(11).integers(0, cfg["vocab_size"], T + 1)]
            write_shard(os.path.join(out, "seq.bin"), seq, cfg["vocab_size"])
        model = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([seq[:T]])).logits[0].double()
        lse = torch.logsumexp(logits, dim=-1)
        loss = float((lse - logits[torch.arange(T), torch.tensor(seq[1:T + 1])]).mean())
        name = os.path.basename(os.path.normpath(d))
        ref["models"][name] = {"loss": loss, "logits_row0": [float(x) for x in logits[0, :8]]}
        print("%s: transformers loss %.7f" % (name, loss))
    ref["tokens"] = seq
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)


if __name__ == "__main__":
    main()
