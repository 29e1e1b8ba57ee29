#!/usr/bin/env python3
"""Print strata vs PyTorch eager tokens/s from the two JSON files of one run."""
import json
import sys

if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
    sys.exit("usage: bench/compare.py STRATA.json TORCH.json   (bench/train --json, bench/torch_train.py --json of one run)")
s = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
tt = {r["preset"]: r for r in t["results"]}
print(f"{'preset':<11} {'strata tok/s':>13} {'torch tok/s':>12} {'strata/torch':>13}")
for r in s["results"]:
    p = tt.get(r["preset"])
    if p:
        print(f"{r['preset']:<11} {r['tok_per_s']:13.0f} {p['tok_per_s']:12.0f} {r['tok_per_s']/p['tok_per_s']:12.2f}x")
