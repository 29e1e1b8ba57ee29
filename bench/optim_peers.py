#!/usr/bin/env python3
"""The peers of bench/optim: PyTorch's CPU AdamW (each implementation it has:
for-loop, foreach, fused; the fastest is the peer) and bitsandbytes' 8-bit
AdamW (block 256, its CPU backend), one step over one flat tensor of the same
size and value ranges as bench/optim's, best of --reps timed steps after one
warm-up step. Threads: torch's default (all cores), as strata's OpenMP.

With --device cuda, the same optimizers on the GPU (PyTorch's CUDA AdamW,
bitsandbytes' CUDA AdamW8bit), as peers of bench/optim_cuda: the median of
--reps steps timed with CUDA events after 3 warm-up steps, as there.

usage: optim_peers.py [--params 134217728] [--reps 5] [--device cpu|cuda] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

from benchutil import cpu_name

try:
    import torch
except ImportError:
    sys.exit("bench/optim_peers.py needs PyTorch (and bitsandbytes for its 8-bit peer): "
             "pip install torch bitsandbytes")


def timed_steps(opt, reps):
    if DEVICE == "cuda":
        for _ in range(3):  # warm-up: allocates state
            opt.step()
        times = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            opt.step()
            e1.record()
            e1.synchronize()
            times.append(1e-3 * e0.elapsed_time(e1))
        return statistics.median(times)
    opt.step()  # warm-up: allocates state
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    return best


DEVICE = "cpu"


def make_param(n):
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter((torch.rand(n, generator=g) - 0.5).to(DEVICE))
    p.grad = ((torch.rand(n, generator=g) - 0.5) * 1e-2).to(DEVICE)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=128 << 20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    # bitsandbytes keeps tensors under min_8bit_size (4096) in fp32, and has
    # no state to measure below it; bench/optim takes >= 1024
    if a.params < 4096 or a.reps < 1:
        ap.error("need --params >= 4096 and --reps >= 1")
    if a.json and not os.access(os.path.dirname(os.path.abspath(a.json)), os.W_OK):
        ap.error("cannot write %s" % a.json)
    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("optim_peers.py: --device cuda but PyTorch sees no GPU")
    n = a.params
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    res = {"params": n, "device": DEVICE, "cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
           "timing": "median" if DEVICE == "cuda" else "best", "peers": {}}
    if DEVICE == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)

    for impl in ("forloop", "foreach", "fused"):
        p = make_param(n)
        flags = {"forloop": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}[impl]
        try:
            opt = torch.optim.AdamW([p], **kw, **flags)
            t = timed_steps(opt, a.reps)
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"torch AdamW {impl}: unavailable ({str(e).splitlines()[0]})", file=sys.stderr)
            continue
        res["peers"][f"torch_adamw_{impl}"] = {"step_s": t, "params_per_s": n / t}
        del opt, p

    try:
        import bitsandbytes as bnb

        p = make_param(n)
        opt = bnb.optim.AdamW8bit([p], **kw, min_8bit_size=4096)
        t = timed_steps(opt, a.reps)
        st = opt.state[p]
        state_bytes = sum(st[k].numel() * st[k].element_size() for k in ("state1", "state2", "absmax1", "absmax2"))
        res["bitsandbytes"] = bnb.__version__
        res["block"] = 256  # bitsandbytes' block-wise 8-bit state
        res["peers"]["bnb_adamw8bit"] = {"step_s": t, "params_per_s": n / t, "state_bytes_per_param": state_bytes / n}
        del opt, p
    except ImportError:
        print("bitsandbytes not installed: skipping its 8-bit AdamW (pip install bitsandbytes)", file=sys.stderr)
    except (RuntimeError, NotImplementedError) as e:
        print(f"bitsandbytes AdamW8bit on {DEVICE} unavailable: {str(e).splitlines()[0]}", file=sys.stderr)

    for k, r in res["peers"].items():
        extra = f"  state {r['state_bytes_per_param']:.3f} B/param" if "state_bytes_per_param" in r else ""
        print(f"{k:<22} {1e3 * r['step_s']:9.1f} ms  {r['params_per_s']:10.3e} params/s{extra}")
    if a.json:  # whole or not at all
        with open(a.json + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.replace(a.json + ".tmp", a.json)


if __name__ == "__main__":
    main()
