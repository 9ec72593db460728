#!/usr/bin/env python3
"""pytorch_lm.py — the CS336 (Spring 2025) BasicsTransformerLM and its AdamW in PyTorch, written
from docs/experiments.md, and the PyTorch peer of `tlm bench`.

Importable: TransformerLM, AdamW, cross_entropy, PRESETS, make_config.
Runnable:   python3 bench/peers/pytorch_lm.py --device cuda --model small,medium \
                --context-length 128,256 --pass train --precision bf16 [--compile] [--attention sdpa]

Shapes: B batch, T sequence length, V vocab_size, D d_model, F d_ff, H num_heads, Dh d_head = D/H.
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# --nvtx: the seeds' ranges, as NVTX ranges (nsys, `tlm profile --exec`) and torch.profiler
# record_function ranges of the same names: "warmup step N" / "step N", "forward", "backward",
# "optimizer", "layer N", and inside the naive attention "computing attention scores",
# "computing softmax", "final matmul" (the names tlm's own ranges have). Off: no cost.
ANNOTATE = False


class annotate:
    """with annotate("forward"): ... — an NVTX range and a record_function range when ANNOTATE."""

    def __init__(self, name: str):
        self.name, self.rf = name, None

    def __enter__(self):
        if ANNOTATE:
            torch.cuda.nvtx.range_push(self.name)
            self.rf = torch.profiler.record_function(self.name)
            self.rf.__enter__()
        return self

    def __exit__(self, *exc):
        if self.rf is not None:
            self.rf.__exit__(*exc)
            torch.cuda.nvtx.range_pop()
        return False

# ----------------------------------------------------------------------------------------------
# Configuration (docs/experiments.md, the model; include/tlm/config.h)


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int = 10000
    context_length: int = 1024
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    rope_theta: float = 10000.0
    rmsnorm_eps: float = 1e-5

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def num_params(self) -> int:
        d, f = self.d_model, self.d_ff
        return 2 * self.vocab_size * d + self.num_layers * (4 * d * d + 3 * d * f + 2 * d) + d


PRESETS = {
    "tiny":   LMConfig(vocab_size=512, context_length=32, d_model=64, num_layers=2, num_heads=4, d_ff=172),
    "small":  LMConfig(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": LMConfig(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large":  LMConfig(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl":     LMConfig(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B":   LMConfig(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


def make_config(name: str, context_length: int = None) -> LMConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}")
    cfg = PRESETS[name]
    if context_length is not None:
        cfg = replace(cfg, context_length=context_length)
    return cfg


# ----------------------------------------------------------------------------------------------
# Modules. Each takes optional device/dtype so that large models can be built on the GPU directly.


def _trunc_normal_(w: torch.Tensor, std: float) -> torch.Tensor:
    return nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3.0 * std, b=3.0 * std)


class Linear(nn.Module):
    """y = x W^T, no bias. weight: (d_out, d_in), trunc_normal(0, sqrt(2/(d_in+d_out)), +-3 std)."""

    def __init__(self, d_in: int, d_out: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in, device=device, dtype=dtype))
        _trunc_normal_(self.weight, math.sqrt(2.0 / (d_in + d_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., d_in) -> (..., d_out)
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """Plain row lookup, no scaling. weight: (V, D), trunc_normal(0, 1, +-3)."""

    def __init__(self, num_embeddings: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, d_model, device=device, dtype=dtype))
        _trunc_normal_(self.weight, 1.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) int64 -> (B, T, D)
        return self.weight[ids]


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, computed in fp32 (fp64 for fp64 input), then cast back
    to the input dtype. weight: (D,), init 1."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., D)
        in_dtype = x.dtype
        xf = x.to(torch.promote_types(in_dtype, torch.float32))
        rms_inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rms_inv * self.weight).to(in_dtype)


def rope_table(context_length: int, d_head: int, theta: float, device=None):
    """cos, sin: (context_length, d_head/2) float64; angle[pos, k] = pos * theta^(-2k/d_head)."""
    k = torch.arange(0, d_head // 2, dtype=torch.float64, device=device)
    inv_freq = theta ** (-2.0 * k / d_head)
    pos = torch.arange(context_length, dtype=torch.float64, device=device)
    angle = pos[:, None] * inv_freq[None, :]
    return torch.cos(angle), torch.sin(angle)


class RotaryEmbedding(nn.Module):
    """RoPE with INTERLEAVED pairs: (x[2k], x[2k+1]) -> (cos x1 - sin x2, sin x1 + cos x2).
    One table (float64 computed, stored float32) shared by all layers. For float64 inputs the
    float64 table is used (fixtures: the 'true answer')."""

    def __init__(self, context_length: int, d_head: int, theta: float, device=None):
        super().__init__()
        self.d_head, self.theta = d_head, theta
        cos, sin = rope_table(context_length, d_head, theta, device=device)
        self.register_buffer("cos", cos.to(torch.float32), persistent=False)  # (ctx, Dh/2)
        self.register_buffer("sin", sin.to(torch.float32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, H, T, Dh), positions 0..T-1
        T = x.shape[-2]
        if x.dtype == torch.float64:
            cos, sin = rope_table(T, self.d_head, self.theta, device=x.device)
        else:
            if T > self.cos.shape[0]:
                raise ValueError(f"sequence length {T} > context_length {self.cos.shape[0]}")
            cos, sin = self.cos[:T].float(), self.sin[:T].float()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1)
        return out.flatten(-2)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Max-subtracted softmax (the max is a constant shift: no gradient flows through it)."""
    z = x - x.amax(dim=dim, keepdim=True).detach()
    e = torch.exp(z)
    return e / e.sum(dim=dim, keepdim=True)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE on Q and K. attention='naive' computes
    softmax(QK^T/sqrt(Dh), mask i>=j) V explicitly; 'sdpa' calls F.scaled_dot_product_attention."""

    def __init__(self, cfg: LMConfig, rope: RotaryEmbedding, attention: str = "naive",
                 device=None, dtype=None):
        super().__init__()
        d = cfg.d_model
        self.num_heads, self.d_head = cfg.num_heads, cfg.d_head
        self.attention = attention
        self.q_proj = Linear(d, d, device=device, dtype=dtype)       # (D, D)
        self.k_proj = Linear(d, d, device=device, dtype=dtype)
        self.v_proj = Linear(d, d, device=device, dtype=dtype)
        self.output_proj = Linear(d, d, device=device, dtype=dtype)
        self.rope = [rope]  # a list: the shared table is not a submodule of every layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T, D)
        B, T, D = x.shape
        H, Dh = self.num_heads, self.d_head

        def heads(t):  # (B, T, D) -> (B, H, T, Dh); head h = columns h*Dh .. (h+1)*Dh-1
            return t.view(B, T, H, Dh).transpose(1, 2)

        rope = self.rope[0]
        q = rope(heads(self.q_proj(x)))
        k = rope(heads(self.k_proj(x)))
        v = heads(self.v_proj(x))
        if self.attention == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            with annotate("computing attention scores"):
                scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)                  # (B, H, T, T)
                causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # i >= j
                scores = scores.masked_fill(~causal, float("-inf"))
            with annotate("computing softmax"):
                p = softmax(scores, dim=-1)
            with annotate("final matmul"):
                o = p @ v                                                         # (B, H, T, Dh)
        o = o.transpose(1, 2).reshape(B, T, D)
        return self.output_proj(o)


class SwiGLU(nn.Module):
    """ffn(x) = w2(silu(w1 x) * w3 x); w1, w3: (F, D), w2: (D, F)."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device=device, dtype=dtype)
        self.w2 = Linear(d_ff, d_model, device=device, dtype=dtype)
        self.w3 = Linear(d_model, d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm: h = x + attn(ln1(x)); out = h + ffn(ln2(h))."""

    def __init__(self, cfg: LMConfig, rope: RotaryEmbedding, attention: str = "naive",
                 device=None, dtype=None):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.rmsnorm_eps, device=device, dtype=dtype)
        self.attn = CausalSelfAttention(cfg, rope, attention, device=device, dtype=dtype)
        self.ln2 = RMSNorm(cfg.d_model, cfg.rmsnorm_eps, device=device, dtype=dtype)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.ln1(x))
        return h + self.ffn(self.ln2(h))


class TransformerLM(nn.Module):
    """token_embeddings -> num_layers blocks -> ln_final -> lm_head. Returns logits (B, T, V).
    No bias, no weight tying. State-dict names as in CS336 (docs/experiments.md, the model)."""

    def __init__(self, cfg: LMConfig, attention: str = "naive", device=None, dtype=None):
        super().__init__()
        if cfg.d_model % cfg.num_heads or cfg.d_head % 2:
            raise ValueError("d_model must be divisible by num_heads and d_head must be even")
        if attention not in ("naive", "sdpa"):
            raise ValueError(f"attention must be 'naive' or 'sdpa', not {attention!r}")
        self.cfg = cfg
        self.token_embeddings = Embedding(cfg.vocab_size, cfg.d_model, device=device, dtype=dtype)
        self.rope = RotaryEmbedding(cfg.context_length, cfg.d_head, cfg.rope_theta, device=device)
        self.layers = nn.ModuleList(
            TransformerBlock(cfg, self.rope, attention, device=device, dtype=dtype)
            for _ in range(cfg.num_layers))
        self.ln_final = RMSNorm(cfg.d_model, cfg.rmsnorm_eps, device=device, dtype=dtype)
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, device=device, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) int64 -> (B, T, V)
        x = self.token_embeddings(ids)
        for i, layer in enumerate(self.layers):
            with annotate(f"layer {i}"):
                x = layer(x)
        return self.lm_head(self.ln_final(x))


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over all positions of logsumexp(logits) - logits[target], via max-subtracted
    log-softmax. logits (..., V); targets (...) int64. fp16/bf16 logits are promoted to fp32."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    logits = logits.reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    z = logits - logits.amax(dim=-1, keepdim=True).detach()
    logsumexp = torch.log(torch.exp(z).sum(dim=-1))
    return (logsumexp - z.gather(1, targets[:, None]).squeeze(1)).mean()


class AdamW(torch.optim.Optimizer):
    """The CS336 AdamW. Per step t (from 1), for every parameter p with gradient g:
        m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  a_t = lr sqrt(1-b2^t) / (1-b1^t)
        p -= a_t m / (sqrt(v) + eps);  p -= lr * wd * p   (decay after the update, on the new p)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError("invalid AdamW hyperparameters")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["t"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["t"] += 1
                t, m, v = state["t"], state["m"], state["v"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                a_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                p.addcdiv_(m, v.sqrt().add_(eps), value=-a_t)
                p.add_(p, alpha=-lr * wd)
        return loss


# ----------------------------------------------------------------------------------------------
# Benchmark (docs/experiments.md): w warm-up steps, n timed steps; forward, backward and optimizer step
# timed separately with a device synchronization around each phase.

FIELDS = ["impl", "model", "context_length", "batch_size", "grad_accum_steps", "precision", "pass",
          "fwd_ms_mean", "fwd_ms_std", "bwd_ms_mean", "bwd_ms_std", "opt_ms_mean", "opt_ms_std",
          "tokens_per_s", "params", "peak_bytes", "reserved_bytes", "attention", "status", "profiled_kernels"]
PASSES = ("forward", "forward-backward", "train")
PRECISIONS = ("fp32", "tf32", "bf16")


def set_precision(precision: str, device: str):
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def peak_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def reserved_bytes(device: str):
    return torch.cuda.max_memory_reserved() if device == "cuda" else None


def snapshot_path(args, name: str, T: int, precision: str, pass_: str) -> str:
    """--memory-snapshot FILE, with the configuration before the extension when several run (as
    `tlm memory --snapshot` names its files: FILE-2.7B-ctx256-b4-fp32-train.pickle)."""
    if args.configs == 1:
        return args.memory_snapshot
    stem, ext = os.path.splitext(args.memory_snapshot)
    return f"{stem}-{name}-ctx{T}-b{args.batch_size}-{precision}-{pass_}{ext}"


def run_config(args, name: str, T: int, precision: str, pass_: str) -> dict:
    dev = args.device
    cfg = make_config(name, context_length=T)
    impl = "pytorch-compile" if args.compile else "pytorch-eager"
    accum = args.grad_accum_steps if pass_ == "train" else 1  # micro-batches per optimizer step
    row = dict(impl=impl + ("+torch.profiler" if args.torch_profiler else ""), model=name,
               context_length=T, batch_size=args.batch_size, grad_accum_steps=accum, precision=precision,
               pass_=pass_, params=cfg.num_params(), attention=args.attention)
    set_precision(precision, dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    model = fwd_model = opt = x = y = loss = prof = None
    try:
        if dev == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            if args.memory_snapshot:  # every allocation from here on, with its Python stack
                torch.cuda.memory._record_memory_history(max_entries=1000000)
        torch.manual_seed(args.seed)
        model = TransformerLM(cfg, attention=args.attention, device=dev)
        # (accum, B, T): micro-batch k is x[k], y[k]
        x = torch.randint(0, cfg.vocab_size, (accum, args.batch_size, T), device=dev)
        y = torch.randint(0, cfg.vocab_size, (accum, args.batch_size, T), device=dev)
        opt = AdamW(model.parameters()) if pass_ == "train" else None
        fwd_model = torch.compile(model) if args.compile else model
        amp = (torch.autocast(device_type=dev, dtype=torch.bfloat16) if precision == "bf16"
               else torch.autocast(device_type=dev, enabled=False))
        times = {"fwd": [], "bwd": [], "opt": []}
        if args.torch_profiler:  # the peer of `tlm profile --overhead`: every step traced (CPU ops, CUPTI)
            acts = [torch.profiler.ProfilerActivity.CPU]
            if dev == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        for i in range(args.warmup + args.steps):
            step = annotate(f"warmup step {i}" if i < args.warmup else f"step {i - args.warmup}")
            step.__enter__()
            fwd_s = bwd_s = 0.0  # summed over the micro-batches (gradient accumulation: nanoGPT's loop, the
            for k in range(accum):  # loss of each divided by their number, .grad summed by autograd)
                sync()
                t0 = time.perf_counter()
                with amp, torch.set_grad_enabled(pass_ != "forward"), annotate("forward"):
                    loss = cross_entropy(fwd_model(x[k]), y[k])
                    if accum > 1:
                        loss = loss / accum
                sync()
                t1 = time.perf_counter()
                fwd_s += t1 - t0
                if pass_ != "forward":
                    with annotate("backward"):
                        loss.backward()
                    sync()
                    bwd_s += time.perf_counter() - t1
            opt_s = 0.0
            if opt is not None:
                t2 = time.perf_counter()
                with annotate("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                sync()
                opt_s = time.perf_counter() - t2
            elif pass_ != "forward":
                model.zero_grad(set_to_none=True)  # not timed: keeps gradients from piling up
            step.__exit__(None, None, None)
            loss = None
            if i >= args.warmup:
                times["fwd"].append(fwd_s * 1e3)
                times["bwd"].append(bwd_s * 1e3)
                times["opt"].append(opt_s * 1e3)
        if prof is not None:  # the trace is collected here, after the timed steps
            prof.__exit__(None, None, None)
            row["profiled_kernels"] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            prof = None
        ran = {"fwd": True, "bwd": pass_ != "forward", "opt": pass_ == "train"}
        step_ms = 0.0
        for k in ("fwd", "bwd", "opt"):
            a = np.asarray(times[k], dtype=np.float64)
            row[f"{k}_ms_mean"] = float(a.mean()) if ran[k] else None
            row[f"{k}_ms_std"] = float(a.std()) if ran[k] else None  # population std (ddof=0)
            step_ms += float(a.mean()) if ran[k] else 0.0
        row["tokens_per_s"] = accum * args.batch_size * T / (step_ms / 1e3) if step_ms > 0 else None
        row["peak_bytes"] = peak_bytes(dev)
        row["reserved_bytes"] = reserved_bytes(dev)
        row["status"] = "ok"
        if args.memory_snapshot and dev == "cuda":  # the model, its state and the step's trace
            torch.cuda.memory._dump_snapshot(snapshot_path(args, name, T, precision, pass_))
    except (torch.cuda.OutOfMemoryError, MemoryError) as e:
        row["status"] = "OOM"
        row["peak_bytes"] = peak_bytes(dev)
        row["reserved_bytes"] = reserved_bytes(dev)
        print(f"# OOM: {name} ctx {T} {precision} {pass_}: {str(e).splitlines()[0]}", file=sys.stderr)
    finally:
        if args.memory_snapshot and dev == "cuda":
            torch.cuda.memory._record_memory_history(enabled=None)
        if prof is not None:
            prof.__exit__(None, None, None)
        model = fwd_model = opt = x = y = loss = prof = None  # drop the graph too (OOM in backward)
        gc.collect()
        if dev == "cuda":
            torch.cuda.empty_cache()
        if args.compile:
            torch._dynamo.reset()
    return row


def header_lines(args) -> list:
    if args.device == "cuda":
        dev_name = torch.cuda.get_device_name(0)
        cuda = f" cuda {torch.version.cuda}"
    else:
        dev_name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        dev_name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        cuda = ""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        f"pytorch_lm.py: torch {torch.__version__}{cuda}, python {platform.python_version()}, "
        f"device {args.device} ({dev_name}), threads {torch.get_num_threads()}, date {now}",
        f"config: models {args.model}, context {args.context_length}, batch {args.batch_size}, "
        f"grad_accum_steps {args.grad_accum_steps}, "
        f"warmup {args.warmup}, steps {args.steps}, pass {args.pass_}, precision {args.precision}, "
        f"compile {args.compile}, attention {args.attention}, seed {args.seed}"
        + (", torch.profiler on (CPU and CUDA activities) from the first warm-up step to the last timed one"
           if args.torch_profiler else ""),
        "times in ms per step, mean and population std (numpy ddof=0) over the timed steps; "
        "fwd = model(x) + loss, bwd = loss.backward(), opt = AdamW step + zero_grad; "
        "forward pass runs under no_grad; tokens/s = grad_accum_steps*batch*context / (sum of the timed phases); "
        "with --grad-accum-steps N (train) a step is N micro-batches (each loss / N, backward accumulating "
        ".grad: nanoGPT's loop), fwd and bwd summed over them, then one AdamW step; "
        + ("peak_bytes = torch.cuda.max_memory_allocated per config (reserved_bytes: max_memory_reserved)"
           if args.device == "cuda" else "peak_bytes = process max RSS so far (getrusage)"),
    ]


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.3f}" if abs(v) < 1e5 else f"{v:.1f}"
    return str(v)


def render(args, rows) -> str:
    hdr = header_lines(args)
    out_rows = [{f: r.get("pass_" if f == "pass" else f) for f in FIELDS} for r in rows]
    if args.format == "json":
        return json.dumps({"header": hdr, "rows": out_rows}, indent=1) + "\n"
    if args.format == "csv":
        lines = ["# " + h for h in hdr] + [",".join(FIELDS)]
        lines += [",".join(fmt(r[f]) for f in FIELDS) for r in out_rows]
        return "\n".join(lines) + "\n"
    units = {"fwd_ms_mean": "ms", "fwd_ms_std": "ms", "bwd_ms_mean": "ms", "bwd_ms_std": "ms",
             "opt_ms_mean": "ms", "opt_ms_std": "ms", "tokens_per_s": "tok/s", "peak_bytes": "bytes",
             "reserved_bytes": "bytes"}
    cells = [[fmt(r[f]) for f in FIELDS] for r in out_rows]
    widths = [max([len(f), len(units.get(f, ""))] + [len(c[i]) for c in cells])
              for i, f in enumerate(FIELDS)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths)).rstrip()
    lines = ["# " + h for h in hdr]
    lines += [line(FIELDS), line([units.get(f, "") for f in FIELDS])]
    lines += [line(c) for c in cells]
    n_oom = sum(r["status"] == "OOM" for r in out_rows)
    lines.append(f"# {len(out_rows)} configs, {n_oom} out of memory")
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-" + os.path.basename(path))
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)  # mkstemp made it 0600: the file gets the usual mode
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def csv_list(s: str, allowed=None, name=""):
    items = [t.strip() for t in s.split(",") if t.strip()]
    if allowed is not None:
        for t in items:
            if t not in allowed:
                raise argparse.ArgumentTypeError(f"{name}: {t!r} not one of {', '.join(allowed)}")
    return items


def main(argv=None):
    p = argparse.ArgumentParser(description="PyTorch peer of `tlm bench`: times forward, backward "
                                "and AdamW step of the CS336 Transformer LM.")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="small", help=f"comma list of presets: {', '.join(PRESETS)} (default small)")
    p.add_argument("--context-length", default="128", help="comma list (default 128)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--pass", dest="pass_", default="train", help=f"comma list of {', '.join(PASSES)} (default train)")
    p.add_argument("--precision", default="fp32", help=f"comma list of {', '.join(PRECISIONS)} (default fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--attention", choices=("naive", "sdpa"), default="naive")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grad-accum-steps", type=int, default=1,
                   help="train: micro-batches of --batch-size rows per optimizer step (tlm's --grad-accum-steps)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--out", help="also write the output to this file (atomically)")
    p.add_argument("--memory-snapshot", metavar="FILE",
                   help="CUDA: record the memory history of each configuration and write its snapshot "
                        "(torch.cuda.memory._dump_snapshot; pytorch.org/memory_viz opens it) to FILE, the "
                        "configuration put before the extension when several run")
    p.add_argument("--torch-profiler", action="store_true",
                   help="run every step under torch.profiler (CPU and CUDA activities: Kineto on CUPTI), "
                        "to measure its overhead beside an unprofiled run (the peer of `tlm profile --overhead`)")
    p.add_argument("--nvtx", action="store_true",
                   help="the seeds' NVTX (and torch.profiler) ranges: steps, phases, layers, attention stages "
                        "(for `tlm profile --exec` or nsys; eager mode)")
    args = p.parse_args(argv)
    global ANNOTATE
    ANNOTATE = args.nvtx
    try:
        models = csv_list(args.model, PRESETS, "--model")
        ctxs = [int(t) for t in csv_list(args.context_length)]
        passes = csv_list(args.pass_, PASSES, "--pass")
        precs = csv_list(args.precision, PRECISIONS, "--precision")
    except (argparse.ArgumentTypeError, ValueError) as e:
        p.error(str(e))
    if args.batch_size < 1 or args.steps < 1 or args.warmup < 0 or any(t < 1 for t in ctxs) or args.grad_accum_steps < 1:
        p.error("--batch-size, --steps, --context-length, --grad-accum-steps must be >= 1 and --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device visible to torch")
    if args.device == "cpu" and "tf32" in precs:
        print("# note: tf32 has no effect on CPU", file=sys.stderr)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    args.configs = len(models) * len(ctxs) * len(precs) * len(passes)
    rows = []
    for name in models:
        for T in ctxs:
            for prec in precs:
                for pass_ in passes:
                    rows.append(run_config(args, name, T, prec, pass_))
                    print(f"# done {name} ctx {T} {prec} {pass_}: {rows[-1]['status']}", file=sys.stderr)
    text = render(args, rows)
    sys.stdout.write(text)
    if args.out:
        write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
