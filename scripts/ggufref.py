#!/usr/bin/env python3
"""Reference data for strata's GGUF import (src/io/gguf.c, src/io/ggml_quant.c).

From a small strata-initialized LLaMA (GQA, untied) and a small byte-level BPE
tokenizer, writes GGUF files the way llama.cpp's convert_hf_to_gguf.py does
(q/k rows permuted for its RoPE, names token_embd / blk.N.* / output, llama.*
metadata, tokenizer.ggml.* with pre = llama-bpe), one per tensor type of the
matrices: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (norms stay F32). Next
to each, the weights strata must produce: the `gguf` package's own
dequantization, un-permuted, under Hugging Face names. Also the tokenizer's
ids for a few texts (tokens.json), and model-smollm.gguf: a one-layer Q8_0
model whose tokenizer has merges of digits too and tokenizer.ggml.pre =
smollm, with its ids under SmolLM's pre-tokenizer (Digits one by one, then
ByteLevel's regex: what llama.cpp runs for smollm; tokens-smollm.json),
which differ from those under GPT-2's regex alone and under llama-bpe.

The model's rows are 64 and 96 wide, too narrow for the K-quants' blocks of
256, so two more files cover them:
- model-Kmix.gguf: a model shaped like a Q4_K_M / Q5_K_M file (its own
  seeded random weights, 32 wide with an FFN of 256): ffn_down in Q6_K, Q4_K
  and Q5_K (rows of 256), the other matrices in the fallbacks llama-quantize
  uses for rows that are not a multiple of 256 (Q5_0, Q5_1, Q8_0). The gguf
  package (0.19) cannot quantize to K-quants, so quantize_k below does it by
  plain rounding (not llama.cpp's search: any valid block tests the
  dequantization, whose reference is the package's).
- blocks.gguf: one tensor per quantized type (named by it, 3 rows of 512)
  of random block bytes with finite normal fp16 scales, so every bit pattern
  of the quants, scales and high bits is read; expected-blocks.safetensors
  holds the package's dequantization.

usage: scripts/ggufref.py MODEL_DIR CORPUS.txt|TOKENIZER.json OUTDIR
       (pip install gguf safetensors numpy tokenizers)
A tokenizer.json is used as it is instead of training one on CORPUS.txt: to
regenerate tests/data/gguf with the committed tokenizer and weights, give the
directory `strata import --gguf tests/data/gguf/model-F32.gguf --out M` writes
as MODEL_DIR and M/tokenizer.json (the files of the other types come out
byte-identical).
"""
import json
import os
import sys

import gguf
import numpy as np
from gguf import quants
from safetensors.numpy import load_file, save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEXTS = ["In the beginning God created the heaven and the earth.",
         "<|begin_of_text|>numbers 12345 and don't stop<|end_of_text|>",
         "unicode: café 日本語 😀  spaces   and\ttabs\n"]
# SmolLM's pre-tokenizer splits ".\n" (merged by the llama-bpe one) and digits
# (merged under GPT-2's regex in model-smollm.gguf's tokenizer)
SMOL_TEXTS = TEXTS + ["It was so.\nAnd the 2024 days, 10.5 of them, 1010 and 120.\n"]
QT = gguf.GGMLQuantizationType


def permute(w, n_head):
    # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer(corpus, vocab_size):
    if corpus.endswith(".json"):
        return Tokenizer.from_file(corpus)
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], tr)
    return tok


def with_digit_merges(tj):
    # the tokenizer plus merges of digits ("2 0" -> "20", ...), which GPT-2's
    # and LLaMA 3's regexes reach and SmolLM's digit split does not
    tj = json.loads(json.dumps(tj))
    vocab, merges = tj["model"]["vocab"], tj["model"]["merges"]
    for a, b in (("2", "0"), ("1", "0"), ("Ġ", "1")):
        vocab[a + b] = len(vocab)
        merges.append(a + " " + b if isinstance(merges[0], str) else [a, b])
    return tj


def gguf_tokens(tj):
    # tokenizer.json -> tokenizer.ggml.* (tokens, types, merges, bos, eos)
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    special = {t["id"] for t in tj["added_tokens"] if t["special"]}
    return {"tokens": tokens, "types": [3 if i in special else 1 for i in range(len(tokens))],
            "merges": [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]],
            "bos": vocab["<|begin_of_text|>"], "eos": vocab["<|end_of_text|>"]}


