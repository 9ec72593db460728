#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/<harness>/):
a handful of small valid files and near-valid ones (each breaking one rule), standard library only.
Deterministic: run it again and the files are the same. Inputs that once crashed a harness are kept
there too, under crash-* names (they are not written by this script)."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"F32": ("<f", 4), "F64": ("<d", 8), "F16": ("<e", 2), "I64": ("<q", 8), "I32": ("<i", 4),
          "U16": ("<H", 2), "U8": ("<B", 1)}


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ------------------------------------------------------------------------------

def st_raw(header_text, data=b"", hl=None):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(h) if hl is None else hl) + h + data


def st_file(tensors, meta={"format": "pt"}, pad=True):
    """tensors: (name, dtype, shape, values) in file order, stored contiguously as tlm writes them."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, values in tensors:
        if dtype == "BF16":
            blob = b"".join(struct.pack("<f", v)[2:] for v in values)
        else:
            fmt, _ = DTYPES[dtype]
            blob = b"".join(struct.pack(fmt, v) for v in values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":"))
    if pad:
        text += " " * (-len(text) % 8)
    return st_raw(text, data)


def safetensors():
    w = "safetensors"
    write(w, "tlm_small.safetensors", st_file([("token_embeddings.weight", "F32", [4, 2], [0.5 * i for i in range(8)]),
                                              ("layers.0.ln1.weight", "F32", [2], [1.0, 1.0])]))
    write(w, "all_dtypes.safetensors", st_file([
        ("f32", "F32", [2, 2], [1, -2, 0.25, 3e38]), ("f64", "F64", [2], [1 / 3, -1e300]),
        ("f16", "F16", [], [0.01]), ("bf16", "BF16", [3], [1, -3, 0.5]), ("i64", "I64", [2], [-1, 2 ** 40]),
        ("i32", "I32", [1, 1], [7]), ("u16", "U16", [2], [0, 65535]), ("u8", "U8", [3], [0, 1, 255]),
        ("empty", "F32", [0, 17], [])]))
    write(w, "no_meta_unpadded.safetensors", st_file([("w", "F16", [2], [1, 2])], meta=None, pad=False))
    write(w, "meta_entries.safetensors", st_file([("w", "U8", [1], [9])],
                                                 meta={"format": "pt", "d_model": "512", "name": "caf\u00e9 \u20ac"}))
    hdr = '{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
          '"__metadata__":null}'
    write(w, "offset_order.safetensors", st_raw(hdr, b"\0" * 8))
    write(w, "zero_tensors.safetensors", st_raw('{"__metadata__":{"format":"pt"}}'))
    # near-valid: one rule broken each
    one = '"%s":{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}'
    write(w, "bad_overlap.safetensors", st_raw("{" + one % ("a", 0, 4) + "," + one % ("b", 2, 6) + "}", b"\0" * 6))
    write(w, "bad_gap.safetensors", st_raw("{" + one % ("a", 0, 4) + "," + one % ("b", 8, 12) + "}", b"\0" * 12))
    write(w, "bad_trailing.safetensors", st_raw("{" + one % ("a", 0, 4) + "}", b"\0" * 9))
    write(w, "bad_meta_value.safetensors", st_raw('{"__metadata__":{"n":1},' + one % ("a", 0, 4) + "}", b"\0" * 4))
    write(w, "bad_empty_name.safetensors", st_raw("{" + one % ("", 0, 4) + "}", b"\0" * 4))
    write(w, "bad_dim_2p63.safetensors",
          st_raw('{"w":{"dtype":"U8","shape":[9223372036854775808,0],"data_offsets":[0,0]}}'))
    write(w, "bad_header_length.safetensors", st_raw("{}", hl=1 << 40))
    write(w, "bad_truncated.safetensors", st_file([("w", "F32", [4], [1, 2, 3, 4])])[:-3])
    write(w, "bad_dangling_comma.safetensors", st_raw('{"a":1,'))
    write(w, "bad_9_dims.safetensors", st_raw('{"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}', b"\1"))
    write(w, "bad_meta_array.safetensors", st_raw('{"__metadata__":["pt"]}'))
    write(w, "bad_meta_twice.safetensors", st_raw('{"__metadata__":{},"__metadata__":null}'))
    write(w, "bad_escaped_nul.safetensors", st_raw('{"a\\u0000b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))


# ---- npy ----------------------------------------------------------------------------------------

def npy(descr, shape, payload=b"", major=1, fortran=False, dict_text=None, align=64):
    if dict_text is None:
        shape_text = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        dict_text = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape_text)
    text = dict_text
    pre = 10 if major == 1 else 12
    total = (pre + len(text) + 1 + align - 1) // align * align
    text = text + " " * (total - pre - len(text) - 1) + "\n"
    hl = struct.pack("<H", len(text)) if major == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([major, 0]) + hl + text.encode() + payload


def pack(fmt, values):
    return b"".join(struct.pack(fmt, v) for v in values)


def npys():
    w = "npy"
    write(w, "f4_2x3.npy", npy("<f4", (2, 3), pack("<f", [1, 2, 3, 4, 5, 6])))
    write(w, "f8_v2.npy", npy("<f8", (2,), pack("<d", [1 / 3, -1e300]), major=2))
    write(w, "f2_v3.npy", npy("<f2", (3,), pack("<e", [1, 0.5, -2]), major=3))
    write(w, "i8_tokens_2x4.npy", npy("<i8", (2, 4), pack("<q", range(8))))
    write(w, "i4_1d.npy", npy("<i4", (3,), pack("<i", [5, -1, 3])))
    write(w, "u2_1d.npy", npy("<u2", (4,), pack("<H", [0, 1, 50256, 65535])))
    write(w, "u1_0d.npy", npy("|u1", (), b"\x07"))
    write(w, "empty_0x17.npy", npy("<i8", (0, 17)))
    write(w, "dict_variants.npy", npy(None, None, pack("<f", [1, 2]), dict_text="{\"shape\":(2L,),\"descr\":\"<f4\",\"fortran_order\":False}"))
    write(w, "bad_fortran.npy", npy("<f4", (2, 1), pack("<f", [1, 2]), fortran=True))
    write(w, "bad_bigendian.npy", npy(">f4", (1,), b"\0" * 4))
    write(w, "bad_truncated.npy", npy("<f4", (2, 3), b"\0" * 23))
    write(w, "bad_claims_2p40.npy", b"\x93NUMPY\x01\x00\x3e\x00{'descr':'<f4','fortran_order':False,'shape':(1099511627776,)}")
    write(w, "bad_safetensors.npy", st_file([("w", "F32", [1], [1])]))
    write(w, "bad_header_length_v2.npy", b"\x93NUMPY\x02\x00\x00\x00\x10\x00{'descr'")


# ---- tokens -------------------------------------------------------------------------------------
# first byte: bit 0 = raw .bin, (byte >> 1) % 5 picks vocab_size from 1, 2, 256, 50257, INT_MAX

def tokens():
    w, v50257, v256, v1 = "tokens", 3 << 1, 2 << 1, 0
    ids = [0, 1, 2, 50256, 7, 7, 9, 10, 11, 12, 13, 14]
    write(w, "bin_u16.bin", bytes([v50257 | 1]) + pack("<H", ids))
    write(w, "npy_u2.npy", bytes([v50257]) + npy("<u2", (len(ids),), pack("<H", ids)))
    write(w, "npy_i4.npy", bytes([v50257]) + npy("<i4", (len(ids),), pack("<i", ids)))
    write(w, "npy_i8.npy", bytes([v50257]) + npy("<i8", (len(ids),), pack("<q", ids)))
    write(w, "npy_u1_vocab256.npy", bytes([v256]) + npy("|u1", (8,), bytes(range(0, 256, 32))))
    write(w, "npy_vocab1.npy", bytes([v1]) + npy("<u2", (6,), pack("<H", [0] * 6)))
    write(w, "bad_odd.bin", bytes([v50257 | 1]) + b"\1\0\2")
    write(w, "bad_2d.npy", bytes([v50257]) + npy("<i4", (2, 2), pack("<i", [1, 2, 3, 4])))
    write(w, "bad_float.npy", bytes([v50257]) + npy("<f4", (2,), pack("<f", [1, 2])))
    write(w, "bad_id_range.npy", bytes([v256]) + npy("<i8", (3,), pack("<q", [1, 256, -1])))
    write(w, "bad_claims_2p40.npy", bytes([v50257]) + npy("<u2", (1 << 40,), b"\0" * 8))


if __name__ == "__main__":
    safetensors()
    npys()
    tokens()
