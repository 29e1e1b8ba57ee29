#!/usr/bin/env python3
"""bench/plan: step time under the planner's plan against fixed policies, for
the same model, batch and budgets, measured in the same run; and each run's
predicted step time against the measured one.

Policies (each a `strata train` run from the same initialization):
  planner        every choice left to the planner (--activations auto,
                 --device-updates auto)
  all-recompute  every layer's activations recomputed, updates on the CPU
  all-swap       every layer's activations swapped to the host (to disk when
                 the host budget cannot hold them), updates on the CPU
  cpu-optimizer  activations by the planner, every update on the CPU
The placement of weights, gradients and state follows from the budgets in
every case. The step time is the median of the steps after the first; each
policy runs twice, the second round in reverse order, and the better median
is kept (this shared machine has bursts of noise of up to 2x). The hardware
profile is measured once (strata's own measurement, by `strata plan` before
any run) into the work directory and shared by every run, so all plans see
the same machine.

Targets (the planner issue): the planner's step no slower than the best fixed
policy by more than 5%, >= 20% faster than all-recompute where memory allows
swapping; predicted within 25% of measured.

With --matmul-precision bf16 every run multiplies the linear layers in bf16
(the profile then prices them at its bf16 rate).

usage: bench/plan.py [--quick] [--case N ...] [--matmul-precision fp32|bf16] [--dir DIR]
                     [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile

from benchutil import ROOT, STRATA, cpu_name, prepared_corpus
from benchutil import run as run_cmd

# (name, preset, micro-batch, seq-len, steps, device budget, host budget)
CASES = [
    ("llama-130m, 4 x 256, device 1.2G, host 1G", "llama-130m", 4, 256, 6, "1200M", "1G"),
    ("llama-130m, 8 x 256, device 1.6G, host 2G", "llama-130m", 8, 256, 5, "1600M", "2G"),
    ("llama-130m, 4 x 256, device 1.2G, host 400M", "llama-130m", 4, 256, 6, "1200M", "400M"),
]
QUICK = [("llama-60m, 4 x 128, device 300M, host 200M", "llama-60m", 4, 128, 4, "300M", "200M")]

POLICIES = [
    ("planner", []),
    ("all-recompute", ["--activations", "recompute", "--device-updates", "0"]),
    ("all-swap", ["--activations", "host", "--device-updates", "0"]),
    ("cpu-optimizer", ["--device-updates", "0"]),
]


def run(cmd, allow_fail=False):
    return run_cmd(cmd, "bench/plan", allow_fail)


def metrics(run_dir):
    steps = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "step_s" in r:
                steps.append(r)
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one small case (a smoke test)")
    ap.add_argument("--dir", help="work directory on the disk to offload to")
    ap.add_argument("--case", type=int, action="append", help="run only these cases (0-based; repeatable)")
    ap.add_argument("--matmul-precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix=".plan-", dir=os.path.join(ROOT, "bench", "results"))
    os.makedirs(work, exist_ok=True)
    data = prepared_corpus(work, "bench/plan")
    profile = os.path.join(work, "profile.json")
    results = []
    if a.case and not all(0 <= i < len(CASES) for i in a.case):
        ap.error("--case takes 0 to %d" % (len(CASES) - 1))
    cases = QUICK if a.quick else [c for i, c in enumerate(CASES) if not a.case or i in a.case]
    for name, preset, b, t, steps, dev, host in cases:
        init = os.path.join(work, "init-" + preset)
        if not os.path.exists(init):
            run([STRATA, "init", "--config", preset, "--out", init])
        common = [STRATA, "train", "--model", init, "--data", data, "--micro-batch", str(b),
                  "--seq-len", str(t), "--steps", str(steps), "--eval-interval", "0",
                  "--eval-tokens", str(t), "--progress", "none", "--ckpt-interval", "0",
                  "--device-mem", dev, "--host-mem", host, "--offload-dir", work,
                  "--profile", profile, "--matmul-precision", a.matmul_precision]
        if not os.path.exists(profile):  # measured before any timed run
            run([STRATA, "plan"] + common[2:])
        rows = {}
        for rnd in range(2):
            for pol, flags in (POLICIES if rnd == 0 else POLICIES[::-1]):
                out = os.path.join(work, "run-%s-%d-%s" % (preset, b, pol))
                shutil.rmtree(out, ignore_errors=True)
                if pol == "all-swap" and pol in rows:
                    flags = rows[pol]["flags"]
                rc, log = run(common + ["--out", out] + flags, allow_fail=(pol == "all-swap"))
                if rc != 0 and pol == "all-swap":  # the host cannot hold them: to disk
                    flags = ["--activations", "disk", "--device-updates", "0"]
                    rc, log = run(common + ["--out", out] + flags)
                st = metrics(out)
                timed = [r["step_s"] for r in st[1:]] or [st[0]["step_s"]]
                meas = statistics.median(timed)
                shutil.rmtree(out, ignore_errors=True)
                if pol in rows and rows[pol]["step_s"] <= meas:
                    rows[pol]["rounds_s"].append(meas)
                    continue
                pred = st[-1].get("predicted_s", 0)
                plan = [l for l in log.splitlines() if l.startswith(("activations:", "optimizer:", "plan:"))]
                rounds = rows[pol]["rounds_s"] + [meas] if pol in rows else [meas]
                rows[pol] = {"flags": flags, "step_s": meas, "rounds_s": rounds, "predicted_s": pred,
                             "measured_over_predicted": meas / pred if pred else None,
                             "loss": st[-1]["loss"], "plan": plan}
        for pol, _ in POLICIES:
            meas, pred, plan = rows[pol]["step_s"], rows[pol]["predicted_s"], rows[pol]["plan"]
            print("  %-14s %6.2f s/step, predicted %6.2f (measured/predicted %.2f)  %s" %
                  (pol, meas, pred, meas / pred if pred else 0, " | ".join(plan)), flush=True)
        fixed = {k: v["step_s"] for k, v in rows.items() if k != "planner"}
        best = min(fixed, key=fixed.get)
        res = {"case": name, "preset": preset, "micro_batch": b, "seq_len": t,
               "device_mem": dev, "host_mem": host, "policies": rows,
               "planner_over_best_fixed": rows["planner"]["step_s"] / fixed[best],
               "best_fixed": best,
               "all_recompute_over_planner": rows["all-recompute"]["step_s"] / rows["planner"]["step_s"],
               "same_loss": len({round(v["loss"], 6) for v in rows.values()}) == 1}
        results.append(res)
        print("%s: planner / best fixed (%s) %.2f; all-recompute / planner %.2f%s" %
              (name, best, res["planner_over_best_fixed"], res["all_recompute_over_planner"],
               "" if res["same_loss"] else "  LOSSES DIFFER"), flush=True)
    prof = json.load(open(profile)) if os.path.exists(profile) else None
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": "plan", "cpu": cpu_name(), "matmul_precision": a.matmul_precision,
                       "profile": prof, "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
