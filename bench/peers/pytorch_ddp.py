#!/usr/bin/env python3
"""pytorch_ddp.py — the PyTorch peer of `mpirun -np N tlm bench --ddp ...`: the CS336 model
(bench/peers/pytorch_lm.py) trained data-parallel with torch.distributed over NCCL, one process per
GPU, timed the way tlm bench times a step.

Per configuration (model x precision x processes x bucket size x gradient dtype x ZeRO) it spawns
--nproc processes (torch.multiprocessing, NCCL over 127.0.0.1), each with its rows of the global batch
(--batch-size-per-rank rows a rank, as in the issue's "per-rank batch 4"):
  1 process   the single-GPU baseline: no DDP (the step the issue's ratios divide by);
  N processes torch.nn.parallel.DistributedDataParallel (bucket_cap_mb = --bucket-mb, PyTorch's
              overlapped, bucketed all-reduce; gradient_as_bucket_view), with --grad-reduce-dtype bf16
              the bf16_compress_hook (cast, all-reduce avg, cast back: what tlm's bf16 reduction does),
              with --zero 1 torch.distributed.optim.ZeroRedundancyOptimizer (AdamW state sharded; DDP
              still all-reduces, then the parameters are broadcast by their owners).
The optimizer is torch.optim.AdamW(fused=True) (ZeRO: its shard's, foreach), decoupled weight decay
0.01, lr 1e-3, the same hyperparameters as tlm's CS336 AdamW. Precision: fp32 (strict: TF32 off) or
bf16 (torch.autocast, fp32 master weights and gradients).

Timing, as tlm bench: warm-up steps, then timed steps, each phase between torch.cuda.synchronize()
calls on every rank: forward (loss), backward (DDP's all-reduces run inside it, overlapped), optimizer
(ZeRO: its update and broadcast); with --grad-accum-steps N an optimizer step is N micro-batches of the
same rows (the loss divided by N; DDP's no_sync in all but the last), forward and backward summed over
them; step = their sum, the mean over the timed steps, the largest over the
ranks. Memory (torch.cuda.max_memory_allocated, the largest over the ranks): after the model and
optimizer are built, right before and right after the last optimizer step, and the peak; the
optimizer state's bytes (AdamW's exp_avg and exp_avg_sq held by this rank).

  python3 bench/peers/pytorch_ddp.py --model xl --context-length 256 --batch-size-per-rank 4 \\
      --precision fp32,bf16 --nproc 1,2 --bucket-mb 25 --out torch-ddp.json

Output: a JSON object {"tool": "pytorch_ddp.py", "rows": [...]} whose rows use tlm bench's field names
(model, context_length, batch_size (global), precision, ranks, ddp ("pytorch" or "none"), bucket_mb,
grad_reduce_dtype, zero, grad_accum_steps, fwd_ms_mean, bwd_ms_mean, opt_ms_mean, step_ms_mean, comm_ms_mean (null:
PyTorch's overlap leaves no phase of its own), tokens_per_s, peak_bytes, mem_after_init_bytes,
mem_before_opt_bytes, mem_after_opt_bytes, peak_bytes_optimizer, status, error); a table on stdout.
"""

import argparse
import contextlib
import datetime
import itertools
import json
import os
import socket
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_lm import TransformerLM, cross_entropy, make_config, set_precision  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def optimizer_bytes(opt) -> int:
    """bytes of the optimizer state this rank holds (exp_avg, exp_avg_sq; ZeRO: its shard's)"""
    inner = getattr(opt, "optim", opt)  # ZeroRedundancyOptimizer keeps the local optimizer in .optim
    n = 0
    for st in inner.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.numel() > 1:
                n += v.numel() * v.element_size()
    return n


