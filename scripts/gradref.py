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

Usage: python3 scripts/gradref.py --out tests/data/gradref   (needs torch)
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
    args = ap.parse_args()
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
