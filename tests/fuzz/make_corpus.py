#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/<harness>/):
a handful of small valid files and near-valid ones (each breaking one rule), standard library only.
Deterministic: run it again and the files are the same. Inputs that once crashed a harness are kept
there too, under crash-* names (they are not written by this script).

The checkpoint and profile seeds are files tlm itself writes: a real checkpoint's state.json and
latest (a tiny model trained two steps), and profiles as libtlm_inject.so writes them (their records
are the C structs of this build). The harnesses write those (FUZZ_WRITE_SEEDS); with the fuzz build
given (make_corpus.py --build build-fuzz), this script runs them first, then derives near-valid
variants of the state.json."""
import json
import os
import struct
import subprocess
import sys

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


# ---- checkpoint ---------------------------------------------------------------------------------
# first byte: 0 = the rest is a step directory's state.json, 1 = the rest is ROOT/latest

def checkpoint():
    w = "checkpoint"
    seed = os.path.join(HERE, "corpus", w, "state_step2.json")
    if not os.path.exists(seed):
        print("make_corpus.py: no %s: run with --build DIR (the fuzz build) to write it" % seed, file=sys.stderr)
        return
    state = json.loads(open(seed, "rb").read()[1:])

    def variant(name, change):
        s = json.loads(json.dumps(state))
        change(s)
        write(w, name, b"\0" + json.dumps(s, indent=1).encode())

    files = state["files"]  # version 2 (the identities: recipe.train_data.identity, val_data.identity)
    variant("bad_version_3.json", lambda s: s.update(version=3))

    def version_1(s):  # before the data's identity and the files' digests: read, with a warning
        s.update(version=1)
        del s["files"]
        for k in ("train_data", "val_data"):
            del s["recipe"][k]["identity"]
    variant("v1_no_digests.json", version_1)
    variant("bad_files_missing.json", lambda s: s.pop("files"))
    variant("bad_files_swapped.json", lambda s: s.update(files={k: v for k, v in zip(files, reversed(files.values()))}))
    variant("bad_digest_short.json", lambda s: s["files"]["weights.safetensors"].update(xxh3_128="abc"))
    variant("bad_digest_bytes.json", lambda s: s["files"]["optimizer.safetensors"].update(bytes=1))
    variant("bad_identity_bytes.json", lambda s: s["recipe"]["train_data"]["identity"].update(bytes=-1))
    variant("bad_identity_sampled.json", lambda s: s["recipe"]["val_data"]["identity"].update(sampled="yes"))
    variant("bad_identity_hash.json", lambda s: s["recipe"]["train_data"]["identity"].update(xxh3_128=None))
    variant("bad_log_short.json", lambda s: s["log"].pop())
    variant("bad_step_1e300.json", lambda s: s.update(step=1e300))
    variant("bad_batch_nan.json", lambda s: s["recipe"].update(batch_size="nan"))
    variant("bad_batch_2p5.json", lambda s: s["recipe"].update(batch_size=2.5))
    variant("bad_seed_negative.json", lambda s: s["recipe"].update(seed="-1"))
    variant("bad_context_over_model.json", lambda s: s["recipe"].update(context_length=1 << 20))
    variant("bad_loss_scale_0.json", lambda s: s["loss_scaler"].update(scale=0))
    variant("bad_log_entry_array.json", lambda s: s["log"].__setitem__(0, [1]))
    variant("bad_train_data_null.json", lambda s: s["recipe"].update(train_data=None))
    variant("bad_precision.json", lambda s: s["recipe"].update(precision="fp8"))
    variant("no_model_name.json", lambda s: s["recipe"].pop("model"))
    variant("val_loss_strings.json", lambda s: [e.update(loss="inf", val_loss="nan") for e in s["log"]])
    write(w, "latest_no_newline", b"\1step-00000002")
    write(w, "bad_latest_missing_step", b"\1step-00000099\n")
    write(w, "bad_latest_dotdot", b"\1../step-00000002\n")
    write(w, "bad_latest_empty", b"\1")
    write(w, "bad_latest_nul", b"\1step-0000\0002\n")


# ---- plot ---------------------------------------------------------------------------------------
# first byte: the kind (byte % 8, plot.c's registry order), bit 4: the file given twice

PLOT_KINDS = ["memory-timeline", "memory-context", "loss-curve", "allreduce-size", "allreduce-nproc",
              "allreduce-backends", "ddp-buckets", "ddp-scaling"]


def plot_seed(name, kind, doc, twice=False):
    k = PLOT_KINDS.index(kind) | (16 if twice else 0)
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=1)
    write("plot", name, bytes([k]) + text.encode())


def memory_timeline():
    cats = ["parameters", "gradients", "optimizer", "activations", "weight copy", "workspace"]
    start = [658688, 0, 0, 0, 0, 0]
    events, marks, by = [], [], list(start)
    marks.append({"op_seq": 0, "step": 0, "warmup": False, "phase": "setup", "layer": -1, "kind": "step",
                  "name": "step", "begin": True, "event": 0, "in_use": 658688, "footprint": 658688})
    for i, (ph, cat, b) in enumerate([("forward", 3, 4096), ("forward", 3, 8192), ("forward", 5, 2184),
                                      ("backward", 1, 527616), ("backward", 3, -8192), ("optimizer", 2, 1317376),
                                      ("optimizer", 5, -2184)]):
        if not marks or marks[-1]["name"] != ph:
            marks.append({"op_seq": i, "step": 0, "warmup": False, "phase": ph, "layer": -1, "kind": "phase",
                          "name": ph, "begin": True, "event": i, "in_use": sum(by), "footprint": sum(by)})
        by[cat] += b
        events.append({"t_us": 10.0 * i, "op_seq": i, "step": 0, "warmup": False, "phase": ph, "layer": 0,
                       "action": "alloc" if b > 0 else "free", "bytes": abs(b), "category": cats[cat],
                       "name": "x%d" % i, "in_use": sum(by), "footprint": sum(by) + 4096, "by_category": list(by)})
    return {"kind": "tlm.memory_timeline", "meta": {"title": "tiny ctx16 b2 fp32 train"}, "categories": cats,
            "start": start, "events": events, "marks": marks, "peaks": {"peak_bytes": max(e["in_use"] for e in events)}}


def allreduce_row(backend, nranks, nbytes, in_place, t_us, busbw, status="ok"):
    return {"backend": backend, "nranks": nranks, "bytes": nbytes, "count": nbytes // 4, "dtype": "fp32", "op": "sum",
            "in_place": in_place, "time_us_mean": t_us, "time_us_min": t_us, "time_us_max": t_us,
            "busbw_gb_per_s": busbw, "wrong": 0, "status": status, "error": None}


def bench_row(ranks, batch, ddp, bucket_mb, step_ms):
    return {"model": "tiny", "context_length": 32, "batch_size": batch, "precision": "fp32", "pass": "train",
            "ranks": ranks, "ddp": ddp, "bucket_mb": bucket_mb, "grad_reduce_dtype": "fp32", "zero": 0,
            "cuda_graphs": False, "step_ms_mean": step_ms, "tokens_per_s": batch * 32 * 1000 // step_ms, "status": "ok"}


def plots():
    tl = memory_timeline()
    plot_seed("memory_timeline.json", "memory-timeline", tl)
    bad = json.loads(json.dumps(tl))
    bad["events"][2]["by_category"] = [1, 2]
    plot_seed("bad_timeline_by_category.json", "memory-timeline", bad)
    bad = json.loads(json.dumps(tl))
    bad["marks"][1]["event"] = 1e300
    plot_seed("bad_timeline_mark_1e300.json", "memory-timeline", bad)
    rows = [{"model": "tiny", "context_length": c, "batch_size": 2, "precision": "fp32", "pass": "train",
             "recompute": "none", "peak_bytes": 2736520 * c // 16, "status": "ok"} for c in (16, 32, 64)]
    rows.append({"model": "tiny", "context_length": 128, "precision": "fp32", "impl": "pytorch", "peak_mib": 9.5})
    rows.append({"model": "tiny", "context_length": 4096, "precision": "fp32", "peak_bytes": None, "status": "OOM"})
    plot_seed("memory_context.json", "memory-context", {"tool": "tlm memory", "rows": rows})
    log = [{"step": i + 1, "tokens": 32 * (i + 1), "loss": 5.5 - 0.1 * i, "lr": 1e-3, "grad_norm": 1.0,
            "clipped": False, "skipped": False, "loss_scale": 1, "val_loss": 5.4 - 0.1 * i if i % 2 else None}
           for i in range(6)]
    train = {"tool": "tlm train", "model": "tiny*", "precision": "fp32", "log": log}
    plot_seed("loss_curve.json", "loss-curve", train)
    plot_seed("loss_curve_twice.json", "loss-curve", train, twice=True)
    plot_seed("bad_loss_no_finite.json", "loss-curve", {"tool": "tlm train", "log": [{"step": 1, "loss": "nan"}]})
    ar = {"tool": "tlm allreduce", "mpi_algorithm": "auto", "nccl_env": "(none set)", "rows": [
        allreduce_row("mpi", 2, 1000000, True, 120, 8.3), allreduce_row("mpi", 2, 1000000, False, 130, 7.7),
        allreduce_row("mpi", 2, 100000000, True, 25000, 4.0), allreduce_row("mpi", 3, 1000000, True, 200, 6.6),
        allreduce_row("mpi", 3, 100000000, True, 40000, 3.3),
        {"backend": "nccl", "nranks": 2, "status": "skipped", "error": "2 processes need 2 GPUs"}]}
    gloo = {"tool": "torch_allreduce.py", "backend": "gloo", "rows": [
        allreduce_row("gloo", 2, 1000000, True, 600, 1.6), allreduce_row("gloo", 3, 100000000, True, 70000, 1.9)]}
    nt = {"tool": "nccl-tests", "nccl_version": "2.28.3", "rows": [
        allreduce_row("nccl", 2, 1000000, True, 26.13, 38.28), allreduce_row("nccl", 2, 100000000, False, 373.26, 267.91)]}
    for kind in ("allreduce-size", "allreduce-nproc", "allreduce-backends"):
        stem = kind.replace("-", "_")
        plot_seed(stem + "_tlm.json", kind, ar)
        plot_seed(stem + "_twice.json", kind, ar, twice=True)
        plot_seed(stem + "_gloo.json", kind, gloo)
        plot_seed(stem + "_nccl_tests.json", kind, nt)
    bad = json.loads(json.dumps(ar))
    bad["rows"][0]["nranks"] = 1e300
    plot_seed("bad_allreduce_nranks_1e300.json", "allreduce-size", bad)
    ddp = {"tool": "tlm bench", "device": "cpu", "rows": [
        bench_row(2, 4, "bucketed", 1, 52), bench_row(2, 4, "bucketed", 25, 45), bench_row(2, 4, "bucketed", 100, 49),
        bench_row(3, 6, "bucketed", 25, 47), bench_row(1, 2, "none", None, 40), bench_row(1, 4, "none", None, 75),
        bench_row(1, 6, "none", None, 110)]}
    torch = {"tool": "pytorch_ddp.py", "rows": [bench_row(2, 4, "pytorch", 25, 60), bench_row(1, 4, "none", None, 70)]}
    for kind in ("ddp-buckets", "ddp-scaling"):
        stem = kind.replace("-", "_")
        plot_seed(stem + ".json", kind, ddp)
        plot_seed(stem + "_twice.json", kind, ddp, twice=True)
        plot_seed(stem + "_pytorch.json", kind, torch)
    bad = json.loads(json.dumps(ddp))
    bad["rows"][0]["ranks"] = -1e300
    plot_seed("bad_ddp_ranks.json", "ddp-buckets", bad)
    plot_seed("bad_not_json.json", "memory-timeline", "{\"kind\": ")
    plot_seed("bad_rows_object.json", "ddp-scaling", {"tool": "tlm bench", "rows": {"a": 1}})


# ---- profile --------------------------------------------------------------------------------------
# profiles as libtlm_inject.so writes them, by fuzz_profile itself (FUZZ_WRITE_SEEDS)


def harness_seeds(build):
    for h in ("checkpoint", "profile"):
        d = os.path.join(HERE, "corpus", h)
        os.makedirs(d, exist_ok=True)
        subprocess.run([os.path.join(build, "fuzz_" + h)], env=dict(os.environ, FUZZ_WRITE_SEEDS=d), check=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--build":
        harness_seeds(sys.argv[2])
    safetensors()
    npys()
    tokens()
    checkpoint()
    plots()
