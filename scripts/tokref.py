#!/usr/bin/env python3
"""Reference data for strata's Hugging Face tokenizer (src/io/bpe.c).

Trains two byte-level BPE tokenizers with the Hugging Face `tokenizers`
library on a text corpus (the KJV from scripts/get-corpus), one with the GPT-2
pre-tokenizer (ByteLevel with its regex) and one with LLaMA-3's (a Split on
its regex, then ByteLevel without one, and ignore_merges), each with special
and added tokens; saves their tokenizer.json and the ids the library gives for
a varied sample of text (unicode, whitespace runs, digits, contractions,
special tokens), so the C tests compare against the library without needing
it installed.

usage: scripts/tokref.py CORPUS.txt OUTDIR      (pip install tokenizers)
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SAMPLES = [
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\t\ttabs, newlines\n\nand\r\nCRLF\r\n",
    "numbers 1 12 123 1234 12345 3.14159 -42 1,000,000 2026-11-22",
    "contractions: don't, I'm, we'll, they've, she'd, it's, DON'T, I'LL",
    "unicode: café naïve résumé Straße Ελληνικά русский язык 日本語のテキスト 中文 한국어",
    "emoji 😀🎉👍🏽 and symbols ©®™ ½ ∑∫√ → ← ★",
    "combining: e\u0301 a\u0308 n\u0303; zero\u200bwidth; nbsp\u00a0here",
    "punctuation!!! ??? ... --- *** ((( ))) [[x]] {y} <z> @#$%^&",
    "<|begin_of_text|>special tokens<|end_of_text|> inside <|user|> text",
    "<|endoftext|>",
    "mixed<|user|>adjacent<|user|><|user|>tokens",
    "a custom_word here and custom_word there",
    "",
    " ",
    "\n",
    "x" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "code: for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }",
    "URLs https://example.com/path?q=1&r=2 and emails a.b@c.de",
    "   \n   \n\t \r\n   multiple   whitespace    runs     ",
    "repeats: aaaa bbbbb ssss llll eeeee tttt !!!!!!! ...... 1111111 ))))",
    "mmm lll eee ooo sss, and xyzzyplugh once more: xyzzyplugh!",
]


def build(kind, corpus):
    if kind == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        specials = ["<|endoftext|>", "<|user|>"]
    elif kind == "smollm":  # SmolLM2 / StarCoder style: digits one by one, then GPT-2's regex
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|user|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([corpus], trainer)
    return tok


def main():
    corpus, out = sys.argv[1], sys.argv[2]
    for kind in ("gpt2", "llama3", "smollm"):
        tok = build(kind, corpus)
        d = os.path.join(out, kind)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        tok.save(path)
        if kind == "llama3":
            # a vocabulary entry no merge reaches: with ignore_merges the
            # whole word is one token, otherwise it would be split
            with open(path) as f:
                j = json.load(f)
            vocab = j["model"]["vocab"]
            vocab["\u0120xyzzyplugh"] = max(vocab.values()) + 1
            with open(path, "w") as f:
                json.dump(j, f, ensure_ascii=False)
            tok = Tokenizer.from_file(path)
        tok.add_tokens(["custom_word"])  # an added, non-special token
        tok.save(path)
        ref = []
        for text in SAMPLES:
            ids = tok.encode(text, add_special_tokens=False).ids
            ref.append({"text": text, "ids": ids,
                        "decoded": tok.decode(ids, skip_special_tokens=False)})
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump({"tokenizers": __import__("tokenizers").__version__,
                       "vocab_size": tok.get_vocab_size(), "samples": ref}, f,
                      ensure_ascii=False, indent=0)
        print("%s: vocab %d, %d samples" % (kind, tok.get_vocab_size(), len(ref)))


if __name__ == "__main__":
    main()
