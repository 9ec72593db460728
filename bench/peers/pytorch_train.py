#!/usr/bin/env python3
"""pytorch_train.py — the PyTorch peer of `tlm train`: the same CS336 training recipe on the same
model (bench/peers/pytorch_lm.py), timed the same way, for the side-by-side of tokens/s and MFU.

The recipe: each step a batch of rows at random offsets of a uint16 token file (np.memmap, CS336's
get_batch), the mean cross-entropy, backward, torch.nn.utils.clip_grad_norm_ (the global L2 norm,
CS336's gradient clipping), AdamW at get_lr_cosine_schedule's learning rate, the loss read back every
step (as tlm does, for its log). --optimizer cs336 is pytorch_lm.py's CS336 AdamW (a Python loop over
the parameters); torch (default) is torch.optim.AdamW(fused=True) on CUDA (foreach on the CPU), the
form a PyTorch user trains with (it decays before the update, CS336 after: the same cost).
--precision bf16 runs under torch.autocast(bfloat16), fp32/tf32 without; --compile wraps the model in
torch.compile, --attention sdpa uses F.scaled_dot_product_attention.

Timing: wall clock of each step (host), after --warmup untimed steps; step_ms_mean over the timed
steps, tokens_per_s = batch x context / step, MFU = 3 x forward matmul FLOPs (tlm's count:
2 x tokens x (L (4 C^2 + 3 C F) + V C) + 4 L B T^2 C) / step / --peak-tflops.

  python3 bench/peers/pytorch_train.py --model small --precision bf16 --train-data tok.bin \
      --steps 60 --warmup 10 --batch-size 4 --context-length 256 --compile --attention sdpa --out r.json
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_lm import AdamW, cross_entropy, make_config, set_precision, TransformerLM  # noqa: E402


def lr_cosine_schedule(it, lr_max, lr_min, warmup, cycle):
    """CS336 get_lr_cosine_schedule (tlm: include/tlm/train.h)."""
    if it < warmup:
        return lr_max * it / warmup
    if it > cycle:
        return lr_min
    if cycle == warmup:
        return lr_max
    return lr_min + 0.5 * (1 + math.cos(math.pi * (it - warmup) / (cycle - warmup))) * (lr_max - lr_min)


def forward_flops(cfg, B, T):
    C, F, V, L = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.num_layers
    return 2.0 * B * T * (L * (4 * C * C + 3 * C * F) + V * C) + L * 4.0 * B * T * T * C


def get_batch(data, B, T, rng, device):
    starts = rng.integers(0, len(data) - T, B)
    x = np.stack([data[s:s + T] for s in starts]).astype(np.int64)
    y = np.stack([data[s + 1:s + 1 + T] for s in starts]).astype(np.int64)
    return (torch.from_numpy(x).to(device, non_blocking=True), torch.from_numpy(y).to(device, non_blocking=True))


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch peer of tlm train: the CS336 recipe, timed.")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="small")
    p.add_argument("--vocab-size", type=int, default=None, help="override the preset's vocabulary")
    p.add_argument("--train-data", required=True, help="uint16 token file (.bin, np.memmap convention)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (compilation, caches)")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="bf16")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--attention", choices=("naive", "sdpa"), default="naive")
    p.add_argument("--optimizer", choices=("torch", "cs336"), default="torch")
    p.add_argument("--lr-max", type=float, default=1e-3)
    p.add_argument("--lr-min", type=float, default=1e-4)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--peak-tflops", type=float, default=None, help="default: H100/H200 SXM dense 989 bf16, "
                   "494 tf32, 67 fp32 on CUDA; none on the CPU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the result as JSON here")
    args = p.parse_args(argv)
    dev = args.device
    cfg = make_config(args.model, context_length=max(args.context_length, make_config(args.model).context_length))
    if args.vocab_size:
        from dataclasses import replace
        cfg = replace(cfg, vocab_size=args.vocab_size)
    data = np.memmap(args.train_data, dtype=np.uint16, mode="r")
    if len(data) < args.context_length + 1:
        p.error(f"--train-data holds {len(data)} tokens: too few for context {args.context_length}")
    if int(data.max()) >= cfg.vocab_size:
        p.error(f"--train-data holds id {int(data.max())} >= vocab_size {cfg.vocab_size}")
    set_precision(args.precision, dev)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = TransformerLM(cfg, attention=args.attention, device=dev)
    fwd = torch.compile(model) if args.compile else model
    if args.optimizer == "cs336":
        opt = AdamW(model.parameters(), lr=args.lr_max)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr_max, weight_decay=0.01,
                                **({"fused": True} if dev == "cuda" else {"foreach": True}))
    amp = (torch.autocast(device_type=dev, dtype=torch.bfloat16) if args.precision == "bf16"
           else torch.autocast(device_type=dev, enabled=False))
    total = args.warmup + args.steps
    warm = max(1, total // 20)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    times, losses = [], []
    for it in range(total):
        t0 = time.perf_counter()
        lr = lr_cosine_schedule(it, args.lr_max, args.lr_min, warm, total)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(data, args.batch_size, args.context_length, rng, dev)
        with amp:
            loss = cross_entropy(fwd(x), y)
        loss.backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the loss every step, as tlm's log
        if it >= args.warmup:
            times.append(time.perf_counter() - t0)
    sync()
    step_s = float(np.mean(times))
    peak = args.peak_tflops
    if peak is None and dev == "cuda":
        name = torch.cuda.get_device_name(0)
        if "H100" in name or "H200" in name:
            pcie = "PCIe" in name
            peak = {"fp32": 51 if pcie else 67, "tf32": 378 if pcie else 494, "bf16": 756 if pcie else 989}[args.precision]
    flops = 3 * forward_flops(cfg, args.batch_size, args.context_length)
    row = dict(impl="pytorch" + ("-compile" if args.compile else "-eager"), model=args.model,
               precision=args.precision, attention=args.attention, optimizer=args.optimizer,
               batch_size=args.batch_size, context_length=args.context_length, warmup_steps=args.warmup,
               steps=args.steps, step_ms_mean=1e3 * step_s, step_ms_std=1e3 * float(np.std(times)),
               tokens_per_s=args.batch_size * args.context_length / step_s,
               mfu=flops / step_s / (peak * 1e12) if peak else None, peak_tflops=peak,
               loss_first=losses[0], loss_last=losses[-1], torch=torch.__version__,
               device=torch.cuda.get_device_name(0) if dev == "cuda" else "cpu")
    text = json.dumps(row, indent=1)
    print(text)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
