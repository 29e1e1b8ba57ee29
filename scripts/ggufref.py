#!/usr/bin/env python3
"""Reference data for strata's GGUF import (src/io/gguf.c).

From a small strata-initialized LLaMA (GQA, untied) and a small byte-level BPE
tokenizer trained here, writes GGUF files the way llama.cpp's
convert_hf_to_gguf.py does (q/k rows permuted for its RoPE, names
token_embd / blk.N.* / output, llama.* metadata, tokenizer.ggml.* with
pre = llama-bpe), one per tensor type of the matrices: F32, F16, BF16, Q8_0,
Q4_0, Q4_1 (norms stay F32). Next to each, the weights strata must produce:
the `gguf` package's own dequantization, un-permuted, under Hugging Face
names. Also the tokenizer's ids for a few texts.

usage: scripts/ggufref.py MODEL_DIR CORPUS.txt OUTDIR
       (pip install gguf safetensors numpy tokenizers)
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
QT = gguf.GGMLQuantizationType


def permute(w, n_head):
    # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer(corpus, vocab_size):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([corpus], tr)
    return tok


def main():
    model_dir, corpus, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = load_file(os.path.join(model_dir, "model.safetensors"))
    H, KV, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    tok = tokenizer(corpus, cfg["vocab_size"])
    assert tok.get_vocab_size() == cfg["vocab_size"], tok.get_vocab_size()
    tj = json.loads(tok.to_str())
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    special = {t["id"] for t in tj["added_tokens"] if t["special"]}
    types = [3 if i in special else 1 for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    with open(os.path.join(out, "tokens.json"), "w") as f:
        json.dump([{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS],
                  f, ensure_ascii=False)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
                 "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for l in range(L):
        for hf, gg in per_layer.items():
            names["model.layers.%d.%s.weight" % (l, hf)] = "blk.%d.%s.weight" % (l, gg)

    for qname in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"):
        qt = QT[qname]
        wr = gguf.GGUFWriter(os.path.join(out, "model-%s.gguf" % qname), "llama")
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
        wr.add_tokenizer_pre("llama-bpe")
        wr.add_token_list(tokens)
        wr.add_token_types(types)
        wr.add_token_merges(merges)
        wr.add_bos_token_id(vocab["<|begin_of_text|>"])
        wr.add_eos_token_id(vocab["<|end_of_text|>"])
        expected = {}
        for hf, gg in names.items():
            x = w[hf].astype(np.float32)
            if ".q_proj." in hf:
                x = permute(x, H)
            elif ".k_proj." in hf:
                x = permute(x, KV)
            if x.ndim == 1:  # norms stay F32, as llama.cpp writes them
                wr.add_tensor(gg, x)
                deq = x
            elif qname == "F32":
                wr.add_tensor(gg, x)
                deq = x
            elif qname == "F16":
                wr.add_tensor(gg, x.astype(np.float16))
                deq = x.astype(np.float16).astype(np.float32)
            else:
                data = quants.quantize(x, qt)
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
        save_file(expected, os.path.join(out, "expected-%s.safetensors" % qname))
        print("wrote model-%s.gguf" % qname)


if __name__ == "__main__":
    main()
