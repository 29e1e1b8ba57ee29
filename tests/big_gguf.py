#!/usr/bin/env python3
"""Write a large F32 llama GGUF for strata's import tests (standard library
only): the metadata of SRC (its tokenizer, norms' epsilon, RoPE base) with
the model's sizes replaced, and zero-valued F32 tensors of those sizes.

usage: big_gguf.py SRC DST DIM FFN LAYERS HEADS
"""
import struct
import sys

from gguf_edit import put_value, read_head


def main():
    src, dst = sys.argv[1], sys.argv[2]
    dim, ffn, layers, heads = (int(a) for a in sys.argv[3:7])
    _, version, _, kvs = read_head(src)
    sizes = {b"llama.embedding_length": dim, b"llama.feed_forward_length": ffn,
             b"llama.block_count": layers, b"llama.attention.head_count": heads,
             b"llama.attention.head_count_kv": heads}
    kvs = [[k, t, sizes.get(k, v)] for k, t, v in kvs]
    vocab = len(next(kv for kv in kvs if kv[0] == b"tokenizer.ggml.tokens")[2][1])
    tensors = [(b"token_embd.weight", (dim, vocab)), (b"output_norm.weight", (dim,)),
               (b"output.weight", (dim, vocab))]
    for i in range(layers):
        blk = b"blk.%d." % i
        tensors += [(blk + b"attn_norm.weight", (dim,)), (blk + b"ffn_norm.weight", (dim,))]
        tensors += [(blk + n + b".weight", (dim, dim))
                    for n in (b"attn_q", b"attn_k", b"attn_v", b"attn_output")]
        tensors += [(blk + b"ffn_gate.weight", (dim, ffn)), (blk + b"ffn_up.weight", (dim, ffn)),
                    (blk + b"ffn_down.weight", (ffn, dim))]
    align = 32
    out = bytearray(b"GGUF") + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, kind, value in kvs:
        out += struct.pack("<Q", len(key)) + key + struct.pack("<I", kind)
        put_value(out, kind, value)
    offset = 0
    for name, shape in tensors:
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape) + struct.pack("<IQ", 0, offset)
        n = 4
        for d in shape:
            n *= d
        offset += (n + align - 1) // align * align
    out += b"\0" * ((-len(out)) % align)
    with open(dst, "wb") as f:
        f.write(out)
        zeros = bytes(1 << 20)
        left = offset
        while left:
            f.write(zeros[:min(left, len(zeros))])
            left -= min(left, len(zeros))


if __name__ == "__main__":
    main()
