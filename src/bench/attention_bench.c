/* attention_bench.c — one case of `tlm attention` (attention_bench.h): naive attention or
 * FlashAttention-2, each through the dispatch (ops.h).
 *   naive: attention_forward/backward (causal only; P (B,H,T,T) saved, dP scratch of that size),
 *          in the case's precision mode (fp32 strict, tf32 GEMMs, bf16, fp16).
 *   flash: flash_attention_forward/backward (CUDA: the kernels of src/cuda/flash_attention*.cu;
 *          CPU: the reference of src/cpu/flash_attention.c), in the case's mode (tf32: the CUDA
 *          TF32 kernels). tlm_backend_supports comes first: a (d_head, dtype) it refuses is an
 *          "unsupported" row carrying its message. The backward's
 *          fp32 workspace (tlm_flash_workspace_floats: delta and the dQ accumulator) is allocated
 *          before the backward on every backend, the CPU included (its ops accept NULL), so memory
 *          is accounted alike.
 * Each timed pass sits between two events on the compute stream (device time on CUDA, the host
 * clock on the CPU). q, k, v, dout, out are separate (B,T,H*D) tensors (ld = H*D), Tq = Tk = seq. */
#include "tlm/attention_bench.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tlm/rng.h"

const char *tlm_attn_status_name(tlm_attn_status s) {
    switch (s) {
    case TLM_ATTN_OK: return "ok";
    case TLM_ATTN_OOM: return "OOM";
    case TLM_ATTN_UNSUPPORTED: return "unsupported";
    case TLM_ATTN_SKIPPED: return "skipped";
    }
    return "?";
}

double tlm_attn_flops_forward(int batch, int heads, int seq, int d_head, bool causal) {
    const double f = 4.0 * batch * heads * (double)seq * (double)seq * d_head;
    return causal ? f / 2 : f;
}

double tlm_attn_flops_backward(int batch, int heads, int seq, int d_head, bool causal) {
    return 2.5 * tlm_attn_flops_forward(batch, heads, seq, d_head, causal);
}

/* The buffers of one case; every pointer NULL until allocated, all freed by free_all. */
enum { BUF_Q, BUF_K, BUF_V, BUF_DOUT, BUF_OUT, BUF_SAVED, BUF_DQ, BUF_DK, BUF_DV, BUF_SCRATCH, BUF_WORKSPACE, BUF_N };
static const char *const buf_names[BUF_N] = {"attention.q", "attention.k", "attention.v", "attention.dout",
                                             "attention.out", "attention.saved", "attention.dq",
                                             "attention.dk", "attention.dv", "attention.scratch",
                                             "attention.flash_workspace"};

typedef struct {
    tlm_backend *be;
    void *p[BUF_N];
    tlm_attn_result *r;
} bufs;

static void free_all(bufs *b) {
    for (int i = BUF_N - 1; i >= 0; i--) {
        tlm_free(b->be, b->p[i]);
        b->p[i] = NULL;
    }
}

/* allocates buffer i; on failure sets the OOM row and returns false */
static bool alloc_buf(bufs *b, int i, size_t bytes, tlm_mem_tag tag) {
    b->p[i] = tlm_alloc(b->be, bytes, tag, buf_names[i]);
    if (b->p[i]) return true;
    b->r->status = TLM_ATTN_OOM;
    b->r->oom_bytes = bytes;
    snprintf(b->r->note, sizeof b->r->note, "out of memory: %s, %zu bytes (%.1f MiB) asked for with %.1f MiB in use",
             buf_names[i], bytes, bytes / 1048576.0, tlm_mem_stats_now(b->be).current_total / 1048576.0);
    return false;
}

/* fills backend tensor dst (n elements of dt) with normals of the stream (seed, id) */
static bool fill_random(bufs *b, void *dst, size_t n, tlm_dtype dt, uint64_t seed, uint64_t id) {
    float *host = malloc(n * sizeof(float));
    if (!host) {
        b->r->status = TLM_ATTN_OOM;
        b->r->oom_bytes = n * sizeof(float);
        snprintf(b->r->note, sizeof b->r->note, "out of host memory: %zu bytes for the random inputs",
                 n * sizeof(float));
        return false;
    }
    uint64_t s = tlm_rng_stream(seed, id);
    for (size_t i = 0; i < n; i++) host[i] = (float)tlm_rng_normal(&s);
    bool ok = true;
    if (dt == TLM_DTYPE_F32) {
        tlm_copy_to_backend(b->be, dst, host, n * sizeof(float));
    } else { /* through a float32 staging tensor and the backend's cast (round to nearest even) */
        float *stage = tlm_alloc(b->be, n * sizeof(float), TLM_MEM_WORKSPACE, "attention.stage");
        if (!stage) {
            b->r->status = TLM_ATTN_OOM;
            b->r->oom_bytes = n * sizeof(float);
            snprintf(b->r->note, sizeof b->r->note, "out of memory: attention.stage, %zu bytes", n * sizeof(float));
            ok = false;
        } else {
            tlm_copy_to_backend(b->be, stage, host, n * sizeof(float));
            tlm_cast(b->be, dst, stage, n, dt);
            tlm_synchronize(b->be);
            tlm_free(b->be, stage);
        }
    }
    free(host);
    return ok;
}

