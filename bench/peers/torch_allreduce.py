#!/usr/bin/env python3
"""torch_allreduce.py — the PyTorch peer of `tlm allreduce` (docs/experiments.md; CS336 assignment 2's
all-reduce benchmark): torch.distributed all_reduce with the gloo backend (CPU tensors, as the seeds
measured) or nccl (one GPU per rank), the same sizes, iterations and field names.

Per size: --warmup untimed all-reduces, a barrier, then --iters back-to-back all-reduces, timed on
each rank (the host clock for gloo, CUDA events for nccl) and divided by --iters; the row's time is
the mean over the ranks (nccl-tests' default), with their min and max. algbw = bytes / time,
busbw = algbw x 2(n-1)/n (GB/s = 10^9 bytes/s; nccl-tests' doc/PERFORMANCE.md). torch.distributed's
all_reduce works in place, so every row is in_place = true (compare with tlm's in-place rows).
avg on gloo (which has no ReduceOp.AVG) is the sum, then a division, inside the timed loop (as tlm's
MPI communicator does it). --check fills rank r's tensor with tlm's pattern ((7i + 13r) mod m) + 1
(m = 17, or max(2, min(17, 256 / n)) for bf16), runs one all-reduce, and counts the elements of
every rank that differ from the expected sum (avg: by more than n ulps).

Processes: started here with torch.multiprocessing for each count of --nproc (default 2), or by
torchrun (then RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT come from it and --nproc
is not used). One JSON (--format json --out FILE) holds every row.

  python3 bench/peers/torch_allreduce.py --backend gloo --nproc 2,4 --sizes 1MB,10MB,100MB,1GB --format json --out g.json
  torchrun --nproc-per-node 2 bench/peers/torch_allreduce.py --backend nccl --sizes 1GB
"""

import argparse
import datetime
import os
import platform
import re
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import int_list, write_results

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SEEDS_SIZES = "1MB,10MB,100MB,1GB"
TIME_NOTE = ("the mean over the ranks of each rank's mean time per all-reduce: --iters back-to-back all-reduces "
             "after --warmup untimed ones and a barrier (host clock for gloo, CUDA events for nccl); min and max "
             "over the ranks")
BUSBW_NOTE = ("algbw = bytes / time, busbw = algbw x 2(n-1)/n for n ranks; GB/s = 10^9 bytes/s (nccl-tests, "
              "doc/PERFORMANCE.md); bytes per rank")


def parse_bytes(text):
    """'1MB' -> 10^6, '64K' -> 2^16, '1G' -> 2^30, '4096' -> 4096 (tlm's and nccl-tests' suffixes)."""
    m = re.fullmatch(r"(\d+)(K|M|G|KB|MB|GB)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (a number with K, M, G, KB, MB or GB)")
    scale = {None: 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9}[m.group(2)]
    v = int(m.group(1)) * scale
    if v < 1:
        raise argparse.ArgumentTypeError(f"size '{text}' must be at least 1 byte")
    return v


def size_list(text):
    return [parse_bytes(t) for t in text.split(",")]


