#!/usr/bin/env python3
"""bench/eval_offload: `strata eval` of a model within memory budgets, against
the same evaluation in memory, measured in the same run.

Three runs over the same windows: in memory; within budgets with most of the
weights on disk, layer-major (each unit's weights read once per group of
micro-batches, the default); and the same budgets one micro-batch at a time
(STRATA_EVAL_GROUP=1, how evaluation streamed weights before 2026-11-24).
Each gives its wall time and peak resident set (getrusage of the child); all
three must print the same loss, or the benchmark fails (after writing its
figures). The ratios are the point: what the budgets cost against memory, and
what layer-major saves against one micro-batch at a time.

usage: bench/eval_offload.py [--quick] [--dir DIR] [--json FILE]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from benchutil import ROOT, STRATA, cpu_name, deep_tiny, prepared_corpus
from benchutil import run as run_cmd

# (name, layers of the tiny preset's shape (dim 256, ffn 688), micro-batch,
#  seq-len, tokens scored, device and host budgets)
CASES = [("tiny x 40 layers (121 MiB)", 40, 2, 64, 8192, "32M", "8M")]
QUICK = [("tiny x 40 layers (121 MiB)", 40, 2, 64, 1024, "32M", "8M")]


def run(cmd):
    return run_cmd(cmd, "bench/eval_offload")[1]


def measured(cmd, env):
    """Wall seconds, peak RSS in MiB and output of one eval."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    p.stdout.close()
    if status != 0:
        raise SystemExit("bench/eval_offload: %s failed:\n%s" % (" ".join(cmd), out))
    return wall, ru.ru_maxrss / 1024.0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer tokens (a smoke test)")
    ap.add_argument("--dir", help="work directory on the disk to offload to (default: a temp dir under bench/results)")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix=".evaloff-", dir=os.path.join(ROOT, "bench", "results"))
    os.makedirs(work, exist_ok=True)
    data = prepared_corpus(work, "bench/eval_offload")
    results = []
    for name, layers, b, t, tokens, dev, host in (QUICK if a.quick else CASES):
        model = deep_tiny(work, layers, "bench/eval_offload")
        off = os.path.join(work, "off")
        os.makedirs(off, exist_ok=True)
        common = [STRATA, "eval", "--model", model, "--data", data, "--micro-batch", str(b),
                  "--seq-len", str(t), "--max-tokens", str(tokens), "--json"]
        budgets = ["--device-mem", dev, "--host-mem", host, "--offload-dir", off]
        runs = {}
        for mode, extra, group in (("memory", [], None), ("layer-major", budgets, None),
                                   ("per-micro-batch", budgets, "1")):
            env = dict(os.environ)
            env.pop("STRATA_EVAL_GROUP", None)
            if group:
                env["STRATA_EVAL_GROUP"] = group
            wall, rss, out = measured(common + extra, env)
            loss = json.loads(out.strip().splitlines()[-1])["loss"]
            placed = re.search(r"weights: (.*)", out)
            runs[mode] = {"wall_s": wall, "peak_rss_mib": rss, "loss": loss,
                          "placement": placed.group(1) if placed else "all in memory"}
        m, g, p = runs["memory"], runs["layer-major"], runs["per-micro-batch"]
        res = {"case": name, "micro_batch": b, "seq_len": t, "tokens": tokens,
               "device_mem": dev, "host_mem": host, "runs": runs,
               "budgeted_over_memory_time": g["wall_s"] / m["wall_s"],
               "per_micro_batch_over_layer_major_time": p["wall_s"] / g["wall_s"],
               "rss_budgeted_over_memory": g["peak_rss_mib"] / m["peak_rss_mib"],
               "same_loss": m["loss"] == g["loss"] == p["loss"]}
        results.append(res)
        print("%s, %d tokens in %d x %d micro-batches; budgets %s + %s (%s)" %
              (name, tokens, b, t, dev, host, g["placement"]))
        for mode in ("memory", "layer-major", "per-micro-batch"):
            r = runs[mode]
            print("  %-16s %7.2f s  peak RSS %6.1f MiB  loss %s" % (mode, r["wall_s"], r["peak_rss_mib"], r["loss"]))
        print("  within budgets / in memory: %.2fx the time, %.2fx the peak RSS; one micro-batch at a time "
              "takes %.2fx layer-major's time%s" %
              (res["budgeted_over_memory_time"], res["rss_budgeted_over_memory"],
               res["per_micro_batch_over_layer_major_time"], "" if res["same_loss"] else "  LOSS DIFFERS"),
              flush=True)
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:  # whole or not at all
        with open(a.json + ".tmp", "w") as f:
            json.dump({"bench": "eval_offload", "cpu": cpu_name(), "cases": results}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    if not all(r["same_loss"] for r in results):
        raise SystemExit("bench/eval_offload: the three evaluations printed different losses")


if __name__ == "__main__":
    main()
