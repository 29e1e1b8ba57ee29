#!/usr/bin/env python3
"""Write a byte-level BPE tokenizer.json with a large vocabulary for strata's
tests (standard library only): the base file's model grown to N tokens, each
new token the concatenation of two earlier ones with a merge for the pair,
ids contiguous, no added tokens or post-processor.

usage: big_tokenizer.py BASE_TOKENIZER_JSON OUT N
"""
import json
import random
import sys


def main():
    base, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tok = json.load(open(base, encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    texts = sorted(vocab, key=vocab.get)
    known = set(texts)
    rng = random.Random(1)
    while len(texts) < n:
        a, b = rng.choice(texts), rng.choice(texts)
        t = a + b
        if " " in a or " " in b or t in known or len(t) > 24:
            continue
        known.add(t)
        texts.append(t)
        merges.append(a + " " + b)
    tok["model"]["vocab"] = {t: i for i, t in enumerate(texts)}
    tok["model"]["merges"] = merges
    tok["added_tokens"] = []
    tok["post_processor"] = None
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
