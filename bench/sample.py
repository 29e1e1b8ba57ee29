#!/usr/bin/env python3
"""bench/sample: `strata sample` with its key/value cache against the windowed
recompute it replaced (test hook STRATA_SAMPLE_WINDOW=1: every new token
re-runs the forward over the whole window), measured in the same run.

Each case generates the same greedy tokens both ways (the prompt and the new
tokens fit in --context, where the two must agree; the benchmark fails if the
texts differ) and reports tokens per second and the ratio. A model in memory
shows the compute the cache saves; one streamed from disk within budgets
reads every weight once per token either way. Rates are new tokens over
the wall time less a --tokens 0 run's (opening the model and the prompt).

usage: bench/sample.py [--quick] [--dir DIR] [--json FILE]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from benchutil import ROOT, STRATA, cpu_name, deep_tiny
from benchutil import run as run_cmd

PROMPT = "In the beginning God created the heaven and the earth."
# (name, init options, new tokens, --context, extra sample options)
CASES = [
    ("llama-60m, vocab 32000, in memory", ["--config", "llama-60m", "--vocab", "32000"], 192, 256, []),
    ("llama-60m, vocab 32000, in memory, context 1024", ["--config", "llama-60m", "--vocab", "32000"],
     448, 1024, []),
    ("tiny x 40 layers (121 MiB), within 32M + 8M budgets, weights on disk", ["--config", "TINY40"], 64,
     128, ["--device-mem", "32M", "--host-mem", "8M", "--offload-dir", "OFF"]),
]
QUICK = [("llama-60m, vocab 32000, in memory", ["--config", "llama-60m", "--vocab", "32000"], 24, 64, [])]


def run(cmd):
    return run_cmd(cmd, "bench/sample")[1]


def timed(cmd, env):
    """Wall seconds and standard output of one sample."""
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit("bench/sample: %s failed:\n%s" % (" ".join(cmd), p.stderr.decode(errors="replace")))
    return wall, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one small case (a smoke test)")
    ap.add_argument("--dir", help="work directory (default: a temp dir under bench/results)")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix=".sample-", dir=os.path.join(ROOT, "bench", "results"))
    os.makedirs(work, exist_ok=True)
    off = os.path.join(work, "off")
    os.makedirs(off, exist_ok=True)
    results = []
    for name, init, n_new, ctx, extra in (QUICK if a.quick else CASES):
        if init[1] == "TINY40":
            model = deep_tiny(work, 40, "bench/sample")
        else:
            model = os.path.join(work, "-".join(init[1::2]))
            if not os.path.exists(model):
                run([STRATA, "init", "--out", model] + init)
        extra = [off if x == "OFF" else x for x in extra]
        cmd = [STRATA, "sample", "--model", model, "--prompt", PROMPT, "--tokens", str(n_new), "--temperature",
               "0", "--context", str(ctx)] + extra
        env = dict(os.environ)
        env.pop("STRATA_SAMPLE_WINDOW", None)
        # opening the model (reading its weights, placing them) and the
        # prompt: a run generating nothing, taken from both runs' time
        at = cmd.index("--tokens") + 1
        load_s, _ = timed(cmd[:at] + ["0"] + cmd[at + 1:], env)
        runs = {}
        for mode, window in (("kv-cache", None), ("window", "1")):
            if window:
                env["STRATA_SAMPLE_WINDOW"] = window
            wall, text = timed(cmd, env)
            runs[mode] = {"wall_s": wall, "tokens_per_s": n_new / max(wall - load_s, 1e-9), "text": text.decode(errors="replace")}
        c, w = runs["kv-cache"], runs["window"]
        # every token reads every weight once but the embedding's other rows
        # (fp32 files: their size, less the embedding where it is not the head)
        wbytes = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model) if f.endswith(".safetensors"))
        with open(os.path.join(model, "config.json")) as f:
            conf = json.load(f)
        if not conf.get("tie_word_embeddings", False):
            wbytes -= 4 * conf["vocab_size"] * conf["hidden_size"]
        same = c["text"] == w["text"]
        res = {"case": name, "new_tokens": n_new, "context": ctx, "load_s": load_s,
               "kv_cache_tokens_per_s": c["tokens_per_s"], "window_tokens_per_s": w["tokens_per_s"],
               "kv_cache_over_window_speed": c["tokens_per_s"] / w["tokens_per_s"], "same_text": same,
               "wall_s": {"kv-cache": c["wall_s"], "window": w["wall_s"]},
               "weight_bytes": wbytes, "kv_cache_weight_read_gbs": c["tokens_per_s"] * wbytes / 1e9}
        results.append(res)
        print("%s: %d new tokens, --context %d (opening the model: %.2f s, not counted)" % (name, n_new, ctx, load_s))
        print("  key/value cache %7.2f tokens/s   windowed recompute %7.2f tokens/s   %.2fx%s" %
              (c["tokens_per_s"], w["tokens_per_s"], res["kv_cache_over_window_speed"],
               "" if same else "  TEXT DIFFERS"), flush=True)
        print("  the key/value cache reads the weights a token needs (%.0f MB) at %.1f GB/s" %
              (wbytes / 1e6, res["kv_cache_weight_read_gbs"]), flush=True)
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:  # whole or not at all
        with open(a.json + ".tmp", "w") as f:
            json.dump({"bench": "sample", "cpu": cpu_name(),
                       "note": "tokens/s = new tokens / (wall - load_s); load_s is a --tokens 0 run",
                       "cases": results}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    if not all(r["same_text"] for r in results):
        raise SystemExit("bench/sample: the key/value cache and the windowed recompute gave different text")


if __name__ == "__main__":
    main()
