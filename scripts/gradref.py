#!/usr/bin/env python3
"""Write reference data for strata's whole-model gradient test.

An independent LLaMA implementation in PyTorch (autograd, float64) computes the
mean cross-entropy loss and the gradient of every parameter for a few tiny
random configurations (grouped-query attention, tied and untied heads, odd
sizes, head_dim != dim/heads). Each case directory gets a Hugging Face model
directory (config.json + model.safetensors, fp32 weights) and batch.safetensors
with tokens/targets (int32; target -1 = ignored), the loss and the gradients
(float64, HF names). tests/test_model.c loads the model with strata, runs its
forward/backward, and compares.

With --bf16, for cases already written there: the same loss and gradients
with every linear layer's product taken as strata's --matmul-precision bf16
takes it, both inputs rounded to bf16 (to nearest, ties to even) and the
products summed in float64, forward and both backward products alike
(attention, norms and softmax stay float64), into bf16.safetensors beside
batch.safetensors (which is left as it is).

Usage: python3 scripts/gradref.py --out tests/data/gradref [--bf16]   (needs torch)
"""
import argparse
import json
import os
import struct

import torch

from torch_llama import forward, param_shapes

CASES = {
    # name: config, batch, seq
    "gqa_untied": dict(vocab=37, dim=24, layers=2, heads=4, kv=2, ffn=40, head_dim=None,
                       tied=False, theta=10000.0, eps=1e-6, B=2, T=7),
    "mha_tied": dict(vocab=29, dim=16, layers=2, heads=2, kv=2, ffn=24, head_dim=None,
                     tied=True, theta=500.0, eps=1e-5, B=3, T=5),
    "odd_mqa_headdim": dict(vocab=31, dim=20, layers=3, heads=5, kv=1, ffn=33, head_dim=6,
                            tied=False, theta=10000.0, eps=1e-6, B=1, T=9),
    "stable_embedding": dict(vocab=33, dim=16, layers=1, heads=2, kv=1, ffn=24, head_dim=None,
                             tied=True, theta=10000.0, eps=1e-6, B=2, T=6,
                             stable_embedding=True),
    # embedding rows of variance ~1e-6, below the LayerNorm's eps (1e-5),
    # so a wrong eps changes the loss; untied
    "stable_embedding_small_rows": dict(vocab=41, dim=24, layers=2, heads=4, kv=2, ffn=40,
                                        head_dim=None, tied=False, theta=10000.0, eps=1e-6,
                                        B=2, T=7, stable_embedding=True, embed_scale=0.003),
}


DT = {torch.float32: ("F32",), torch.float64: ("F64",), torch.int32: ("I32",)}


def bf16(x):
    """x rounded to bf16 (PyTorch's conversion: to nearest, ties to even),
    held in float64"""
    return x.float().to(torch.bfloat16).double()


class Bf16Linear(torch.autograd.Function):
    """x @ w.T with both inputs rounded to bf16, and its backward with
    dy, w and x rounded the same: dx = bf16(dy) @ bf16(w), dw = bf16(dy).T @
    bf16(x), sums in float64"""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return bf16(x) @ bf16(w).T

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        rows_dy, rows_x = dy.reshape(-1, w.shape[0]), x.reshape(-1, w.shape[1])
        return bf16(dy) @ bf16(w), bf16(rows_dy).T @ bf16(rows_x)


def write_bf16(out):
    """bf16.safetensors for each case written before (its model and batch)"""
    for name, c in CASES.items():
        d = os.path.join(out, name)
        model, batch = read_safetensors(os.path.join(d, "model.safetensors")), \
            read_safetensors(os.path.join(d, "batch.safetensors"))
        params = {k: v.double().requires_grad_(True) for k, v in model.items()}
        loss = forward(params, c, batch["tokens"].long(), batch["targets"].long(),
                       lin=Bf16Linear.apply)
        loss.backward()
        res = {"loss": loss.detach().reshape(1)}
        for k, v in params.items():
            res["grad." + k] = v.grad
        write_safetensors(os.path.join(d, "bf16.safetensors"), res)
        print(f"{name}: bf16 loss {loss.item():.6f} (float64 {batch['loss'].item():.6f}) -> {d}")


def read_safetensors(path):
    """the tensors of a file write_safetensors wrote (F32, F64, I32)"""
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[v["dtype"]])
        out[k] = t.reshape(v["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        data = t.numpy().tobytes()
        header[name] = {"dtype": DT[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/gradref")
    ap.add_argument("--bf16", action="store_true",
                    help="write bf16.safetensors (bf16 linear products) for the cases in --out")
    args = ap.parse_args()
    if args.bf16:
        write_bf16(args.out)
        return
    for ci, (name, c) in enumerate(CASES.items()):
        g = torch.Generator().manual_seed(1234 + ci)
        params = {}
        for pname, shape in param_shapes(c).items():
            if len(shape) == 1:  # norm gains near 1, so their gradients matter
                w = 1.0 + 0.2 * torch.randn(shape, generator=g, dtype=torch.float64)
            else:
                w = 0.3 * torch.randn(shape, generator=g, dtype=torch.float64)
            if pname == "model.embed_tokens.weight":
                w = w * c.get("embed_scale", 1.0)
            # round to fp32 so both sides start from identical weights
            params[pname] = w.float().double().requires_grad_(True)
        tokens = torch.randint(0, c["vocab"], (c["B"], c["T"]), generator=g)
        targets = torch.randint(0, c["vocab"], (c["B"], c["T"]), generator=g)
        targets[0, 1] = -1  # one ignored position
        loss = forward(params, c, tokens, targets)
        loss.backward()
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "vocab_size": c["vocab"], "hidden_size": c["dim"], "intermediate_size": c["ffn"],
               "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
               "num_key_value_heads": c["kv"], "max_position_embeddings": 64,
               "rms_norm_eps": c["eps"], "tie_word_embeddings": c["tied"], "hidden_act": "silu"}
        # exercise both spellings of rope_theta and an explicit head_dim
        if ci % 2:
            cfg["rope_parameters"] = {"rope_theta": c["theta"], "rope_type": "default"}
        else:
            cfg["rope_theta"] = c["theta"]
        if c["head_dim"]:
            cfg["head_dim"] = c["head_dim"]
        if c.get("stable_embedding"):
            cfg["stable_embedding"] = True
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        write_safetensors(os.path.join(d, "model.safetensors"),
                          {k: v.detach().float() for k, v in params.items()})
        batch = {"tokens": tokens.int(), "targets": targets.int(),
                 "loss": loss.detach().reshape(1)}
        for k, v in params.items():
            batch["grad." + k] = v.grad
        write_safetensors(os.path.join(d, "batch.safetensors"), batch)
        print(f"{name}: loss {loss.item():.6f}, {len(params)} tensors -> {d}")


if __name__ == "__main__":
    main()
