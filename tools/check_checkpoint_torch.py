#!/usr/bin/env python3
"""check_checkpoint_torch.py — a tlm checkpoint is a PyTorch CS336 state dict, and the reverse.

1. tlm -> PyTorch: the checkpoint's weights.safetensors (CS336 names, the config in its metadata)
   loads into bench/peers/pytorch_lm.py's TransformerLM with load_state_dict(strict=True); its
   optimizer.safetensors (exp_avg.<name>, exp_avg_sq.<name>, metadata step) loads as the state of that
   file's CS336 AdamW (the same names PyTorch's AdamW uses) for every parameter; and the loss PyTorch
   computes with the loaded weights on a batch equals the one `tlm step --weights` prints (float32:
   within 1e-5 relative).
2. PyTorch -> tlm: a freshly initialised PyTorch model's state_dict, saved as safetensors without
   tlm's metadata, is read by `tlm step --weights ... --num-heads H`, and the losses agree again.

  python3 tools/check_checkpoint_torch.py --tlm build/tlm                 # makes a checkpoint first
  python3 tools/check_checkpoint_torch.py --tlm build/tlm --checkpoint CK # CK: ROOT or step directory

Needs torch and numpy (not the safetensors package: the format is read and written here). Exit 0
when every check passes.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from pytorch_lm import AdamW, LMConfig, TransformerLM, cross_entropy  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """(tensors by name, metadata dict) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[t["dtype"]]).reshape(t["shape"]).clone()
    return out, meta


def write_safetensors(path, tensors):
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def step_dir(path):
    latest = os.path.join(path, "latest")
    return os.path.join(path, open(latest).read().strip()) if os.path.exists(latest) else path


def tlm_loss(tlm, weights, x_path, y_path, extra=()):
    out = subprocess.run([tlm, "step", "--device", "cpu", "--weights", weights, "--inputs", x_path,
                          "--targets", y_path, *extra], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"tlm step failed ({out.returncode}): {out.stderr.strip()}")
    return float(out.stdout.split()[1])  # "loss 5.1234567"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tlm", required=True, help="the tlm binary")
    p.add_argument("--checkpoint", help="a tlm train checkpoint (default: a 6-step tiny run made here)")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    ok = True

    def check(good, what):
        nonlocal ok
        ok &= bool(good)
        print(f"{'ok  ' if good else 'FAIL'} {what}")

    with tempfile.TemporaryDirectory() as tmp:
        ck = args.checkpoint
        if not ck:
            tokens = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint16)
            tokens.tofile(os.path.join(tmp, "tok.bin"))
            ck = os.path.join(tmp, "ck")
            subprocess.run([args.tlm, "train", "--device", "cpu", "--model", "tiny", "--vocab-size", "256",
                            "--train-data", os.path.join(tmp, "tok.bin"), "--steps", "6", "--batch-size", "4",
                            "--context-length", "32", "--save-every", "6", "--checkpoint-dir", ck],
                           check=True, capture_output=True)
        d = step_dir(ck)
        weights, meta = read_safetensors(os.path.join(d, "weights.safetensors"))
        cfg = LMConfig(vocab_size=int(meta["vocab_size"]), context_length=int(meta["context_length"]),
                       d_model=int(meta["d_model"]), num_layers=int(meta["num_layers"]),
                       num_heads=int(meta["num_heads"]), d_ff=int(meta["d_ff"]),
                       rope_theta=float(meta["rope_theta"]), rmsnorm_eps=float(meta["rmsnorm_eps"]))
        model = TransformerLM(cfg)
        missing = model.load_state_dict(weights, strict=True)  # raises on any missing or unexpected name
        check(not missing.missing_keys and not missing.unexpected_keys,
              f"tlm -> PyTorch: {d}/weights.safetensors loads with load_state_dict(strict=True) "
              f"({len(weights)} tensors, {cfg.num_params()} parameters, config from the metadata)")

        moments, ometa = read_safetensors(os.path.join(d, "optimizer.safetensors"))
        opt = AdamW(model.parameters())
        names = dict(model.named_parameters())
        t = int(ometa["step"])
        for name, prm in names.items():
            opt.state[prm] = {"t": t, "m": moments.pop(f"exp_avg.{name}"), "v": moments.pop(f"exp_avg_sq.{name}")}
        shapes_ok = all(opt.state[prm]["m"].shape == prm.shape and opt.state[prm]["v"].shape == prm.shape
                        and bool((opt.state[prm]["v"] >= 0).all()) for prm in names.values())
        check(not moments and shapes_ok and t >= 1,
              f"tlm -> PyTorch: optimizer.safetensors holds exp_avg/exp_avg_sq for exactly the {len(names)} "
              f"parameters, their shapes, v >= 0, AdamW step {t}")

        B, T = 2, min(32, cfg.context_length)
        g = np.random.default_rng(1)
        x = g.integers(0, cfg.vocab_size, (B, T), dtype=np.int64)
        y = g.integers(0, cfg.vocab_size, (B, T), dtype=np.int64)
        xp, yp = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        np.save(xp, x)
        np.save(yp, y)
        with torch.no_grad():
            lt = cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
        lc = tlm_loss(args.tlm, os.path.join(d, "weights.safetensors"), xp, yp)
        check(abs(lt - lc) <= 1e-5 * abs(lt), f"tlm -> PyTorch: the loss on a batch: PyTorch {lt:.7f}, tlm step "
                                              f"{lc:.7f} (rel {abs(lt - lc) / abs(lt):.1e})")
        # a step of the loaded optimizer runs (the state is one AdamW takes)
        loss = cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        check(all(opt.state[prm]["t"] == t + 1 for prm in names.values()),
              f"tlm -> PyTorch: the CS336 AdamW takes step {t + 1} from the loaded moments")

        torch_model = TransformerLM(cfg)  # fresh init, PyTorch's
        tw = os.path.join(tmp, "torch.safetensors")
        write_safetensors(tw, torch_model.state_dict())
        with torch.no_grad():
            lt2 = cross_entropy(torch_model(torch.from_numpy(x)), torch.from_numpy(y)).item()
        lc2 = tlm_loss(args.tlm, tw, xp, yp, ("--num-heads", str(cfg.num_heads),
                                              "--max-context-length", str(cfg.context_length)))
        check(abs(lt2 - lc2) <= 1e-5 * abs(lt2), f"PyTorch -> tlm: a PyTorch state_dict (no tlm metadata) read by "
                                                 f"tlm step: PyTorch {lt2:.7f}, tlm {lc2:.7f}")
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
