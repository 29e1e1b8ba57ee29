#!/usr/bin/env python3
"""Edit the metadata of a GGUF file for strata's import tests (standard
library only): the file is read whole, its metadata changed, and written
back with the tensor data after a freshly aligned header (tensor offsets are
relative to the data, so they stay).

usage: gguf_edit.py SRC DST extend-tokens N   # N more tokens than there are
       gguf_edit.py SRC DST empty-token       # the last token made ""
       gguf_edit.py SRC DST nul-token         # the last token made "a\0b"
       gguf_edit.py SRC DST latin1-token      # the last token made "caf\xe9"
       gguf_edit.py SRC DST string-types      # token_type as a list of strings
       gguf_edit.py SRC DST set KEY TYPE VAL  # a key added or replaced (TYPE:
                                              # GGUF's number; 8 a string, its
                                              # bytes as given)
       gguf_edit.py SRC DST rename-token I TEXT  # token I's text made TEXT
       gguf_edit.py SRC DST del KEY           # a key removed
"""
import os
import struct
import sys

STR, ARR = 8, 9
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B",
          10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def value(self, kind):
        if kind == STR:
            return self.string()
        if kind == ARR:
            elem, n = self.take("<I"), self.take("<Q")
            return elem, [self.value(elem) for _ in range(n)]
        return self.take(SCALAR[kind])


def put_value(out, kind, value):
    if kind == STR:
        out += struct.pack("<Q", len(value)) + value
    elif kind == ARR:
        elem, items = value
        out += struct.pack("<IQ", elem, len(items))
        for item in items:
            put_value(out, elem, item)
    else:
        out += struct.pack(SCALAR[kind], value)


def read_head(path):
    """The file's reader past its metadata: (reader, version, tensor count,
    [[key, type, value], ...])."""
    r = Reader(open(path, "rb").read())
    assert r.data[:4] == b"GGUF"
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        kind = r.take("<I")
        kvs.append([key, kind, r.value(kind)])
    return r, version, n_tensors, kvs


def main():
    src, dst, edit = sys.argv[1], sys.argv[2], sys.argv[3]
    r, version, n_tensors, kvs = read_head(src)
    infos_start = r.pos
    for _ in range(n_tensors):
        r.string()
        dims = r.take("<I")
        r.pos += 8 * dims + 4 + 8
    infos = r.data[infos_start:r.pos]
    align = next((v for k, _, v in kvs if k == b"general.alignment"), 32)
    align = align if isinstance(align, int) else int(align)
    data = r.data[(r.pos + align - 1) // align * align:]

    tokens = next(kv for kv in kvs if kv[0] == b"tokenizer.ggml.tokens")[2][1]
    types = next((kv for kv in kvs if kv[0] == b"tokenizer.ggml.token_type"), None)
    if edit == "extend-tokens":
        for i in range(int(sys.argv[4])):
            tokens.append(b"<extra_%d>" % i)
            if types:
                types[2][1].append(1)
    elif edit == "empty-token":
        tokens[-1] = b""
    elif edit == "nul-token":
        tokens[-1] = b"a\0b"
    elif edit == "latin1-token":
        tokens[-1] = b"caf\xe9"
    elif edit == "rename-token":
        tokens[int(sys.argv[4])] = sys.argv[5].encode()
    elif edit == "string-types":
        types[1], types[2] = ARR, (STR, [b"%d" % t for t in types[2][1]])
    elif edit == "set":
        key, kind = sys.argv[4].encode(), int(sys.argv[5])
        text = sys.argv[6]
        value = os.fsencode(text) if kind == STR else \
            float(text) if kind in (6, 12) else int(text)
        kvs = [kv for kv in kvs if kv[0] != key] + [[key, kind, value]]
        if key == b"general.alignment":
            align = int(value)
    elif edit == "del":
        key = sys.argv[4].encode()
        assert any(kv[0] == key for kv in kvs), "no key " + sys.argv[4]
        kvs = [kv for kv in kvs if kv[0] != key]
    else:
        sys.exit("unknown edit " + edit)

    out = bytearray(b"GGUF") + struct.pack("<IQQ", version, n_tensors, len(kvs))
    for key, kind, value in kvs:
        out += struct.pack("<Q", len(key)) + key + struct.pack("<I", kind)
        put_value(out, kind, value)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    open(dst, "wb").write(bytes(out) + data)


if __name__ == "__main__":
    main()