def pattern_modulus(dtype, n):
    return 17 if dtype == "fp32" else max(2, min(17, 256 // n))


def pattern_block(rank, dtype, n):
    """the pattern of elements 0..m-1 of `rank` (it repeats with period m)"""
    m = pattern_modulus(dtype, n)
    return torch.tensor([((7 * i + 13 * rank) % m) + 1 for i in range(m)], dtype=torch.float64)


def tiled(block, count, dtype, device):
    reps = (count + block.numel() - 1) // block.numel()
    return block.to(DTYPES[dtype]).repeat(reps)[:count].to(device)


def count_wrong(t, dtype, op, n):
    m = pattern_modulus(dtype, n)
    want = sum(pattern_block(r, dtype, n) for r in range(n))
    if op == "avg":
        want = want / n
    want = want.to(DTYPES[dtype]).to(torch.float64)
    if op == "avg":  # n ulps of the dtype at the expected value
        mant = 8 if dtype == "bf16" else 24
        tol = n * torch.ldexp(torch.ones_like(want), torch.frexp(want.abs())[1] - mant)
    else:
        tol = torch.zeros_like(want)
    count = t.numel()
    full = count - count % m
    wrong = 0
    chunk = m * (1 << 20)  # bounded host memory for 1 GB tensors
    for start in range(0, full, chunk):
        got = t[start:min(full, start + chunk)].to(torch.float64).view(-1, m).cpu()
        wrong += int(((got - want).abs() > tol).sum() + torch.isnan(got).sum())
    if full < count:
        got = t[full:].to(torch.float64).cpu()
        wrong += int(((got - want[:count - full]).abs() > tol[:count - full]).sum() + torch.isnan(got).sum())
    return wrong


def all_reduce(t, op, n):
    if op == "avg" and dist.get_backend() != "nccl":
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t.div_(n)
    else:
        dist.all_reduce(t, op=dist.ReduceOp.AVG if op == "avg" else dist.ReduceOp.SUM)


def run_size(size, a, rank, n, device):
    es = torch.tensor([], dtype=DTYPES[a.dtype]).element_size()
    count = size // es
    row = dict(backend=a.backend, nranks=n, bytes=count * es, count=count, dtype=a.dtype, op=a.op, in_place=True,
               time_us_mean=None, time_us_min=None, time_us_max=None, algbw_gb_per_s=None, busbw_gb_per_s=None,
               wrong=None, status="ok", error=None)
    ok = torch.ones(1, dtype=torch.int64, device=device)
    t = None
    try:
        block = pattern_block(rank, a.dtype, n)
        t = tiled(block, count, a.dtype, device)
    except (RuntimeError, MemoryError) as e:  # out of memory on this rank: every rank must learn it
        ok.zero_()
        row.update(status="OOM", error=f"rank {rank}: {str(e).splitlines()[0]}")
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if int(ok) == 0:
        if row["status"] == "ok":
            row.update(status="OOM", error="another rank ran out of memory")
        return row
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if a.check == "on":
        all_reduce(t, a.op, n)
        sync()
        wrong = torch.tensor([count_wrong(t, a.dtype, a.op, n)], dtype=torch.int64, device=device)
        dist.all_reduce(wrong)
        row["wrong"] = int(wrong)
        t.copy_(tiled(block, count, a.dtype, device))
    for _ in range(a.warmup):
        all_reduce(t, a.op, n)
    sync()
    dist.barrier()
    if device.type == "cuda":
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(a.iters):
            all_reduce(t, a.op, n)
        e1.record()
        e1.synchronize()
        us = e0.elapsed_time(e1) * 1e3 / a.iters
    else:
        t0 = time.perf_counter()
        for _ in range(a.iters):
            all_reduce(t, a.op, n)
        us = (time.perf_counter() - t0) * 1e6 / a.iters
    times = torch.zeros(n, dtype=torch.float64, device=device)
    times[rank] = us
    dist.all_reduce(times)
    times = times.cpu().tolist()
    mean = sum(times) / n
    algbw = row["bytes"] / (mean * 1e3)
    row.update(time_us_mean=mean, time_us_min=min(times), time_us_max=max(times), algbw_gb_per_s=algbw,
               busbw_gb_per_s=algbw * 2 * (n - 1) / n)
    if row["wrong"]:
        row.update(status="WRONG", error=f"{row['wrong']} elements differ from the expected")
    return row


def worker(rank, n, a, sizes, result_queue):
    """one rank: torch.multiprocessing's (result_queue given) or torchrun's"""
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if a.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(a.backend, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=a.timeout))
    rows = [run_size(s, a, rank, n, device) for s in sizes]
    hosts = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        info = dict(hosts=hosts, device=(torch.cuda.get_device_name(device) if device.type == "cuda" else
                                         f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores"))
        if result_queue is not None:
            result_queue.put((rows, info))
        return rows, info
    return None, None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fmt_row(r):
    head = f"{r['backend']:<7} {r['nranks']:5d} {r['bytes'] or 0:12d} {r['count'] or 0:11d} {r['dtype']:>5} {r['op']:>5} "
    if r["status"] not in ("ok", "WRONG"):
        return head + f"{r['status']}: {r.get('error') or ''}"
    wrong = "-" if r["wrong"] is None else str(r["wrong"])
    line = (head + f"{'yes':>8} {r['time_us_mean']:11.1f} {r['time_us_min']:11.1f} {r['time_us_max']:11.1f} "
            f"{r['algbw_gb_per_s']:8.2f} {r['busbw_gb_per_s']:8.2f} {wrong:>7}")
    return line + (f" {r['status']}: {r['error']}" if r["status"] != "ok" else "")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo", help="(default: gloo)")
    p.add_argument("--nproc", type=int_list, default=[2], help="comma list of process counts (default: 2)")
    p.add_argument("--sizes", type=size_list, help=f"comma list of sizes per rank (default: {SEEDS_SIZES})")
    p.add_argument("-b", "--minbytes", type=parse_bytes, help="smallest size of a -b/-e/-F sweep (default: 32M)")
    p.add_argument("-e", "--maxbytes", type=parse_bytes, help="largest size (default: max(minbytes, 32M))")
    p.add_argument("-F", "--stepfactor", type=int, help="multiply the size by F (default: 2)")
    p.add_argument("-T", "--dtype", choices=list(DTYPES), default="fp32", help="(default: fp32)")
    p.add_argument("--op", choices=["sum", "avg"], default="sum", help="(default: sum)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed all-reduces per size (default: 20)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed all-reduces first (default: 5)")
    p.add_argument("-c", "--check", choices=["on", "off"], default="on", help="check every element (default: on)")
    p.add_argument("--timeout", type=float, default=600, help="torch.distributed's timeout, s (default: 600)")
    p.add_argument("-f", "--format", choices=["table", "json"], default="table", help="(default: table)")
    p.add_argument("-o", "--out", help="write the results, in --format, to this file")
    a = p.parse_args(argv)
    if a.iters < 1 or a.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if a.sizes and (a.minbytes or a.maxbytes or a.stepfactor):
        p.error("--sizes conflicts with -b/-e/-F: give a list or a range")
    if a.minbytes or a.maxbytes or a.stepfactor:
        lo = a.minbytes or min(a.maxbytes or 32 << 20, 32 << 20)
        hi = a.maxbytes or max(lo, 32 << 20)
        f = a.stepfactor or 2
        if lo > hi or f < 2:
            p.error("-b must be <= -e and -F >= 2")
        sizes, s = [], lo
        while s <= hi:
            sizes.append(s)
            s *= f
    else:
        sizes = a.sizes or size_list(SEEDS_SIZES)
    es = torch.tensor([], dtype=DTYPES[a.dtype]).element_size()
    if any(s < es for s in sizes):
        p.error(f"a size is less than one {a.dtype} element ({es} bytes)")

    header = dict(tool="torch_allreduce.py", torch=torch.__version__, backend=a.backend,
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                  dtype=a.dtype, op=a.op, warmup=a.warmup, iters=a.iters, check=a.check == "on",
                  command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), time=TIME_NOTE, busbw=BUSBW_NOTE)
    if a.backend == "nccl":
        header["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    rows, runs = [], []
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if under_torchrun:
        rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        got, info = worker(rank, n, a, sizes, None)
        if rank != 0:
            return 0
        rows += got
        runs.append(dict(nranks=n, **info))
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        gpus = torch.cuda.device_count()
        for n in a.nproc:
            if a.backend == "nccl" and n > gpus:
                rows.append(dict(backend=a.backend, nranks=n, bytes=None, count=None, dtype=a.dtype, op=a.op,
                                 in_place=True, time_us_mean=None, time_us_min=None, time_us_max=None,
                                 algbw_gb_per_s=None, busbw_gb_per_s=None, wrong=None, status="skipped",
                                 error=f"{n} processes need {n} GPUs (one per rank); {gpus} visible"))
                continue
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(free_port())
            ctx = mp.get_context("spawn")
            q = ctx.SimpleQueue()
            mp.start_processes(worker, args=(n, a, sizes, q), nprocs=n, join=True, start_method="spawn")
            got, info = q.get()
            rows += got
            runs.append(dict(nranks=n, **info))
    header["runs"] = runs
    header["device"] = runs[0]["device"] if runs else None
    for r in rows:
        if a.format == "table" or a.out:
            print(fmt_row(r), flush=True)
    ok_rows = [r for r in rows if r["status"] in ("ok", "WRONG")]
    wrong = sum(r["wrong"] or 0 for r in rows)
    header["summary"] = dict(busbw_gb_per_s_avg=(sum(r["busbw_gb_per_s"] for r in ok_rows) / len(ok_rows)
                                                 if ok_rows else 0.0),
                             wrong=wrong, result="FAILED (wrong results)" if wrong else "OK")
    write_results(header, rows, fmt_row, a.format, a.out)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