def smollm_tokenizer(tj):
    # the same vocabulary and merges under SmolLM's pre-tokenizer (llama.cpp's
    # smollm: \p{N} split off one by one, then GPT-2's regex), merges not ignored
    tj = json.loads(json.dumps(tj))
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    tj["model"]["ignore_merges"] = False
    return Tokenizer.from_str(json.dumps(tj))


def f16_bytes(x):
    return np.asarray(x, np.float32).astype(np.float16).reshape(-1).view(np.uint8)


def pack_scales_k4(sc, m):
    # inverse of ggml's get_scale_min_k4 (8 six-bit scales and mins in 12 bytes)
    out = np.zeros(12, np.uint8)
    for j in range(4):
        out[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
        out[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6)
        out[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4)
    return out


def kblock(b, qt):
    """One super-block of 256 values as Q4_K, Q5_K or Q6_K bytes, by rounding."""
    if qt == QT.Q6_K:
        sub = b.reshape(16, 16)
        scale = np.abs(sub).max(axis=1) / 31
        d = np.float16(scale.max() / 127)
        sc = np.clip(np.round(scale / np.float32(d)), -128, 127).astype(np.int8) if d else np.zeros(16, np.int8)
        step = (np.float32(d) * sc.astype(np.float32)).repeat(16)
        q = (np.clip(np.round(b / np.where(step > 0, step, 1)), -32, 31) + 32).astype(np.uint8)
        ql, qh = np.zeros(128, np.uint8), np.zeros(64, np.uint8)
        for half in range(2):
            v = q[128 * half:128 * half + 128]
            for l in range(32):
                ql[64 * half + l] = (v[l] & 15) | ((v[l + 64] & 15) << 4)
                ql[64 * half + l + 32] = (v[l + 32] & 15) | ((v[l + 96] & 15) << 4)
                qh[32 * half + l] = (v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | \
                    ((v[l + 96] >> 4) << 6)
        return np.concatenate([ql, qh, sc.view(np.uint8), f16_bytes(d)])
    nmax = 15 if qt == QT.Q4_K else 31
    sub = b.reshape(8, 32)
    lo = np.minimum(sub.min(axis=1), 0)  # y = (d*sc)*q - (dmin*m): offsets at or below 0
    scale = (sub.max(axis=1) - lo) / nmax
    d, dmin = np.float16(scale.max() / 63), np.float16(-lo.min() / 63)
    sc = np.clip(np.round(scale / np.float32(d)), 0, 63).astype(np.uint8) if d else np.zeros(8, np.uint8)
    m = np.clip(np.round(-lo / np.float32(dmin)), 0, 63).astype(np.uint8) if dmin else np.zeros(8, np.uint8)
    step = np.float32(d) * sc.astype(np.float32)
    off = np.float32(dmin) * m.astype(np.float32)
    q = np.clip(np.round((sub + off[:, None]) / np.where(step > 0, step, 1)[:, None]), 0, nmax).astype(np.uint8)
    qs = np.zeros(128, np.uint8)
    for c in range(4):
        qs[32 * c:32 * c + 32] = (q[2 * c] & 15) | ((q[2 * c + 1] & 15) << 4)
    parts = [f16_bytes(d), f16_bytes(dmin), pack_scales_k4(sc, m)]
    if qt == QT.Q5_K:
        qh = np.zeros(32, np.uint8)
        for j in range(8):
            qh |= ((q[j] >> 4) & 1) << j
        parts.append(qh)
    return np.concatenate(parts + [qs])


def quantize_k(x, qt):
    rows = x.astype(np.float32).reshape(-1, 256)
    data = np.stack([kblock(b, qt) for b in rows]).reshape(x.shape[0], -1)
    # the blocks mean what the gguf package reads them as: close to x
    deq = quants.dequantize(data, qt).reshape(x.shape)
    assert np.abs(deq - x).max() <= 0.08 * np.abs(x).max(), (qt.name, np.abs(deq - x).max())
    return data


def quantize(x, qt):
    return quantize_k(x, qt) if qt in (QT.Q4_K, QT.Q5_K, QT.Q6_K) else quants.quantize(x, qt)


def hf_to_gguf_names(L):
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
                 "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for l in range(L):
        for hf, gg in per_layer.items():
            names["model.layers.%d.%s.weight" % (l, hf)] = "blk.%d.%s.weight" % (l, gg)
    return names


def write_model(path, cfg, w, qtype_of, tok, pre="llama-bpe"):
    """A llama GGUF of weights w (Hugging Face names) and tokenizer tok
    (tokens, types, merges, bos, eos); qtype_of(hf_name) names each matrix's
    type. Returns the weights strata must import: the gguf package's
    dequantization, un-permuted."""
    H, KV, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    wr = gguf.GGUFWriter(path, "llama")
    wr.add_name("strata ggufref")
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_block_count(L)
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(H)
    wr.add_head_count_kv(KV)
    wr.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    wr.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    wr.add_vocab_size(cfg["vocab_size"])
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre(pre)
    wr.add_token_list(tok["tokens"])
    wr.add_token_types(tok["types"])
    wr.add_token_merges(tok["merges"])
    wr.add_bos_token_id(tok["bos"])
    wr.add_eos_token_id(tok["eos"])
    expected = {}
    for hf, gg in hf_to_gguf_names(L).items():
        x = w[hf].astype(np.float32)
        if ".q_proj." in hf:
            x = permute(x, H)
        elif ".k_proj." in hf:
            x = permute(x, KV)
        qt = qtype_of(hf)
        if x.ndim == 1 or qt == QT.F32:  # norms stay F32, as llama.cpp writes them
            wr.add_tensor(gg, x)
            deq = x
        elif qt == QT.F16:
            wr.add_tensor(gg, x.astype(np.float16))
            deq = x.astype(np.float16).astype(np.float32)
        else:
            data = quantize(x, qt)
            wr.add_tensor(gg, data, raw_dtype=qt)
            deq = quants.dequantize(data, qt).reshape(x.shape).astype(np.float32)
        if ".q_proj." in hf:
            deq = unpermute(deq, H)
        elif ".k_proj." in hf:
            deq = unpermute(deq, KV)
        expected[hf] = np.ascontiguousarray(deq)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return expected


def random_model(vocab_size, F, L, seed):
    """A model 32 wide (2 heads of 16, 1 kv head), FFN F, L layers, seeded
    random weights with std 0.25 as the main model's."""
    cfg = {"vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 128,
           "rope_theta": 500000.0, "rms_norm_eps": 1e-5}
    rng = np.random.default_rng(seed)
    D, hd = 32, 16
    shapes = {"model.embed_tokens.weight": (vocab_size, D), "model.norm.weight": (D,),
              "lm_head.weight": (vocab_size, D)}
    for l in range(L):
        p = "model.layers.%d." % l
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "self_attn.q_proj.weight": (2 * hd, D), p + "self_attn.k_proj.weight": (hd, D),
                       p + "self_attn.v_proj.weight": (hd, D), p + "self_attn.o_proj.weight": (D, 2 * hd),
                       p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                       p + "mlp.down_proj.weight": (D, F)})
    w = {k: (1 + 0.1 * rng.standard_normal(s) if len(s) == 1 else 0.25 * rng.standard_normal(s)).astype(np.float32)
         for k, s in shapes.items()}
    return cfg, w


