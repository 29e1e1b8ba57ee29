#!/usr/bin/env python3
"""bench/offload: step time of offloaded training against in-memory training
of the same model and batch, measured in the same run, and the share of the
step each queue (compute, copy, disk, optimizer) was busy.

For each case it runs `strata train` twice from the same initialization:
in memory (every slab resident), and fully offloaded (weights, gradients and
optimizer state all homed on disk, streamed through staging buffers). The
step time is the median of the timed steps after the first (warm-up). The
offloaded run's queue report (metrics.jsonl {"queues": ...}) gives the busy
shares and the queue that bounds the step. Both runs must end with the same
loss (bit-identical training is a test; here it is a sanity check).

With --optimizer galore-adamw / galore-adamw8bit the runs use GaLore's
per-layer updates (the default), whose gradients stay on the device: the
offloaded run homes the weights and optimizer state on disk.

usage: bench/offload.py [--quick] [--only PRESET] [--optimizer NAME] [--dir DIR] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

from benchutil import ROOT, STRATA, cpu_name, prepared_corpus
from benchutil import run as run_cmd

# (name, init config, micro-batch, seq-len, steps)
CASES = [
    ("llama-130m, 2 x 256 tokens", "llama-130m", 2, 256, 5),
    ("llama-130m, 8 x 256 tokens", "llama-130m", 8, 256, 4),
    ("llama-350m, 4 x 256 tokens", "llama-350m", 4, 256, 3),
]
QUICK = [("llama-60m, 4 x 128 tokens", "llama-60m", 4, 128, 4)]


def run(cmd):
    return run_cmd(cmd, "bench/offload")[1]


def metrics(run_dir):
    steps, queues = [], None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "step_s" in r:
                steps.append(r)
            if "queues" in r:
                queues = r["queues"]
    return steps, queues


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one small case (a smoke test)")
    ap.add_argument("--dir", help="work directory on the disk to offload to (default: a temp dir under bench/results)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="pairs of runs, the order reversed each round: a burst of this shared machine's "
                         "noise on one run of a single pair decided the ratio [2]")
    ap.add_argument("--only", metavar="PRESET", help="only the cases of this preset (e.g. llama-130m)")
    ap.add_argument("--optimizer", default="adamw",
                    help="strata's --optimizer for both runs (default adamw); a GaLore one trains "
                         "with per-layer updates, its gradients on the device")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    cases = [c for c in (QUICK if a.quick else CASES) if not a.only or c[1] == a.only]
    if not cases:
        ap.error("no case of preset %r (the cases: %s)" %
                 (a.only, ", ".join(sorted({c[1] for c in CASES + QUICK}))))
    galore = a.optimizer.startswith("galore")
    homes = "weights=disk,optimizer=disk" if galore else "weights=disk,gradients=disk,optimizer=disk"
    work = a.dir or tempfile.mkdtemp(prefix=".offload-", dir=os.path.join(ROOT, "bench", "results"))
    os.makedirs(work, exist_ok=True)
    data = prepared_corpus(work, "bench/offload")
    results = []
    for name, preset, b, t, steps in cases:
        init = os.path.join(work, "init-" + preset)
        if not os.path.exists(init):
            run([STRATA, "init", "--config", preset, "--out", init])
        common = [STRATA, "train", "--model", init, "--data", data, "--micro-batch", str(b),
                  "--seq-len", str(t), "--steps", str(steps), "--eval-interval", "0",
                  "--eval-tokens", str(t), "--progress", "none", "--ckpt-interval", "0",
                  "--optimizer", a.optimizer]
        rows, ratios = {}, []
        for rnd in range(a.rounds):
            for mode in (("memory", "offloaded") if rnd % 2 == 0 else ("offloaded", "memory")):
                out = os.path.join(work, "run-%s-%d-%s" % (preset, b, mode))
                shutil.rmtree(out, ignore_errors=True)
                # prefetch 2: the depth these figures were first measured at (the
                # planner chooses it by default now)
                extra = [] if mode == "memory" else [
                    "--place", homes, "--offload-dir", work,
                    "--prefetch", "2"]
                t0 = time.time()
                log = run(common + ["--out", out] + extra)
                wall = time.time() - t0
                st, q = metrics(out)
                timed = [r["step_s"] for r in st[1:]] or [st[0]["step_s"]]
                rows.setdefault(mode, []).append({"step_s": statistics.median(timed), "loss": st[-1]["loss"],
                                                  "queues": q, "wall_s": wall,
                                                  "plan": [l for l in log.splitlines() if " on " in l or "tier" in l]})
                shutil.rmtree(out, ignore_errors=True)
            ratios.append(rows["memory"][-1]["step_s"] / rows["offloaded"][-1]["step_s"])
        # each mode's median over the rounds; the queues of the last offloaded run
        m = {"step_s": statistics.median(r["step_s"] for r in rows["memory"]), "loss": rows["memory"][-1]["loss"]}
        o = dict(rows["offloaded"][-1], step_s=statistics.median(r["step_s"] for r in rows["offloaded"]))
        q = o["queues"]
        share = {k: q[k + "_s"] / q["wall_s"] for k in ("compute", "copy", "disk", "optimizer")}
        res = {"case": name, "preset": preset, "optimizer": a.optimizer, "micro_batch": b, "seq_len": t,
               "tokens_per_step": b * t, "memory_step_s": m["step_s"],
               "offloaded_step_s": o["step_s"], "ratio": statistics.median(ratios), "round_ratios": ratios,
               "busy_share": share, "bound": q["bound"],
               "disk_gb_per_step": (q["disk_read_bytes"] + q["disk_write_bytes"]) / q["steps"] / 1e9,
               "same_loss": all(r["loss"] == m["loss"] for r in rows["memory"] + rows["offloaded"]),
               "plan": o["plan"]}
        results.append(res)
        print("%-30s memory %6.2f s/step  offloaded %6.2f s/step  ratio %.2f  "
              "busy: compute %3.0f%% copy %3.0f%% disk %3.0f%% optimizer %3.0f%%  "
              "disk %.2f GB/step  bound by %s%s" %
              (name, m["step_s"], o["step_s"], res["ratio"], 100 * share["compute"],
               100 * share["copy"], 100 * share["disk"], 100 * share["optimizer"],
               res["disk_gb_per_step"], q["bound"], "" if res["same_loss"] else "  LOSS DIFFERS"),
              flush=True)
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:  # whole or not at all
        with open(a.json + ".tmp", "w") as f:
            json.dump({"bench": "offload", "cpu": cpu_name(), "rounds": a.rounds, "cases": results}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
