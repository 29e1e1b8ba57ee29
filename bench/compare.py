#!/usr/bin/env python3
"""Print strata vs PyTorch eager tokens/s from the two JSON files of one run."""
import sys

from benchutil import load_json

if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
    sys.exit("usage: bench/compare.py STRATA.json TORCH.json   (bench/train --json, bench/torch_train.py --json of one run)")

s, t = load_json(sys.argv[1], "compare.py"), load_json(sys.argv[2], "compare.py")
# the same job on both sides, or the ratio compares two jobs
for key in ("threads", "batch", "seq", "vocab"):
    if key in s and key in t and s[key] != t[key]:
        sys.exit(f"compare.py: {sys.argv[1]} has {key} {s[key]}, {sys.argv[2]} {t[key]}: "
                 "run both with the same settings")
# rows by preset and matmul precision (files from before bf16 rows are fp32)
def key(r):
    return r["preset"], r.get("matmul_precision", "fp32")


tt = {key(r): r for r in t["results"]}
print(f"{'preset':<16} {'strata tok/s':>13} {'torch tok/s':>12} {'strata/torch':>13}")
matched = 0
for r in s["results"]:
    p = tt.get(key(r))
    if p:
        matched += 1
        name = r["preset"] + ("" if key(r)[1] == "fp32" else " " + key(r)[1])
        print(f"{name:<16} {r['tok_per_s']:13.0f} {p['tok_per_s']:12.0f} {r['tok_per_s']/p['tok_per_s']:12.2f}x")
if not matched:
    sys.exit("compare.py: no preset was measured in both files")