def worker(rank, cfg, port, result_path):
    n = cfg["ranks"]
    dev = cfg["device"]
    cuda = dev == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    allocated = torch.cuda.memory_allocated if cuda else (lambda: 0)
    row = {k: cfg[k] for k in ("model", "context_length", "precision", "ranks", "bucket_mb", "grad_reduce_dtype",
                               "zero", "grad_accum_steps")}
    row.update(ddp="pytorch" if n > 1 else "none", batch_size=cfg["batch_per_rank"] * n, comm_ms_mean=None)
    try:
        if n > 1:
            extra = dict(device_id=torch.device("cuda", rank)) if cuda else {}
            dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=n, **extra)
        if not cuda:  # the host's cores divided among the processes, as tlm's ranks divide them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
        set_precision(cfg["precision"], dev)
        torch.manual_seed(cfg["seed"])
        T, B = cfg["context_length"], cfg["batch_per_rank"]
        mcfg = make_config(cfg["model"], context_length=T)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        model = TransformerLM(mcfg, attention=cfg["attention"], device=dev)
        net = model
        if n > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP
            net = DDP(model, device_ids=[rank] if cuda else None, bucket_cap_mb=cfg["bucket_mb"], gradient_as_bucket_view=True)
            if cfg["grad_reduce_dtype"] == "bf16":
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
                net.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
        hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        if cfg["zero"]:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.AdamW, foreach=True, **hp)
        else:
            opt = torch.optim.AdamW(net.parameters(), **({"fused": True} if cuda else {"foreach": True}), **hp)
        g = torch.Generator(device="cpu").manual_seed(cfg["seed"] * 1000 + rank)
        x = torch.randint(0, mcfg.vocab_size, (B, T), generator=g).to(dev)
        y = torch.randint(0, mcfg.vocab_size, (B, T), generator=g).to(dev)
        amp = (torch.autocast(device_type=dev, dtype=torch.bfloat16) if cfg["precision"] == "bf16"
               else torch.autocast(device_type=dev, enabled=False))
        mem_init = allocated()
        times = {"fwd": [], "bwd": [], "opt": []}
        before = after = 0
        accum = cfg["grad_accum_steps"]
        for i in range(cfg["warmup"] + cfg["steps"]):
            t_fwd = t_bwd = 0.0
            for k in range(accum):  # nanoGPT's loop: DDP reduces only in the last micro-batch's backward (no_sync)
                quiet = net.no_sync() if n > 1 and k < accum - 1 else contextlib.nullcontext()
                with quiet:
                    sync()
                    t0 = time.perf_counter()
                    with amp:
                        loss = cross_entropy(net(x), y) / accum
                    sync()
                    t1 = time.perf_counter()
                    loss.backward()
                    sync()
                    t2 = time.perf_counter()
                t_fwd += t1 - t0
                t_bwd += t2 - t1
            before = allocated()
            opt.step()
            opt.zero_grad(set_to_none=False)  # DDP's bucket views stay
            sync()
            t3 = time.perf_counter()
            after = allocated()
            loss = None
            if i >= cfg["warmup"]:
                for k, v in (("fwd", t_fwd), ("bwd", t_bwd), ("opt", t3 - t2)):
                    times[k].append(v * 1e3)
        mine = [np.mean(times["fwd"]), np.mean(times["bwd"]), np.mean(times["opt"]),
                torch.cuda.max_memory_allocated() if cuda else 0, mem_init, before, after, optimizer_bytes(opt)]
        vals = torch.tensor(mine, dtype=torch.float64, device=dev)
        if n > 1:  # the largest over the ranks
            dist.all_reduce(vals, op=dist.ReduceOp.MAX)
        fwd, bwd, upd, peak, init, bef, aft, optb = vals.tolist()
        row.update(fwd_ms_mean=fwd, bwd_ms_mean=bwd, opt_ms_mean=upd, step_ms_mean=fwd + bwd + upd,
                   peak_bytes=int(peak), mem_after_init_bytes=int(init), mem_before_opt_bytes=int(bef),
                   mem_after_opt_bytes=int(aft), peak_bytes_optimizer=int(optb), status="ok", error="")
        row["tokens_per_s"] = row["batch_size"] * T * accum / (row["step_ms_mean"] / 1e3)
    except (torch.cuda.OutOfMemoryError, MemoryError) as e:
        row.update(status="OOM", error=str(e).splitlines()[0])
    except Exception as e:  # noqa: BLE001 — the row says what failed; the sweep goes on
        row.update(status="failed", error=f"{type(e).__name__}: {e}")
        traceback.print_exc()
    finally:
        if n > 1 and dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(row, f)


