#!/usr/bin/env python3
"""Print strata's optimizer steps against the peers of the same run: the
JSON of bench/optim and of bench/optim_peers.py (the CPU), or of
bench/optim_cuda and of bench/optim_peers.py --device cuda (the GPU)."""
import sys

from benchutil import load_json

if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
    sys.exit("usage: bench/compare_optim.py OPTIM.json PEERS.json   (bench/optim --json and bench/optim_peers.py "
             "--json of one run, or bench/optim_cuda --json and bench/optim_peers.py --device cuda --json)")

s, peers_file = load_json(sys.argv[1], "compare_optim.py"), load_json(sys.argv[2], "compare_optim.py")
p = peers_file.get("peers", {})
# both on the CPU (bench/optim, whose JSON names no device) or both on the GPU
# (bench/optim_cuda names its GPU; optim_peers.py --device cuda says "cuda")
if "device" in s and not s["device"]:  # bench/optim_cuda without a GPU (or built without nvcc)
    sys.exit(f"compare_optim.py: {sys.argv[1]}: bench/optim_cuda measured nothing (no CUDA device)")
ours = "cuda" if "device" in s else "cpu"
theirs = peers_file.get("device", "cpu")
if ours != theirs:
    sys.exit(f"compare_optim.py: {sys.argv[2]} measured on {theirs}, {sys.argv[1]} on "
             f"{'the GPU (bench/optim_cuda)' if ours == 'cuda' else 'the CPU (bench/optim)'}: "
             "compare runs of one device")
# the same tensors and threads, or the ratio compares two jobs
for key in ("params", "threads"):
    if key in s and key in peers_file and s[key] != peers_file[key]:
        sys.exit(f"compare_optim.py: {sys.argv[1]} has {key} {s[key]}, {sys.argv[2]} {peers_file[key]}: "
                 "run both on the same tensors and threads")
# bitsandbytes quantizes in blocks of 256 (optim_peers.py records it)
if "bnb_adamw8bit" in p and s.get("block", 256) != peers_file.get("block", 256):
    sys.exit(f"compare_optim.py: {sys.argv[1]} has block {s['block']}, bitsandbytes "
             f"{peers_file.get('block', 256)}: run bench/optim with --block 256 to compare them")
fp32, q8 = s["adamw_fp32"]["params_per_s"], s["adamw_8bit"]["params_per_s"]
torch_best = max((r["params_per_s"], k) for k, r in p.items() if k.startswith("torch_")) if any(
    k.startswith("torch_") for k in p) else None
print(f"{'kernel':<24} {'params/s':>10} {'strata/peer':>12}")
if torch_best:
    print(f"{torch_best[1]:<24} {torch_best[0]:10.3e} {fp32 / torch_best[0]:11.2f}x  (strata fp32 AdamW)")
    print(f"{'':<24} {'':>10} {q8 / torch_best[0]:11.2f}x  (strata 8-bit AdamW)")
if "bnb_adamw8bit" in p:
    b = p["bnb_adamw8bit"]["params_per_s"]
    print(f"{'bnb_adamw8bit':<24} {b:10.3e} {q8 / b:11.2f}x  (strata 8-bit AdamW)")
if p:
    name, best = max(((k, r["params_per_s"]) for k, r in p.items()), key=lambda kv: kv[1])
    missing = "" if torch_best else "; PyTorch's AdamW was not measured, so this is not the issue's peer set"
    print(f"strata 8-bit AdamW / fastest peer ({name}) = {q8 / best:.2f} (target >= 2){missing}")
else:
    print("no peers measured (PyTorch and bitsandbytes missing)")