/* ---- the timed passes ------------------------------------------------------------------------ */

typedef enum { PATH_NAIVE, PATH_FLASH_OPS } pass_path;

typedef struct {
    tlm_backend *be;
    const tlm_attn_case *c;
    pass_path path;
    void *const *p; /* the case's buffers, BUF_* */
} pass_args;

/* one pass, ld = C, Tq = Tk. Forward: out and what it saves (naive P, flash L) from q, k, v; backward:
 * dq, dk, dv from dout and the last forward's saved tensors. */
static void run_pass(const pass_args *a, bool backward) {
    tlm_backend *be = a->be;
    const tlm_attn_case *c = a->c;
    void *const *p = a->p;
    const int B = c->batch, H = c->heads, T = c->seq, D = c->d_head, C = H * D;
    switch (a->path) {
    case PATH_NAIVE:
        if (!backward)
            tlm_attention_forward(be, p[BUF_OUT], p[BUF_SAVED], p[BUF_Q], p[BUF_K], p[BUF_V], C, B, T, H, D,
                                  c->precision);
        else
            tlm_attention_backward(be, p[BUF_DQ], p[BUF_DK], p[BUF_DV], p[BUF_SCRATCH], p[BUF_DOUT], p[BUF_Q],
                                   p[BUF_K], p[BUF_V], p[BUF_SAVED], C, B, T, H, D, c->precision);
        break;
    case PATH_FLASH_OPS:
        if (!backward)
            tlm_flash_attention_forward(be, p[BUF_OUT], p[BUF_SAVED], p[BUF_Q], p[BUF_K], p[BUF_V], C, C, B, T, T, H,
                                        D, c->causal, c->precision);
        else
            tlm_flash_attention_backward(be, p[BUF_DQ], p[BUF_DK], p[BUF_DV], p[BUF_WORKSPACE], p[BUF_DOUT], p[BUF_Q],
                                         p[BUF_K], p[BUF_V], p[BUF_OUT], p[BUF_SAVED], C, C, B, T, T, H, D, c->causal,
                                         c->precision);
        break;
    }
}

/* the mean ms of `iters` forward or backward passes, each between two events on the compute stream (the
 * backward runs reuse the last forward's saved outputs); -1 when events cannot be created (message set) */
static double time_passes(tlm_backend *be, const pass_args *a, bool backward, int iters) {
    tlm_event *e0 = NULL, *e1 = NULL;
    if (tlm_event_create(be, &e0) != TLM_OK || tlm_event_create(be, &e1) != TLM_OK) {
        tlm_event_destroy(be, e0);
        return -1;
    }
    double ms = 0;
    for (int i = 0; i < iters; i++) {
        tlm_event_record(be, e0, NULL);
        run_pass(a, backward);
        tlm_event_record(be, e1, NULL);
        ms += tlm_event_elapsed_ms(be, e0, e1);
    }
    tlm_event_destroy(be, e0);
    tlm_event_destroy(be, e1);
    return ms / iters;
}