def kmix_model(vocab_size):
    """A model shaped for the K-quants: rows of 256 in ffn_down."""
    cfg, w = random_model(vocab_size, 256, 3, 7)

    def qtype_of(hf):
        # Q4_K_M's choices, with llama-quantize's fallbacks for rows of 32
        # (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0); ffn_down's rows are 256
        if ".mlp.down_proj." in hf:
            return (QT.Q6_K, QT.Q4_K, QT.Q5_K)[int(hf.split(".")[2])]
        if hf == "lm_head.weight" or ".v_proj." in hf:
            return QT.Q8_0
        if ".o_proj." in hf or ".up_proj." in hf:
            return QT.Q5_1
        return QT.Q5_0
    return cfg, w, qtype_of


def random_blocks(out):
    """blocks.gguf: per quantized type, 3 rows of 512 values of random block
    bytes whose fp16 fields (d, m, dmin) are finite normal numbers."""
    rng = np.random.default_rng(11)
    f16_at = {QT.Q8_0: [0], QT.Q4_0: [0], QT.Q5_0: [0], QT.Q4_1: [0, 2], QT.Q5_1: [0, 2],
              QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208]}
    wr = gguf.GGUFWriter(os.path.join(out, "blocks.gguf"), "blocks")
    expected = {}
    for qt, at in f16_at.items():
        block, size = gguf.GGML_QUANT_SIZES[qt]
        data = rng.integers(0, 256, (3, 512 // block, size), dtype=np.uint8)
        for o in at:
            v = rng.choice([-1.0, 1.0], data.shape[:2]) * rng.uniform(2.0 ** -10, 2.0, data.shape[:2])
            data[:, :, o:o + 2] = v.astype(np.float16).view(np.uint8).reshape(*data.shape[:2], 2)
        data = data.reshape(3, -1)
        wr.add_tensor(qt.name, data, raw_dtype=qt)
        deq = quants.dequantize(data, qt).reshape(3, 512).astype(np.float32)
        assert np.isfinite(deq).all()
        expected[qt.name] = np.ascontiguousarray(deq)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    save_file(expected, os.path.join(out, "expected-blocks.safetensors"))
    print("wrote blocks.gguf")


def main():
    model_dir, corpus, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    tok = tokenizer(corpus, cfg["vocab_size"])
    assert tok.get_vocab_size() == cfg["vocab_size"], tok.get_vocab_size()
    tj = json.loads(tok.to_str())
    gtok = gguf_tokens(tj)
    ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump([{"text": t, "ids": i} for t, i in zip(TEXTS, ids)], f, ensure_ascii=False)
    # model-smollm.gguf: a small model (1 layer, Q8_0) whose tokenizer has
    # digit merges too, with tokenizer.ggml.pre = smollm; the ids are the
    # library's under SmolLM's pre-tokenizer, and its last text gets other
    # ids under GPT-2's regex alone and under the llama-bpe pre-tokenizer
    dtj = with_digit_merges(tj)
    smol = smollm_tokenizer(dtj)
    smol_ids = [smol.encode(t, add_special_tokens=False).ids for t in SMOL_TEXTS]
    gpt2 = json.loads(json.dumps(dtj))
    gpt2["pre_tokenizer"] = smol_pre = json.loads(smol.to_str())["pre_tokenizer"]["pretokenizers"][1]
    gpt2["model"]["ignore_merges"] = False
    for other in (Tokenizer.from_str(json.dumps(gpt2)), Tokenizer.from_str(json.dumps(dtj))):
        assert other.encode(SMOL_TEXTS[-1], add_special_tokens=False).ids != smol_ids[-1]
    assert smol_pre["type"] == "ByteLevel" and smol_pre["use_regex"]
    with open(os.path.join(out, "tokens-smollm.json"), "w") as f:
        json.dump([{"text": t, "ids": i} for t, i in zip(SMOL_TEXTS, smol_ids)], f, ensure_ascii=False)
    scfg, sw = random_model(len(dtj["model"]["vocab"]), 64, 1, 13)
    write_model(os.path.join(out, "model-smollm.gguf"), scfg, sw, lambda hf: QT.Q8_0, gguf_tokens(dtj),
                pre="smollm")
    print("wrote model-smollm.gguf")

    for qname in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        expected = write_model(os.path.join(out, "model-%s.gguf" % qname), cfg, w, lambda hf: QT[qname], gtok)
        save_file(expected, os.path.join(out, "expected-%s.safetensors" % qname))
        print("wrote model-%s.gguf" % qname)

    kcfg, kw, qtype_of = kmix_model(cfg["vocab_size"])
    expected = write_model(os.path.join(out, "model-Kmix.gguf"), kcfg, kw, qtype_of, gtok)
    save_file(expected, os.path.join(out, "expected-Kmix.safetensors"))
    print("wrote model-Kmix.gguf")
    random_blocks(out)


if __name__ == "__main__":
    main()
