#!/usr/bin/env python3
"""pytorch_attention.py — the PyTorch peer of `tlm attention` (docs/experiments.md; CS336 assignment 2,
pytorch_attention, flash_benchmarking and the leaderboard setting).

Implementations (--impl, comma list; default all):
  naive       softmax(Q K^T / sqrt(d) masked) V, written out as CS336's scaled_dot_product_attention
  compile     torch.compile of naive
  sdpa-flash  F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.FLASH_ATTENTION)
  sdpa-cudnn  the same under SDPBackend.CUDNN_ATTENTION
  sdpa-math   the same under SDPBackend.MATH (the reference; the one that runs everywhere)
A backend PyTorch cannot use for the case (cuDNN on the CPU, flash for an unsupported dtype or
d_head) gives a row with status "unavailable" and the reason.

Same suites and flags as tlm: random normal q, k, v, dout (B, H, S, D) (seeded); --warmup
forward+backward passes, then --iters timed forward passes and --iters timed backward passes
(backward of the last forward's graph, retain_graph), each synchronized; mean ms.
TFLOP/s in FlashAttention's convention: forward 4*b*h*s^2*d (halved when causal), backward 2.5x.
mem_before_bwd_bytes = torch.cuda.memory_allocated() after the forward, before the backward (CUDA
only; null on the CPU). An out-of-memory is a row with status "OOM" and PyTorch's message.

  python3 bench/peers/pytorch_attention.py --device cuda --suite leaderboard --format json --out r.json
  python3 bench/peers/pytorch_attention.py --device cpu --context-length 64,128 --d-head 16 --iters 2
"""

import argparse
import datetime
import math
import platform
import sys
import time

import torch
import torch.nn.functional as F

from common import int_list, write_results

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # PyTorch < 2.3
    SDPBackend = sdpa_kernel = None

IMPLS = ["naive", "compile", "sdpa-flash", "sdpa-cudnn", "sdpa-math"]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

SUITES = {
    # CS336 pytorch_attention: batch 8, no head dimension (one head), causal as tlm runs it
    "pytorch-attention": dict(batch=8, heads=1, seq=[256, 1024, 4096, 8192, 16384], d_head=[16, 32, 64, 128],
                              dtype=["fp32"], iters=100, warmup=10),
    "flash-benchmarking": dict(batch=1, heads=1, seq=[2 ** i for i in range(7, 17)], d_head=[16, 32, 64, 128],
                               dtype=["bf16", "fp32"], iters=100, warmup=10),
    "leaderboard": dict(batch=1, heads=16, seq=[16384], d_head=[64], dtype=["bf16"], iters=100, warmup=10),
}
DEFAULTS = dict(batch=1, heads=1, seq=[256, 1024], d_head=[64], dtype=["fp32"], iters=10, warmup=2)


def naive_attention(q, k, v, causal: bool):
    """softmax(q k^T / sqrt(d), masked to -inf where key j > query i) v."""
    d = q.shape[-1]
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


_compiled = None


