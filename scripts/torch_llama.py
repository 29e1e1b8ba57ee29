"""A plain PyTorch LLaMA (Hugging Face semantics), independent of strata.

Used as the autodiff reference for the whole-model gradient test
(scripts/gradref.py, float64) and as the PyTorch-eager peer in the training
benchmark (bench/torch_train.py, float32). Parameters are a dict keyed by
Hugging Face names with (out, in) weights.
"""
import math

import torch
import torch.nn.functional as F


def head_dim(c):
    return c.get("head_dim") or c["dim"] // c["heads"]


def param_shapes(c):
    V, C, Fd = c["vocab"], c["dim"], c["ffn"]
    hd = head_dim(c)
    qd, kd = c["heads"] * hd, c["kv"] * hd
    s = {"model.embed_tokens.weight": (V, C)}
    if c.get("stable_embedding"):
        s["model.embed_norm.weight"] = (C,)
        s["model.embed_norm.bias"] = (C,)
    for l in range(c["layers"]):
        pre = f"model.layers.{l}."
        s[pre + "input_layernorm.weight"] = (C,)
        s[pre + "self_attn.q_proj.weight"] = (qd, C)
        s[pre + "self_attn.k_proj.weight"] = (kd, C)
        s[pre + "self_attn.v_proj.weight"] = (kd, C)
        s[pre + "self_attn.o_proj.weight"] = (C, qd)
        s[pre + "post_attention_layernorm.weight"] = (C,)
        s[pre + "mlp.gate_proj.weight"] = (Fd, C)
        s[pre + "mlp.up_proj.weight"] = (Fd, C)
        s[pre + "mlp.down_proj.weight"] = (C, Fd)
    s["model.norm.weight"] = (C,)
    if not c["tied"]:
        s["lm_head.weight"] = (V, C)
    return s


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_tables(T, hd, theta, dtype):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def matmul_t(x, w):
    """A linear layer's product x @ w.T (forward() takes another as lin)."""
    return x @ w.T


def forward(p, c, tokens, targets, sdpa=False, lin=matmul_t):
    """Mean cross-entropy over targets != -1. sdpa: use PyTorch's fused
    attention (the benchmark's fastest eager path) instead of the explicit
    masked softmax (the reference's transparent path). lin: the linear
    layers' product (gradref.py's bf16 emulation)."""
    B, T = tokens.shape
    H, KV, hd = c["heads"], c["kv"], head_dim(c)
    x = p["model.embed_tokens.weight"][tokens]
    if c.get("stable_embedding"):  # LayerNorm after the embedding (Dettmers et al. 2.3)
        x = F.layer_norm(x, (c["dim"],), p["model.embed_norm.weight"],
                         p["model.embed_norm.bias"], eps=1e-5)
    cos, sin = rope_tables(T, hd, c["theta"], x.dtype)
    mask = torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
    for l in range(c["layers"]):
        pre = f"model.layers.{l}."
        h = rmsnorm(x, p[pre + "input_layernorm.weight"], c["eps"])
        q = lin(h, p[pre + "self_attn.q_proj.weight"]).view(B, T, H, hd).transpose(1, 2)
        k = lin(h, p[pre + "self_attn.k_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
        v = lin(h, p[pre + "self_attn.v_proj.weight"]).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        if sdpa:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1) @ v
        att = att.transpose(1, 2).reshape(B, T, H * hd)
        x = x + lin(att, p[pre + "self_attn.o_proj.weight"])
        h = rmsnorm(x, p[pre + "post_attention_layernorm.weight"], c["eps"])
        g = lin(h, p[pre + "mlp.gate_proj.weight"])
        u = lin(h, p[pre + "mlp.up_proj.weight"])
        x = x + lin(F.silu(g) * u, p[pre + "mlp.down_proj.weight"])
    x = rmsnorm(x, p["model.norm.weight"], c["eps"])
    head = p["model.embed_tokens.weight"] if c["tied"] else p["lm_head.weight"]
    logits = lin(x, head)
    return F.cross_entropy(logits.view(B * T, -1), targets.reshape(-1), ignore_index=-1)
