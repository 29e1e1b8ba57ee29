#!/usr/bin/env python3
"""Compare strata's dynamic quantization maps with bitsandbytes'.

strata builds each entry of the signed and unsigned dynamic maps from its exact
value, rounded once to fp32 (src/optim/quantmap.c). bitsandbytes'
`create_dynamic_map` computes them in torch's fp32 arithmetic, which rounds at
every step. This prints, per map, how many of the 256 entries differ and by how
much (relative), so the README's statement about the two can be checked.

strata's entries are computed here the way quantmap.c computes them (float64,
the same linspace formula, one rounding to fp32); tests/test_quant.c checks the
C code against the same definition.

usage: .venv/bin/python scripts/bnb_maps.py   (needs torch and bitsandbytes)
       .venv/bin/python scripts/bnb_maps.py --write tests/data/bnb_maps.json
           writes bitsandbytes' two maps (hex floats) for tests/test_quant.c,
           which holds strata's C maps to them without needing bitsandbytes
"""
import json
import sys

import numpy as np
import torch
import bitsandbytes
from bitsandbytes.functional import create_dynamic_map


def strata_map(signed):
    v = []
    for i in range(7):
        k = (1 << i) + 1 if signed else (1 << (i + 1)) + 1
        scale = 1.0
        for _ in range(i, 6):
            scale *= 10.0
        scale = 1.0 / scale
        step = (1.0 - 0.1) / (k - 1)
        b = [0.1 + j * step if j < k // 2 else 1.0 - (k - 1 - j) * step for j in range(k)]
        for j in range(k - 1):
            mean = (b[j] + b[j + 1]) / 2.0
            v.append(scale * mean)
            if signed:
                v.append(-(scale * mean))
    v += [0.0, 1.0]
    return np.array(sorted(v), dtype=np.float64).astype(np.float32)


def write(path):
    maps = {s: create_dynamic_map(signed=s).numpy().astype(np.float32) for s in (True, False)}
    out = {
        "source": f"bitsandbytes {bitsandbytes.__version__} create_dynamic_map(signed=True / False), "
                  f"torch {torch.__version__}; written by scripts/bnb_maps.py --write",
        "signed": [float(x).hex() for x in maps[True]],
        "unsigned": [float(x).hex() for x in maps[False]],
    }
    with open(path, "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write(sys.argv[2])
        return
    print(f"bitsandbytes {bitsandbytes.__version__}, torch {torch.__version__}")
    total = 0
    for signed in (True, False):
        ours = strata_map(signed)
        theirs = create_dynamic_map(signed=signed).numpy().astype(np.float32)
        assert ours.shape == theirs.shape == (256,)
        diff = ours != theirs
        rel = np.abs(ours.astype(np.float64) - theirs) / np.maximum(np.abs(ours.astype(np.float64)), 1e-300)
        total += int(diff.sum())
        print(f"{'signed' if signed else 'unsigned'} map: {int(diff.sum())} of 256 entries differ, "
              f"largest relative difference {rel.max():.3g}, same order: "
              f"{bool((np.argsort(ours, kind='stable') == np.argsort(theirs, kind='stable')).all())}")
    print(f"both maps: {total} of 512 entries differ")


if __name__ == "__main__":
    main()
