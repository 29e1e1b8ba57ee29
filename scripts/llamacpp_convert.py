#!/usr/bin/env python3
"""Convert a model directory strata wrote into GGUF with llama.cpp's own
converter (convert_hf_to_gguf.py), to check that strata's output is what
llama.cpp expects. tests/data/hfref/untied-llamacpp-f32.gguf was made so,
from tests/data/hfref/untied plus the tokenizer.json that `strata import`
writes for tests/data/gguf/model-F32.gguf.

The converter identifies a BPE pre-tokenizer by hashing its output on a test
text; the synthetic tokenizer here matches none it knows, so the check is
told it is llama-bpe (which it is, in structure). Nothing else is changed.

usage: scripts/llamacpp_convert.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf
       LLAMA_CPP_DIR: vendor/llama.cpp of the llama-cpp-python sdist
       (pip download --no-binary :all: llama-cpp-python; needs torch,
       transformers, sentencepiece, numpy)
"""
import os
import runpy
import sys


def main():
    root, model, out = sys.argv[1:4]
    sys.path.insert(0, root)
    sys.path.insert(0, os.path.join(root, "gguf-py"))
    import conversion.base as base
    for name in dir(base):
        cls = getattr(base, name)
        if isinstance(cls, type) and hasattr(cls, "get_vocab_base_pre"):
            cls.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
    sys.argv = ["convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "f32"]
    runpy.run_path(os.path.join(root, "convert_hf_to_gguf.py"), run_name="__main__")


if __name__ == "__main__":
    main()