def make_fn(impl: str, causal: bool):
    global _compiled
    if impl == "naive":
        return lambda q, k, v: naive_attention(q, k, v, causal)
    if impl == "compile":
        if _compiled is None:
            try:  # the timed backward passes reuse one graph (retain_graph): no donated buffers
                import torch._functorch.config as functorch_config
                functorch_config.donated_buffer = False
            except (ImportError, AttributeError):
                pass
            _compiled = torch.compile(naive_attention)
        return lambda q, k, v: _compiled(q, k, v, causal)
    if sdpa_kernel is None:
        raise RuntimeError("torch.nn.attention.sdpa_kernel needs PyTorch >= 2.3")
    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa-math": SDPBackend.MATH}[impl]

    def fn(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return fn


def flops_forward(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def is_oom(e: BaseException) -> bool:
    return isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in str(e).lower()


def run_case(dev, impl, b, h, s, d, dtype_name, causal, iters, warmup, seed):
    row = dict(tool="pytorch", impl=impl, batch_size=b, num_heads=h, context_length=s, d_head=d, dtype=dtype_name,
               causal=causal, fwd_ms_mean=None, bwd_ms_mean=None, fwdbwd_ms_mean=None, fwd_tflop_per_s=None,
               bwd_tflop_per_s=None, mem_before_bwd_bytes=None, status="ok", error=None)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if impl == "sdpa-cudnn" and not cuda:
        row.update(status="unavailable", error="cuDNN attention: CUDA only")
        return row
    tensors = []
    try:
        g = torch.Generator(device="cpu").manual_seed(seed)
        dt = DTYPES[dtype_name]
        q, k, v, dout = (torch.randn(b, h, s, d, generator=g).to(device=dev, dtype=dt) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        tensors = [q, k, v, dout]
        fn = make_fn(impl, causal)
        for _ in range(warmup):
            fn(q, k, v).backward(dout)
        q.grad = k.grad = v.grad = None
        sync()
        fwd = 0.0
        out = None
        for _ in range(iters):
            out = None  # free the previous forward's graph first, as tlm reuses its buffers
            t0 = time.perf_counter()
            out = fn(q, k, v)
            sync()
            fwd += time.perf_counter() - t0
        if cuda:
            row["mem_before_bwd_bytes"] = torch.cuda.memory_allocated()
        bwd = 0.0
        for _ in range(iters):
            q.grad = k.grad = v.grad = None
            t0 = time.perf_counter()
            out.backward(dout, retain_graph=True)
            sync()
            bwd += time.perf_counter() - t0
        fwd_ms, bwd_ms = fwd * 1e3 / iters, bwd * 1e3 / iters
        ff = flops_forward(b, h, s, d, causal)
        row.update(fwd_ms_mean=fwd_ms, bwd_ms_mean=bwd_ms, fwdbwd_ms_mean=fwd_ms + bwd_ms,
                   fwd_tflop_per_s=ff / (fwd_ms * 1e9) if fwd_ms > 0 else None,
                   bwd_tflop_per_s=2.5 * ff / (bwd_ms * 1e9) if bwd_ms > 0 else None)
    except Exception as e:  # noqa: BLE001 -- every failure becomes a row, the sweep goes on
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if is_oom(e):
            row.update(status="OOM", error=msg[:300])
        elif impl.startswith("sdpa-") and ("No available kernel" in str(e) or "not supported" in str(e).lower()):
            row.update(status="unavailable", error=msg[:300])
        else:
            row.update(status="failed", error=f"{type(e).__name__}: {msg[:300]}")
    finally:
        del tensors
        if cuda:
            torch.cuda.empty_cache()
    return row


def d_list(text):
    vals = int_list(text)
    bad = [x for x in vals if x < 2 or x % 2]
    if bad:
        raise argparse.ArgumentTypeError(f"d_head {bad[0]}: must be even and >= 2")
    return vals


def name_list(known):
    def parse(text):
        vals = text.split(",")
        for x in vals:
            if x not in known:
                raise argparse.ArgumentTypeError(f"unknown '{x}' (known: {', '.join(known)})")
        return vals
    return parse


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=sorted(SUITES), help="preset sizes (flags override; default: none)")
    p.add_argument("--batch-size", type=positive, help="batch (default: 1; suites: theirs)")
    p.add_argument("--heads", type=positive, help="heads (default: 1)")
    p.add_argument("--context-length", type=int_list, help="comma list of sequence lengths (default: 256,1024)")
    p.add_argument("--d-head", type=d_list, help="comma list of head sizes, even (default: 64)")
    p.add_argument("--dtype", type=name_list(list(DTYPES)), help="comma list of fp32, bf16, fp16 (default: fp32)")
    p.add_argument("--causal", choices=["on", "off"], default="on", help="causal mask (default: on)")
    p.add_argument("--impl", type=name_list(IMPLS), default=IMPLS,
                   help=f"comma list of {', '.join(IMPLS)} (default: all)")
    p.add_argument("--iters", type=positive, help="timed forward and backward passes (default: 10; suites 100)")
    p.add_argument("--warmup", type=int, help="warm-up forward+backward passes (default: 2; suites 10)")
    p.add_argument("--max-seq", type=positive,
                   help="skip rows with seq > N (default: 1024 on the CPU with a --suite, else none)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu | cuda")
    p.add_argument("--threads", type=positive, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--seed", type=int, default=0, help="input seed (default: 0)")
    p.add_argument("--format", choices=["table", "json"], default="table", help="(default: table)")
    p.add_argument("--out", help="write the results, in --format, to this file")
    a = p.parse_args(argv)

    cfg = dict(SUITES[a.suite]) if a.suite else dict(DEFAULTS)
    for key, val in (("batch", a.batch_size), ("heads", a.heads), ("seq", a.context_length), ("d_head", a.d_head),
                     ("dtype", a.dtype), ("iters", a.iters), ("warmup", a.warmup)):
        if val is not None:
            cfg[key] = val
    if cfg["warmup"] < 0:
        p.error("--warmup must be >= 0")
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no GPU visible to PyTorch")
    max_seq = a.max_seq if a.max_seq else (1024 if dev.type == "cpu" and a.suite else None)
    causal = a.causal == "on"

    if dev.type == "cuda":
        desc = f"cuda: {torch.cuda.get_device_name(dev)}"
    else:
        desc = f"cpu ({torch.get_num_threads()} threads, {platform.processor() or platform.machine()})"
    header = dict(tool="pytorch_attention.py", torch=torch.__version__, device=desc,
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                  suite=a.suite, warmup=cfg["warmup"], iters=cfg["iters"], seed=a.seed,
                  flops="FlashAttention's convention: forward 4*b*h*s^2*d (halved when causal), backward 2.5x "
                        "forward, over the mean time of that pass",
                  memory="torch.cuda.memory_allocated() after the forward, before the backward (CUDA only)")
    rows = []
    for dtype_name in cfg["dtype"]:
        for d in cfg["d_head"]:
            for s in cfg["seq"]:
                for impl in a.impl:
                    if max_seq and s > max_seq:
                        r = dict(tool="pytorch", impl=impl, batch_size=cfg["batch"], num_heads=cfg["heads"],
                                 context_length=s, d_head=d, dtype=dtype_name, causal=causal, fwd_ms_mean=None,
                                 bwd_ms_mean=None, fwdbwd_ms_mean=None, fwd_tflop_per_s=None, bwd_tflop_per_s=None,
                                 mem_before_bwd_bytes=None, status="skipped",
                                 error=f"seq > --max-seq ({max_seq}) on {dev.type}")
                    else:
                        r = run_case(dev, impl, cfg["batch"], cfg["heads"], s, d, dtype_name, causal,
                                     cfg["iters"], cfg["warmup"], a.seed)
                    rows.append(r)
                    if a.format == "table" or a.out:
                        print(fmt_row(r), flush=True)
    write_results(header, rows, fmt_row, a.format, a.out)
    return 0


def fmt_row(r):
    head = (f"{r['impl']:<10} {r['batch_size']:5d} {r['num_heads']:5d} {r['context_length']:6d} {r['d_head']:4d} {r['dtype']:<5} "
            f"{'yes' if r['causal'] else 'no':<6} ")
    if r["status"] != "ok":
        return head + f"{r['status']}: {r.get('error') or ''}"
    mem = "-" if r["mem_before_bwd_bytes"] is None else f"{r['mem_before_bwd_bytes'] / 2**20:.1f}"
    return head + (f"{r['fwd_ms_mean']:10.3f} {r['bwd_ms_mean']:10.3f} {r['fwdbwd_ms_mean']:10.3f} "
                   f"{r['fwd_tflop_per_s']:8.3f} {r['bwd_tflop_per_s']:8.3f} {mem:>10}")


if __name__ == "__main__":
    sys.exit(main())
