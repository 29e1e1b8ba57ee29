#!/usr/bin/env python3
"""PyTorch eager peer for bench/train: the same LLaMA presets, batch and
AdamW step (fp32, CPU, same thread count), timed the same way (best of a few
steps after a warm-up step); with --bf16 (where PyTorch's oneDNN takes bf16:
torch.ops.mkldnn._is_mkldnn_bf16_supported(), true on AVX-512 CPUs, bf16
units or not), the same step under torch.autocast("cpu", bfloat16) beside
it, the peer of strata's --matmul-precision bf16. Writes JSON for
bench/compare.py."""
import argparse
import json
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("bench/torch_train.py needs PyTorch: pip install torch (the CPU wheel will do)")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
from torch_llama import forward, param_shapes  # noqa: E402
from benchutil import cpu_name  # noqa: E402  (bench/ is this script's directory)

PRESETS = {  # the GaLore paper's sizes (vocabulary set by --vocab)
    "llama-60m": dict(dim=512, layers=8, heads=8, kv=8, ffn=1376),
    "llama-130m": dict(dim=768, layers=12, heads=12, kv=12, ffn=2048),
}


def bench(name, B, T, steps, vocab, bf16):
    c = dict(PRESETS[name], vocab=vocab, tied=False, theta=10000.0, eps=1e-6)
    g = torch.Generator().manual_seed(1)
    params = {}
    for k, shape in param_shapes(c).items():
        w = torch.ones(shape) if len(shape) == 1 else 0.02 * torch.randn(shape, generator=g)
        params[k] = w.requires_grad_(True)
    decay = [v for k, v in params.items() if v.ndim == 2 and "embed" not in k]
    other = [v for k, v in params.items() if not (v.ndim == 2 and "embed" not in k)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    # PyTorch's fastest CPU AdamW (bench/optim_peers.py measures all three):
    # without a flag it runs the per-tensor for-loop on the CPU, 0.5-0.7 s
    # slower per step here
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        impl = "fused"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
        impl = "foreach"
    tokens = torch.randint(0, c["vocab"], (B, T), generator=g)
    targets = torch.randint(0, c["vocab"], (B, T), generator=g)
    best = float("inf")
    for it in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        # autocast runs the matmuls (and the ops it lists for bf16) on bf16
        # inputs with fp32 accumulation; the parameters and AdamW stay fp32
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = forward(params, c, tokens, targets, sdpa=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if it > 0:
            best = min(best, dt)
    n = sum(v.numel() for v in params.values())
    return {"preset": name, "matmul_precision": "bf16" if bf16 else "fp32", "params": n,
            "step_s": best, "tok_per_s": B * T / best, "adamw": impl}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="llama-60m,llama-130m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    # the threads strata's OpenMP takes: OMP_NUM_THREADS, else the CPUs this
    # process may run on (os.cpu_count() ignores affinity and the variable)
    omp = os.environ.get("OMP_NUM_THREADS", "")
    ap.add_argument("--threads", type=int,
                    default=int(omp) if omp.isdigit() and int(omp) > 0 else len(os.sched_getaffinity(0)))
    ap.add_argument("--bf16", action="store_true",
                    help="also time each preset under autocast bf16 (where PyTorch's oneDNN takes bf16)")
    ap.add_argument("--json")
    a = ap.parse_args()
    names = a.presets.split(",")
    bad = [p for p in names if p not in PRESETS]
    if bad or min(a.batch, a.seq, a.steps, a.vocab, a.threads) < 1:
        ap.error("unknown preset %s (have %s)" % (",".join(bad), ",".join(PRESETS)) if bad
                 else "--batch, --seq, --steps, --vocab and --threads must be >= 1")
    if a.json and not os.access(os.path.dirname(os.path.abspath(a.json)), os.W_OK):
        ap.error("cannot write %s" % a.json)
    torch.set_num_threads(a.threads)
    bf16 = a.bf16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if a.bf16 and not bf16:
        print("torch: PyTorch's oneDNN takes no bf16 on this CPU: fp32 alone")
    res = [bench(p, a.batch, a.seq, a.steps, a.vocab, b) for p in names for b in (False, True)[:1 + bf16]]
    for r in res:
        print(f"torch {r['preset']:<11} {r['matmul_precision']}  {r['params']/1e6:6.1f}M  step {r['step_s']:.3f} s  "
              f"{r['tok_per_s']:.0f} tok/s")
    out = {"torch": torch.__version__, "cpu": cpu_name(), "vocab": a.vocab, "threads": a.threads, "batch": a.batch, "seq": a.seq,
           "results": res}
    if a.json:  # whole or not at all
        with open(a.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