static void unsupported(tlm_attn_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unsupported(tlm_attn_result *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    r->status = TLM_ATTN_UNSUPPORTED;
    vsnprintf(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
}

tlm_status tlm_attention_bench_run(tlm_backend *be, const tlm_attn_case *c, tlm_attn_result *r) {
    memset(r, 0, sizeof *r);
    if (c->batch < 1 || c->heads < 1 || c->seq < 1 || c->d_head < 2 || c->d_head % 2 || c->iters < 1 ||
        c->warmup < 0)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT,
                        "attention case: batch %d, heads %d, seq %d, d_head %d (even, >= 2), iters %d, warmup %d",
                        c->batch, c->heads, c->seq, c->d_head, c->iters, c->warmup);
    if ((unsigned)c->precision >= TLM_PRECISION_COUNT)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "attention case: precision mode %d (known: fp32, tf32, bf16, fp16)",
                        (int)c->precision);
    const tlm_dtype dt = tlm_precision_act_dtype(c->precision);
    const bool flash = c->impl == TLM_ATTENTION_FLASH;
    if (!flash && !c->causal) {
        unsupported(r, "naive: causal only (the backend's attention op)");
        return TLM_OK;
    }
    /* flash: when the backend has kernels for this d_head and dtype */
    if (flash && (tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_FORWARD, dt, c->d_head) == TLM_SUPPORT_NONE ||
                  tlm_backend_supports(be, TLM_OP_FLASH_ATTENTION_BACKWARD, dt, c->d_head) == TLM_SUPPORT_NONE)) {
        unsupported(r, "flash: %s", tlm_last_error());
        return TLM_OK;
    }

    /* the largest tensor, P (B,H,T,T), in double first: past the address space it is an OOM */
    const double probs_d = (double)c->batch * c->heads * (double)c->seq * c->seq * 4.0;
    if (probs_d > (double)(SIZE_MAX / 8) || (double)c->heads * c->d_head > 1e9) {
        r->status = TLM_ATTN_OOM;
        r->oom_bytes = SIZE_MAX;
        snprintf(r->note, sizeof r->note, "out of memory: %.3g bytes asked for (past the address space)",
                 flash ? (double)c->batch * c->seq * c->heads * c->d_head * tlm_dtype_size(dt) : probs_d);
        return TLM_OK;
    }
    const int B = c->batch, H = c->heads, T = c->seq, D = c->d_head, C = H * D;
    const size_t es = tlm_dtype_size(dt);
    const size_t rows = (size_t)B * T, nqkv = rows * C;
    const size_t act = nqkv * es;                        /* one (B,T,H,D) tensor */
    const size_t probs = (size_t)B * H * T * T * es;     /* naive: P (B,H,T,T) */
    const size_t lse = (size_t)B * H * T * sizeof(float); /* flash: L (B,H,T) */
    const size_t workspace = tlm_flash_workspace_floats(B, T, H, D) * sizeof(float); /* flash backward */
    bufs b = {be, {0}, r};
    tlm_backend_release_workspaces(be); /* no split buffer of an earlier case: this case's peak is its own */
    tlm_mem_reset_peak(be);
    const size_t base = tlm_mem_stats_now(be).current_total; /* anything the caller holds (nothing, normally) */

    /* inputs: q, k, v and the gradient of the output, random normals */
    if (!alloc_buf(&b, BUF_Q, act, TLM_MEM_ACTIVATIONS) || !alloc_buf(&b, BUF_K, act, TLM_MEM_ACTIVATIONS) ||
        !alloc_buf(&b, BUF_V, act, TLM_MEM_ACTIVATIONS) || !alloc_buf(&b, BUF_DOUT, act, TLM_MEM_GRADIENTS) ||
        !fill_random(&b, b.p[BUF_Q], nqkv, dt, c->seed, 1) ||
        !fill_random(&b, b.p[BUF_K], nqkv, dt, c->seed, 2) ||
        !fill_random(&b, b.p[BUF_V], nqkv, dt, c->seed, 3) ||
        !fill_random(&b, b.p[BUF_DOUT], nqkv, dt, c->seed, 4))
        goto done;
    /* the forward's outputs: out and what it saves (P for naive, L for flash) */
    if (!alloc_buf(&b, BUF_OUT, act, TLM_MEM_ACTIVATIONS) ||
        !alloc_buf(&b, BUF_SAVED, flash ? lse : probs, TLM_MEM_ACTIVATIONS))
        goto done;
    r->mem_before_bwd = tlm_mem_stats_now(be).current_total - base;
    /* the backward's: dq, dk, dv and its scratch (naive: dP (B,H,T,T); flash: the fp32 workspace) */
    if (!alloc_buf(&b, BUF_DQ, act, TLM_MEM_GRADIENTS) || !alloc_buf(&b, BUF_DK, act, TLM_MEM_GRADIENTS) ||
        !alloc_buf(&b, BUF_DV, act, TLM_MEM_GRADIENTS) ||
        (!flash && !alloc_buf(&b, BUF_SCRATCH, probs, TLM_MEM_ACTIVATIONS)) ||
        (flash && !alloc_buf(&b, BUF_WORKSPACE, workspace, TLM_MEM_ACTIVATIONS)))
        goto done;

    const pass_args a = {be, c, flash ? PATH_FLASH_OPS : PATH_NAIVE, b.p};
    for (int i = 0; i < c->warmup; i++) {
        run_pass(&a, false);
        run_pass(&a, true);
    }
    const double fwd = time_passes(be, &a, false, c->iters), bwd = time_passes(be, &a, true, c->iters);
    if (fwd < 0 || bwd < 0) { /* no events: the message is set */
        unsupported(r, "%s", tlm_last_error());
        goto done;
    }
    r->status = TLM_ATTN_OK;
    r->fwd_ms = fwd;
    r->bwd_ms = bwd;
    r->fwdbwd_ms = r->fwd_ms + r->bwd_ms;
    r->tflops_fwd = r->fwd_ms > 0 ? tlm_attn_flops_forward(B, H, T, D, c->causal) / (r->fwd_ms * 1e9) : 0;
    r->tflops_bwd = r->bwd_ms > 0 ? tlm_attn_flops_backward(B, H, T, D, c->causal) / (r->bwd_ms * 1e9) : 0;
done:
    r->peak_bytes = tlm_mem_stats_now(be).peak_total - base;
    free_all(&b);
    return TLM_OK;
}
