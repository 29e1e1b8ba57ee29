"""Write a strata token shard (the layout of src/io/shard.h) from Python, for
the reference scripts."""
import struct


def write_shard(path, tokens, vocab, name=b"ref"):
    """tokens: ids < vocab <= 65536 (two bytes each); FNV-1a 64 of the data."""
    data = struct.pack("<%dH" % len(tokens), *tokens)
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    hdr = b"STRATOK1" + struct.pack("<IIII", 1, 2, vocab, 0) + struct.pack("<Q", len(tokens)) + \
        name.ljust(24, b"\0") + struct.pack("<Q", h)
    assert len(hdr) == 64
    with open(path, "wb") as f:
        f.write(hdr + data)