def csv_list(s, conv=str):
    return [conv(v) for v in s.split(",") if v]


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch DDP peer of tlm bench's data-parallel rows.")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: gloo on host processes (a smoke test of this script; no GPU timing)")
    p.add_argument("--model", default="xl")
    p.add_argument("--context-length", type=int, default=256)
    p.add_argument("--batch-size-per-rank", type=int, default=4)
    p.add_argument("--precision", default="fp32,bf16")
    p.add_argument("--nproc", default="1,2", help="processes (GPUs) per run, comma list; 1: no DDP")
    p.add_argument("--bucket-mb", default="25", help="DDP bucket_cap_mb values, comma list")
    p.add_argument("--grad-reduce-dtype", default="fp32", help="fp32,bf16 (bf16: bf16_compress_hook)")
    p.add_argument("--zero", default="0", help="0,1 (1: ZeroRedundancyOptimizer)")
    p.add_argument("--attention", choices=("naive", "sdpa"), default="naive")
    p.add_argument("--grad-accum-steps", type=int, default=1,
                   help="micro-batches an optimizer step (nanoGPT's gradient_accumulation_steps; DDP's no_sync)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the JSON here (through a temporary file)")
    args = p.parse_args(argv)
    gpus = torch.cuda.device_count() if args.device == "cuda" else os.cpu_count()
    rows = []
    grid = itertools.product(csv_list(args.precision), csv_list(args.nproc, int), csv_list(args.bucket_mb, float),
                             csv_list(args.grad_reduce_dtype), csv_list(args.zero, int))
    seen = set()
    print(f"{'prec':5} {'ranks':>5} {'bucket':>7} {'reduce':6} {'zero':>4} {'forward':>9} {'backward':>9} "
          f"{'optimizer':>9} {'step':>9} {'tokens/s':>10} {'peak GiB':>8} {'opt GiB':>8}")
    for prec, n, bucket, rdt, zero in grid:
        if n == 1:
            bucket, rdt, zero = 0.0, "fp32", 0  # the baseline has none of these
        key = (prec, n, bucket, rdt, zero)
        if key in seen:
            continue
        seen.add(key)
        cfg = dict(model=args.model, context_length=args.context_length, precision=prec, ranks=n, bucket_mb=bucket,
                   grad_reduce_dtype=rdt, zero=zero, batch_per_rank=args.batch_size_per_rank, seed=args.seed,
                   attention=args.attention, grad_accum_steps=args.grad_accum_steps, warmup=args.warmup, steps=args.steps, device=args.device)
        if n > gpus and args.device == "cuda":
            row = dict(cfg, status="skipped", error=f"{n} processes need {n} GPUs, {gpus} here")
        else:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
                path = tmp.name
            try:
                mp.spawn(worker, args=(cfg, free_port(), path), nprocs=n, join=True)
                row = json.load(open(path))
            except Exception as e:  # noqa: BLE001
                row = dict(cfg, status="failed", error=str(e).splitlines()[0] if str(e) else type(e).__name__)
            finally:
                os.unlink(path)
        rows.append(row)
        if row.get("status") == "ok":
            print(f"{prec:5} {n:5d} {bucket:7.0f} {rdt:6} {zero:4d} {row['fwd_ms_mean']:9.2f} {row['bwd_ms_mean']:9.2f} "
                  f"{row['opt_ms_mean']:9.2f} {row['step_ms_mean']:9.2f} {row['tokens_per_s']:10.0f} "
                  f"{row['peak_bytes'] / 2**30:8.3f} {row['peak_bytes_optimizer'] / 2**30:8.3f}", flush=True)
        else:
            print(f"{prec:5} {n:5d} {bucket:7.0f} {rdt:6} {zero:4d} {row.get('status')}: {row.get('error')}", flush=True)
    doc = {"tool": "pytorch_ddp.py", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" and gpus else None,
           "device": torch.cuda.get_device_name(0) if args.device == "cuda" and gpus else "cpu (gloo)",
           "command": " ".join(sys.argv),
           "notes": "step = forward + backward (DDP's overlapped all-reduces inside) + optimizer, each between "
                    "torch.cuda.synchronize() calls, mean over the timed steps, largest over the ranks; memory: "
                    "torch.cuda.max_memory_allocated / memory_allocated, largest over the ranks",
           "rows": rows}
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, args.out)
    return 0 if all(r.get("status") in ("ok", "skipped", "OOM") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
