/* test_ddp.c — data-parallel training (ddp.h) on every rank of whatever world the launcher made: ctest
 * runs it alone (a world of one: the bucket plans and the refusals that need no communicator), under
 * `mpirun -np 2` and `-np 3` (oversubscribed) with the MPI communicator on the CPU backend, and its GPU
 * build test_gpu_ddp under `mpirun -np 2` with NCCL, one rank per GPU (tests/CMakeLists.txt; fewer
 * GPUs than ranks, or a world of one: exit 77, skipped).
 *
 * Checks:
 * - bucket plans of the tiny model: one bucket per tensor (cap 0), one for everything (FLAT), a tensor
 *   larger than the cap alone in its bucket, a cap of exactly one tensor's bytes, a bucket that spans
 *   two layers' groups (ready with the lower one); every plan tiles the flat buffer in descending
 *   offset with nondecreasing ready groups; ZeRO plans for 2, 3, 4 and 8 ranks: equal pieces of whole
 *   64-byte lines, only the top bucket's tail all-reduced;
 * - N ranks training the tiny model 5 steps (tlm_train: the global batch of 2 rows per rank drawn in
 *   shards, clipping on, each rank's weights initialised from its own seed before the broadcast) give
 *   the weights, losses and gradient norms of one process training on the whole global batch, within
 *   1e-6 relative (normwise per tensor) in fp32 for every mode, bucket size and ZeRO-1; ZeRO-1 equals
 *   DDP as closely; every rank holds the same weights bit for bit; the collectives each mode issues;
 *   ZeRO-1's optimizer state is 1/N of the moments (plus its tail); bf16 gradient reduction within
 *   5e-3 of the fp32 result (and not equal to it); bf16 autocast and fp16 loss scaling: the first loss
 *   within 1e-6, norms, losses and weights within one ulp of the format (its rounding of the loss
 *   gradient and of the GEMM copies of the weights);
 *   optimizer-in-backward (per-group all-reduce before each update) equal to one process;
 * - bf16 precision with the bf16 reduction: the weight gradients written in bf16 by their GEMMs into the
 *   staging buffer give the bits of casting every gradient (bucketed, naive, flat, ZeRO-1), and only the
 *   rest is cast, with the overlapped optimizer too; fp32 and fp16 precision and accumulation cast everything;
 * - gradient accumulation (2 and 3 micro-batches a step): the one process on the whole global batch as one
 *   batch within 1e-6 in fp32 (bf16 reduction 5e-3), for every mode and ZeRO-1, each bucket reduced once
 *   a step (in the last micro-batch's backward: no_sync before it);
 * - the time: MPI's reductions inside the backward for the overlapped modes, after it for the others;
 * - ZeRO-1's moments: whole -> this rank's shard -> whole (a checkpoint's save and resume), the same bits;
 * - refusals: ZeRO with optimizer-in-backward, a bucket size of 0, ZeRO stage 2, ranks that disagree
 *   (every rank refuses, naming the configuration), a world of one. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/convert.h"
#include "test_check.h"
#include "tlm/comm.h"
#include "tlm/ddp.h"
#include "tlm/model.h"
#include "tlm/rng.h"
#include "tlm/train.h"
#include "tlm/util.h"

static int rank = 0, nranks = 1;
static tlm_backend *be;
static tlm_comm *comm;
static tlm_tokens data;
static const bool on_cpu = TLM_TEST_DEVICE[1] == 'p'; /* "cpu" */

/* check() on rank 0; the other ranks print only what failed (and count what passed) */
static void rcheck(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rcheck(bool ok, const char *fmt, ...) {
    char text[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (rank != 0 && ok) passed++;
    else if (rank != 0) check(false, "rank %d: %s", rank, text);
    else check(ok, "%s", text);
}
#define RCHECK rcheck

/* status s is `want` and its message holds `needle`, on this rank */
static void rcheck_status(tlm_status s, tlm_status want, const char *needle, const char *what) {
    rcheck(s == want && strstr(tlm_last_error(), needle), "%s -> %s: %s", what, tlm_status_string(s),
           s != TLM_OK ? tlm_last_error() : "");
}

static tlm_config tiny(void) {
    tlm_config cfg;
    die_on(tlm_config_preset("tiny", &cfg), "tiny");
    return cfg;
}

/* ---- bucket plans --------------------------------------------------------------------------------- */

/* the plan tiles [0, flat_numel) in descending offset, ready groups nondecreasing, each bucket's span
 * within groups complete by its ready group; with ZeRO equal pieces of whole lines and one tail at most */
static bool plan_ok(const tlm_param_layout *l, const tlm_ddp_bucket *b, int n, int zero_ranks, char *why,
                    size_t why_n) {
    size_t hi = l->flat_numel;
    int tails = 0;
    for (int k = 0; k < n; k++) {
        const size_t g = 16 * (size_t)zero_ranks;
        if (b[k].offset + b[k].numel != hi || b[k].numel == 0)
            return snprintf(why, why_n, "bucket %d [%zu, +%zu) does not end at %zu", k, b[k].offset, b[k].numel, hi), false;
        if (k > 0 && b[k].ready_group < b[k - 1].ready_group)
            return snprintf(why, why_n, "bucket %d ready before bucket %d", k, k - 1), false;
        const tlm_param_group *rg = &l->groups[b[k].ready_group];
        if (b[k].offset < rg->offset || b[k].offset >= rg->offset + rg->numel)
            return snprintf(why, why_n, "bucket %d's first float is not in its ready group", k), false;
        if (zero_ranks && b[k].sharded && (b[k].numel % g || b[k].offset % g))
            return snprintf(why, why_n, "ZeRO bucket %d [%zu, +%zu) not in lines of %zu", k, b[k].offset, b[k].numel, g),
                   false;
        if (zero_ranks && !b[k].sharded && (tails++ || k != 0 || b[k].numel >= g))
            return snprintf(why, why_n, "ZeRO bucket %d is a tail of %zu floats", k, b[k].numel), false;
        if (!zero_ranks && b[k].sharded) return snprintf(why, why_n, "bucket %d sharded without ZeRO", k), false;
        hi = b[k].offset;
    }
    if (hi != 0) return snprintf(why, why_n, "the plan stops at %zu, not 0", hi), false;
    return true;
}

static void test_plans(void) {
    const tlm_config cfg = tiny();
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, &cfg), "layout");
    tlm_ddp_bucket *b = NULL;
    int n = 0;
    char why[200] = "";
    const int head = l.num_tensors - 1; /* lm_head: the first tensor the backward completes */
    const size_t lm_head_bytes = l.tensors[head].numel * sizeof(float);

    die_on(tlm_ddp_plan_buckets(&l, 0, 0, &b, &n), "plan");
    bool one_each = n == l.num_tensors;
    for (int k = 0; k < n && one_each; k++) one_each = b[k].num_tensors == 1 && b[k].offset == l.tensors[head - k].offset;
    RCHECK(one_each && plan_ok(&l, b, n, 0, why, sizeof why), "cap 0 (naive, overlap): %d buckets, one per tensor in "
           "completion order, tiling the flat buffer %s", n, why);
    free(b);

    die_on(tlm_ddp_plan_buckets(&l, SIZE_MAX, 0, &b, &n), "plan");
    RCHECK(n == 1 && b[0].offset == 0 && b[0].numel == l.flat_numel && b[0].ready_group == l.num_groups - 1 &&
               b[0].num_tensors == l.num_tensors, "flat: one bucket of %zu floats, ready with the embedding", l.flat_numel);
    free(b);

    /* a cap below lm_head's bytes: lm_head alone (a tensor larger than the bucket) */
    die_on(tlm_ddp_plan_buckets(&l, lm_head_bytes / 2, 0, &b, &n), "plan");
    RCHECK(n > 2 && b[0].num_tensors == 1 && b[0].offset == l.tensors[head].offset && plan_ok(&l, b, n, 0, why, sizeof why),
           "cap %zu B < lm_head's %zu B: lm_head alone in the first bucket; %d buckets %s", lm_head_bytes / 2,
           lm_head_bytes, n, why);
    free(b);

    /* a cap of exactly lm_head's bytes: a bucket of one tensor, closed by reaching the cap */
    die_on(tlm_ddp_plan_buckets(&l, lm_head_bytes, 0, &b, &n), "plan");
    RCHECK(n > 1 && b[0].num_tensors == 1 && b[0].numel == l.flat_numel - l.tensors[head].offset &&
               plan_ok(&l, b, n, 0, why, sizeof why),
           "cap = lm_head's %zu B: lm_head a bucket of its own (%zu floats) %s", lm_head_bytes, b[0].numel, why);
    free(b);

    /* 10 KiB: ln1 (256 B) of layer 1 joins layer 0's w2: a bucket over two groups, ready with layer 0's */
    die_on(tlm_ddp_plan_buckets(&l, 10240, 0, &b, &n), "plan");
    const int ln1 = tlm_layout_find(&l, "layers.1.ln1.weight"), w2 = tlm_layout_find(&l, "layers.0.ffn.w2.weight");
    int across = -1;
    for (int k = 0; k < n; k++)
        if (b[k].offset == l.tensors[w2].offset) across = k;
    RCHECK(across >= 0 && b[across].num_tensors == 2 && b[across].offset + b[across].numel > l.tensors[ln1].offset &&
               b[across].ready_group == tlm_layout_group_of(&l, w2) && plan_ok(&l, b, n, 0, why, sizeof why),
           "cap 10 KiB: layers.1.ln1 and layers.0.ffn.w2 share a bucket, ready with layer 0 (group %d); %d buckets %s",
           across >= 0 ? b[across].ready_group : -1, n, why);
    free(b);

    /* ZeRO: boundaries in lines of 16 N floats, equal pieces, the top bucket's tail all-reduced */
    const int ranks[] = {2, 3, 4, 8};
    const size_t caps[] = {0, 10240, lm_head_bytes, SIZE_MAX};
    bool all_ok = true, saw_tail = false;
    for (int i = 0; i < 4 && all_ok; i++)
        for (int j = 0; j < 4 && all_ok; j++) {
            die_on(tlm_ddp_plan_buckets(&l, caps[j], ranks[i], &b, &n), "plan");
            all_ok = plan_ok(&l, b, n, ranks[i], why, sizeof why);
            saw_tail |= !b[0].sharded;
            if (!all_ok) snprintf(why + strlen(why), sizeof why - strlen(why), " (%d ranks, cap %zu)", ranks[i], caps[j]);
            free(b);
        }
    RCHECK(all_ok && saw_tail, "ZeRO plans for 2, 3, 4, 8 ranks x 4 caps: pieces of whole 64-byte lines, a tail "
           "only at the top (one seen: %d) %s", saw_tail, why);

    /* the memory plan of one rank: one rank changes nothing; ZeRO-1 the moments; bf16 the staging */
    const tlm_run_config run = {.precision = TLM_PRECISION_FP32, .attention = TLM_ATTENTION_NAIVE};
    tlm_memory_estimate one, e;
    die_on(tlm_model_memory_estimate(be, &cfg, &run, 2, 16, &one), "estimate");
    tlm_ddp_config dz = tlm_ddp_defaults();
    dz.zero = 1;
    e = one;
    die_on(tlm_ddp_memory_estimate(&cfg, &run, &dz, 1, &e), "ddp estimate");
    bool same = memcmp(&e, &one, sizeof e) == 0;
    e = one;
    die_on(tlm_ddp_memory_estimate(&cfg, &run, &dz, 4, &e), "ddp estimate");
    die_on(tlm_ddp_plan_buckets(&l, tlm_ddp_cap_bytes(&dz), 4, &b, &n), "plan");
    const size_t shard = tlm_ddp_shard_numel(b, n, 4);
    free(b);
    RCHECK(same && e.optimizer == 2 * shard * sizeof(float) && shard < l.flat_numel / 4 + 16 * 4 &&
               e.total == one.total - one.optimizer + e.optimizer && e.workspace == one.workspace,
           "memory plan, ZeRO-1 over 4 ranks: moments %zu B of one process's %zu (1 rank: unchanged)", e.optimizer,
           one.optimizer);
    dz = tlm_ddp_defaults();
    dz.reduce_dtype = TLM_DTYPE_BF16;
    e = one;
    die_on(tlm_ddp_memory_estimate(&cfg, &run, &dz, 2, &e), "ddp estimate");
    RCHECK(e.workspace == one.workspace + l.flat_numel * 2 && e.total == one.total + l.flat_numel * 2 &&
               e.optimizer == one.optimizer, "memory plan, bf16 reduction: the staging buffer %zu B", l.flat_numel * 2);
    dz.zero = 1;
    tlm_run_config oib = run;
    oib.optimizer_in_backward = true;
    e = one;
    rcheck_status(tlm_ddp_memory_estimate(&cfg, &oib, &dz, 2, &e), TLM_ERR_UNSUPPORTED, "optimizer-in-backward",
                  "memory plan of ZeRO-1 with optimizer-in-backward");
    tlm_layout_free(&l);

    const tlm_ddp_config ok = tlm_ddp_defaults();
    tlm_ddp_config bad = ok;
    bad.bucket_mb = 0;
    rcheck_status(tlm_ddp_config_check(&bad), TLM_ERR_INVALID_ARGUMENT, "bucket size", "--bucket-mb 0");
    bad = ok;
    bad.zero = 2;
    rcheck_status(tlm_ddp_config_check(&bad), TLM_ERR_INVALID_ARGUMENT, "stage", "ZeRO stage 2");
    bad = ok;
    bad.reduce_dtype = TLM_DTYPE_F16;
    rcheck_status(tlm_ddp_config_check(&bad), TLM_ERR_INVALID_ARGUMENT, "fp32 or bf16", "fp16 gradient reduction");
    tlm_ddp_mode mode;
    RCHECK(tlm_ddp_mode_parse("bucketed", &mode) && mode == TLM_DDP_BUCKETED && !tlm_ddp_mode_parse("ring", &mode) &&
               strcmp(tlm_ddp_mode_name(TLM_DDP_OVERLAP), "overlap") == 0, "mode names parse and print");
}

/* ---- training ----------------------------------------------------------------------------------------- */

enum { STEPS = 5, ROWS_PER_RANK = 2, CTX = 16 };

typedef struct {
    float *params;              /* (flat_numel) host copy of the weights after the run */
    float loss[STEPS];
    double norm[STEPS];
    tlm_ddp_timing timing;      /* the last step's */
    tlm_ddp_plan_info plan;     /* its buckets are gone with the reducer */
    int num_buckets, sharded;   /* of the plan */
    size_t optimizer_bytes;     /* tracked OPTIMIZER bytes after the run */
    size_t tail;                /* ZeRO: the floats of the top bucket's tail (0: none) */
    long lowp_off;              /* elements of the GEMM copy that are not the weights rounded (-1: no copy) */
} run_result;

/* gradient accumulation: the micro-batches of a step of the runs with a communicator (train: the one-process
 * reference takes them as one batch of accum x its rows) */
static int accum = 1;
/* the bf16 reduction's path of today: the model's gradient sink detached after the reducer attached it, so
 * every gradient is float32 and cast into the staging buffer (the reference of the direct write) */
static bool cast_path = false;

/* upd: 0 the AdamW step after the backward, 1 (true) in it (optimizer_in_backward), 2 beside it (optimizer_overlap) */
static tlm_model *new_model(tlm_precision p, int upd, uint64_t seed, int micro_batches) {
    const tlm_config cfg = tiny();
    const tlm_run_config run = {.precision = p, .attention = TLM_ATTENTION_NAIVE, .optimizer_in_backward = upd == 1,
                                .optimizer_overlap = upd == 2, .grad_accum_steps = micro_batches};
    tlm_model *m = NULL;
    die_on(tlm_model_create(&m, &cfg, &run, be), "model");
    die_on(tlm_model_init_random(m, seed), "init");
    return m;
}

static float *host_params(const tlm_model *m) {
    float *p = malloc(m->layout.flat_numel * sizeof(float));
    TLM_ASSERT(p);
    tlm_copy_to_host(be, p, m->params, m->layout.flat_numel * sizeof(float));
    return p;
}

/* the elements of the model's GEMM copy (bf16/fp16) that are not its weights p (host) rounded to nearest even:
 * 0 when the copy is up to date; -1 when there is none or the model marks it stale (the next forward casts) */
static long lowp_off(const tlm_model *m, const float *p) {
    if (!tlm_model_weight_copy_current(m)) return -1;
    const size_t n = m->layout.flat_numel;
    uint16_t *lp = malloc(n * sizeof *lp), *want = malloc(n * sizeof *want);
    TLM_ASSERT(lp && want);
    tlm_f32_to_16_n(p, want, n, m->run.precision == TLM_PRECISION_BF16);
    /* a copy in the arena has none of the embedding, which no GEMM reads: its span is not compared */
    const tlm_param_group *emb = &m->layout.groups[m->layout.num_groups - 1];
    if (!m->params_lp) memcpy(lp + emb->offset, want + emb->offset, emb->numel * sizeof *lp);
    if (tlm_model_weight_copy_to_host(m, lp) != TLM_OK) return -1;
    long off = 0;
    for (size_t i = 0; i < n; i++) off += lp[i] != want[i];
    free(lp);
    free(want);
    return off;
}

/* 5 steps of tlm_train over the global batch: alone (c NULL: all rows) or as this rank (its rows, the
 * reducer cfg); each rank's model starts from its own seed, so only the broadcast makes them agree */
static run_result train(tlm_comm *c, const tlm_ddp_config *cfg, tlm_precision p) {
    run_result r = {0};
    tlm_model *m = new_model(p, false, c ? 7 + (uint64_t)rank : 7, c ? accum : 1);
    tlm_train_config rc = tlm_train_defaults(STEPS);
    rc.batch_size = c ? ROWS_PER_RANK : ROWS_PER_RANK * nranks * accum;
    rc.grad_accum_steps = c ? accum : 1;
    rc.context_length = CTX;
    rc.lr_max = 3e-3;
    rc.max_grad_norm = 0.5; /* the tiny model's norm is above it: every step clips */
    rc.seed = 3;
    tlm_train t;
    die_on(tlm_train_init(&t, m, &rc, &data, NULL, c ? rank : 0, c ? nranks : 1), "train init");
    tlm_ddp *d = NULL;
    if (c) {
        die_on(tlm_ddp_create(&d, m, c, cfg), "ddp");
        if (cast_path) tlm_model_set_grad_sink(m, NULL);
        t.ddp = d;
        tlm_ddp_plan(d, &r.plan);
        r.num_buckets = r.plan.num_buckets;
        for (int k = 0; k < r.num_buckets; k++) r.sharded += r.plan.buckets[k].sharded;
        r.tail = cfg->zero && !r.plan.buckets[0].sharded ? r.plan.buckets[0].numel : 0;
    }
    for (int i = 0; i < STEPS; i++) {
        tlm_train_record rec;
        die_on(tlm_train_step(&t, &rec), "train step");
        r.loss[i] = rec.loss;
        r.norm[i] = rec.grad_norm;
    }
    if (d) die_on(tlm_ddp_last_timing(d, &r.timing), "timing");
    r.params = host_params(m);
    r.lowp_off = lowp_off(m, r.params);
    r.optimizer_bytes = tlm_mem_stats_now(be).current[TLM_MEM_OPTIMIZER];
    tlm_ddp_free(d);
    tlm_train_free(&t);
    tlm_model_free(m);
    return r;
}

static double worst_series(const float *a, const float *b, const double *na, const double *nb) {
    double w = 0;
    for (int i = 0; i < STEPS; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]) / fabs((double)b[i]));
        w = fmax(w, fabs(na[i] - nb[i]) / fabs(nb[i]));
    }
    return w;
}

/* every rank's weights are the same bits: each rank's hash gathered */
static bool same_on_every_rank(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ULL, *all = malloc(sizeof(uint64_t) * (size_t)nranks);
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
    die_on(tlm_comm_host_all_gather(comm, &h, all, sizeof h), "gather");
    bool same = true;
    for (int r = 0; r < nranks; r++) same &= all[r] == h;
    free(all);
    return same;
}

typedef struct {
    tlm_ddp_mode mode;
    double bucket_mb;
} mode_case;

static void test_training(void) {
    const tlm_config cfg = tiny();
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, &cfg), "layout");
    const size_t n = l.flat_numel;
    run_result ref = train(NULL, NULL, TLM_PRECISION_FP32);
    const char *where;
    const double tol = 1e-6;
    /* 10 KiB and lm_head's 128 KiB: the edge cases of the plans above; 25 MiB: one bucket */
    const mode_case cases[] = {{TLM_DDP_NAIVE, 25}, {TLM_DDP_FLAT, 25}, {TLM_DDP_OVERLAP, 25},
                               {TLM_DDP_BUCKETED, 25}, {TLM_DDP_BUCKETED, 10240.0 / 1048576},
                               {TLM_DDP_BUCKETED, 0.125}, {TLM_DDP_BUCKETED, 0.05}};
    run_result bucketed = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result z[2];
        for (int zero = 0; zero < 2; zero++) {
            tlm_ddp_config dc = tlm_ddp_defaults();
            dc.mode = cases[i].mode;
            dc.bucket_mb = cases[i].bucket_mb;
            dc.zero = zero;
            run_result *r = &z[zero];
            *r = train(comm, &dc, TLM_PRECISION_FP32);
            const double e = test_worst_tensor_error(&l, r->params, ref.params, &where), es = worst_series(r->loss, ref.loss, r->norm,
                                                                                                  ref.norm);
            RCHECK(e <= tol && es <= tol && same_on_every_rank(r->params, n),
                   "%d ranks %-8s %7.4f MiB zero %d (%2d buckets): weights vs one process %.1e (%s), losses and norms "
                   "%.1e (limit %.0e); every rank the same bits", nranks, tlm_ddp_mode_name(dc.mode), dc.bucket_mb, zero,
                   r->num_buckets, e, where, es, tol);
            /* the collectives of the last step: each bucket once, and ZeRO's all-gathers */
            const int want = r->num_buckets + r->sharded;
            const bool per_tensor = dc.mode == TLM_DDP_NAIVE || dc.mode == TLM_DDP_OVERLAP;
            RCHECK(r->timing.collectives == want && (zero || (dc.mode == TLM_DDP_FLAT ? r->num_buckets == 1 : !per_tensor ||
                                                              r->num_buckets == l.num_tensors)),
                   "  %d collectives in a step: %d buckets%s", r->timing.collectives, r->num_buckets,
                   zero ? ", the sharded ones all-gathered" : "");
            if (on_cpu) {
                const tlm_ddp_timing *t = &r->timing;
                const bool overlapped = dc.mode == TLM_DDP_OVERLAP || dc.mode == TLM_DDP_BUCKETED;
                RCHECK(t->exposed_ms > 0 && (overlapped ? t->in_backward_ms > 0 : t->in_backward_ms == 0) &&
                           (zero ? t->params_ms > 0 : t->params_ms == 0),
                       "  MPI timing: %.3f ms in the backward, %.3f after, %.3f gathering parameters", t->in_backward_ms,
                       t->after_backward_ms, t->params_ms);
            }
        }
        const double ez = test_worst_tensor_error(&l, z[1].params, z[0].params, &where);
        const size_t want_opt = 2 * z[1].plan.optimizer_numel * sizeof(float);
        const size_t tail = z[1].tail;
        RCHECK(ez <= tol && z[1].optimizer_bytes == want_opt && z[1].plan.optimizer_numel == (n - tail) / nranks + tail,
               "  ZeRO-1 = DDP: %.1e; its moments %zu B = 2 x 4 x ((%zu - tail %zu) / %d + tail), DDP's %zu B", ez,
               z[1].optimizer_bytes, n, tail, nranks, z[0].optimizer_bytes);
        /* the memory plan (tlm bench --max-context) counts the moments the reducer allocated */
        tlm_ddp_config dz = tlm_ddp_defaults();
        dz.mode = cases[i].mode;
        dz.bucket_mb = cases[i].bucket_mb;
        dz.zero = 1;
        const tlm_run_config run = {.precision = TLM_PRECISION_FP32, .attention = TLM_ATTENTION_NAIVE};
        tlm_memory_estimate e;
        die_on(tlm_model_memory_estimate(be, &cfg, &run, ROWS_PER_RANK, CTX, &e), "estimate");
        const size_t whole = e.optimizer;
        die_on(tlm_ddp_memory_estimate(&cfg, &run, &dz, nranks, &e), "ddp estimate");
        RCHECK(e.optimizer == z[1].optimizer_bytes && whole == 2 * n * sizeof(float) &&
                   e.total == e.parameters + e.weight_copy + e.optimizer + e.arena + e.workspace,
               "  the memory plan's ZeRO-1 moments %zu B = those allocated (one process's %zu B)", e.optimizer, whole);
        free(z[1].params);
        if (i == 3) bucketed = z[0];
        else free(z[0].params);
    }

    /* bf16 gradient reduction: close to the fp32 reduction, and not the same */
    for (int zero = 0; zero < 2; zero++) {
        tlm_ddp_config dc = tlm_ddp_defaults();
        dc.reduce_dtype = TLM_DTYPE_BF16;
        dc.bucket_mb = 0.05;
        dc.zero = zero;
        run_result r = train(comm, &dc, TLM_PRECISION_FP32);
        const double e = test_worst_tensor_error(&l, r.params, ref.params, &where);
        RCHECK(e <= 5e-3 && e > 1e-7 && r.plan.staging_bytes == n * 2,
               "bf16 reduction (bucketed 0.05 MiB, zero %d): weights vs one process in fp32 %.1e (%s; limit 5e-3, and "
               "above 1e-7: the gradients were rounded), staging %zu B", zero, e, where, r.plan.staging_bytes);
        free(r.params);
    }

    /* autocast bf16 and fp16 (loss scaling, the overflow count combined): the first loss as one process's in
     * that mode (only the order of the sums differs); the gradients differ by the mode's rounding of the loss
     * gradient 1/n (n the rows of a rank: a power of 2 apart only for 2^k ranks), and later steps by the GEMM
     * copies' (a weight 1e-7 apart may round to the next bf16/fp16 value): within one ulp of the format */
    const tlm_precision modes[] = {TLM_PRECISION_BF16, TLM_PRECISION_FP16};
    const double ulp[] = {0x1p-8, 0x1p-11};
    for (int k = 0; k < 2; k++)
        for (int zero = 0; zero < 2; zero++) {
            run_result one = train(NULL, NULL, modes[k]);
            tlm_ddp_config dc = tlm_ddp_defaults();
            dc.zero = zero;
            run_result r = train(comm, &dc, modes[k]);
            const double e = test_worst_tensor_error(&l, r.params, one.params, &where), es = worst_series(r.loss, one.loss, r.norm,
                                                                                              one.norm);
            const double e1 = fabs((double)r.loss[0] - one.loss[0]) / one.loss[0];
            RCHECK(e1 <= 1e-6 && e <= ulp[k] && es <= ulp[k], "%s, bucketed, zero %d: first loss vs one process %.1e "
                   "(limit 1e-6); after 5 steps weights %.1e (%s), losses and norms %.1e (limit %.1e: one ulp)",
                   tlm_precision_name(modes[k]), zero, e1, e, where, es, ulp[k]);
            /* ZeRO-1 writes its pieces' copy in the update and casts the gathered ones (ddp.c's zero_update) */
            RCHECK(r.lowp_off == 0, "%s, bucketed, zero %d: after the last step the GEMM copy is the weights rounded "
                   "(%ld elements differ; -1: no copy, or marked stale)", tlm_precision_name(modes[k]), zero,
                   r.lowp_off);
            free(r.params);
            free(one.params);
        }
    free(bucketed.params);
    free(ref.params);
    tlm_layout_free(&l);
}

/* bf16 precision with the bf16 reduction: the weight-gradient GEMMs write bf16 into the staging buffer (model.h,
 * the gradient sink; ddp.h) and only the rest is cast, against the same run casting every gradient: the same
 * bits (the GEMM's fp32 result rounded once is the cast of the fp32 gradient; OpenBLAS computes that result
 * alike whichever buffer it writes), for the bucketed, naive and flat modes and ZeRO-1; fp32 and fp16 precision
 * and gradient accumulation keep the cast of everything */
static void test_direct_bf16(void) {
    const tlm_config cfg = tiny();
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, &cfg), "layout");
    size_t weights = 0; /* the floats of the linear layers' weights: every 2-D tensor but the embedding */
    for (int t = 0; t < l.num_tensors; t++)
        if (l.tensors[t].ndim == 2 && strcmp(l.tensors[t].name, "token_embeddings.weight") != 0)
            weights += l.tensors[t].numel;
    const size_t n = l.flat_numel;
    const struct {
        tlm_ddp_mode mode;
        int zero;
    } cases[] = {{TLM_DDP_BUCKETED, 0}, {TLM_DDP_BUCKETED, 1}, {TLM_DDP_NAIVE, 0}, {TLM_DDP_FLAT, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tlm_ddp_config dc = tlm_ddp_defaults();
        dc.mode = cases[i].mode;
        dc.bucket_mb = 0.05;
        dc.zero = cases[i].zero;
        dc.reduce_dtype = TLM_DTYPE_BF16;
        run_result r = train(comm, &dc, TLM_PRECISION_BF16);
        cast_path = true;
        run_result c = train(comm, &dc, TLM_PRECISION_BF16);
        cast_path = false;
        const bool same = memcmp(r.params, c.params, n * sizeof(float)) == 0 &&
                          memcmp(r.loss, c.loss, sizeof r.loss) == 0 && memcmp(r.norm, c.norm, sizeof r.norm) == 0;
        /* cuBLASLt may pick another algorithm for a bf16 D than for a float32 one (another order of the fp32
         * sums: a rounding may land one bf16 ulp apart, test_gpu_ops counts them): on GPUs close, not equal */
        const char *where;
        const double e = test_worst_tensor_error(&l, r.params, c.params, &where);
        RCHECK((on_cpu ? same : e <= 1e-4) && r.timing.direct_bf16 && !c.timing.direct_bf16 &&
                   r.timing.cast_floats == n - weights && c.timing.cast_floats == n && same_on_every_rank(r.params, n),
               "bf16, bf16 reduction, %-8s zero %d: the weight gradients written in bf16 by their GEMMs (%s; %zu of %zu "
               "floats cast a step, want %zu) = every gradient cast (%s; %zu cast): weights, losses and norms %s "
               "(weights %.1e, %s; %s)", tlm_ddp_mode_name(dc.mode), dc.zero,
               r.timing.direct_bf16 ? "taken" : "NOT taken", r.timing.cast_floats, n, n - weights,
               c.timing.direct_bf16 ? "direct" : "cast", c.timing.cast_floats, same ? "the same bits" : "differ", e,
               where && *where ? where : "every tensor", on_cpu ? "the CPU: the same bits" : "GPU: limit 1e-4");
        free(r.params);
        free(c.params);
    }
    /* where the direct write is not taken: fp32 precision (no bf16 GEMM output from fp32 operands), and the
     * micro-batches of accumulation (they add in float32) */
    tlm_ddp_config dc = tlm_ddp_defaults();
    dc.reduce_dtype = TLM_DTYPE_BF16;
    run_result f = train(comm, &dc, TLM_PRECISION_FP32), h = train(comm, &dc, TLM_PRECISION_FP16);
    accum = 2;
    run_result a = train(comm, &dc, TLM_PRECISION_BF16);
    accum = 1;
    RCHECK(!f.timing.direct_bf16 && f.timing.cast_floats == n && !h.timing.direct_bf16 && h.timing.cast_floats == n &&
               !a.timing.direct_bf16 && a.timing.cast_floats == n,
           "bf16 reduction: fp32 and fp16 precision, and bf16 with 2 micro-batches, cast every gradient (%zu, %zu and "
           "%zu of %zu)", f.timing.cast_floats, h.timing.cast_floats, a.timing.cast_floats, n);
    free(f.params);
    free(h.params);
    free(a.params);
    tlm_layout_free(&l);
}

/* gradient accumulation: N ranks with `micro` micro-batches of ROWS_PER_RANK rows a step against one process
 * with the whole global batch (micro x ROWS_PER_RANK x N rows) as one batch; the reduction once a step, in
 * the last micro-batch's backward (the collectives of the step: each bucket once), for every mode, ZeRO-1 and
 * the bf16 reduction */
static void test_accumulation(int micro) {
    const tlm_config cfg = tiny();
    tlm_param_layout l;
    die_on(tlm_layout_build(&l, &cfg), "layout");
    accum = micro;
    run_result ref = train(NULL, NULL, TLM_PRECISION_FP32);
    const struct {
        tlm_ddp_mode mode;
        int zero;
        tlm_dtype reduce;
    } cases[] = {{TLM_DDP_BUCKETED, 0, TLM_DTYPE_F32}, {TLM_DDP_BUCKETED, 1, TLM_DTYPE_F32},
                 {TLM_DDP_NAIVE, 0, TLM_DTYPE_F32},    {TLM_DDP_FLAT, 0, TLM_DTYPE_F32},
                 {TLM_DDP_OVERLAP, 1, TLM_DTYPE_F32},  {TLM_DDP_BUCKETED, 1, TLM_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tlm_ddp_config dc = tlm_ddp_defaults();
        dc.mode = cases[i].mode;
        dc.bucket_mb = 0.05;
        dc.zero = cases[i].zero;
        dc.reduce_dtype = cases[i].reduce;
        run_result r = train(comm, &dc, TLM_PRECISION_FP32);
        const char *where;
        const bool bf16 = cases[i].reduce == TLM_DTYPE_BF16;
        const double tol = bf16 ? 5e-3 : 1e-6;
        const double e = test_worst_tensor_error(&l, r.params, ref.params, &where);
        const double es = worst_series(r.loss, ref.loss, r.norm, ref.norm);
        RCHECK(e <= tol && (bf16 || es <= tol) && same_on_every_rank(r.params, l.flat_numel) &&
                   r.timing.collectives == r.num_buckets + r.sharded,
               "%d ranks x %d micro-batches of %d rows, %-8s zero %d reduce %s: weights vs one process on the %d rows "
               "%.1e (%s), losses and norms %.1e (limit %.0e); %d collectives in the step (%d buckets, each once%s)", nranks, micro,
               ROWS_PER_RANK, tlm_ddp_mode_name(dc.mode), dc.zero, bf16 ? "bf16" : "fp32",
               micro * ROWS_PER_RANK * nranks, e, where, es, tol, r.timing.collectives, r.num_buckets,
               dc.zero ? ", and the all-gathers" : "");
        free(r.params);
    }
    accum = 1;
    free(ref.params);
    tlm_layout_free(&l);
}

/* optimizer-in-backward: each group all-reduced before its update; 3 steps of forward and backward by
 * hand (tlm_train refuses it: no clipping), against one process on the global batch */
/* the update in the backward (upd 1: optimizer-in-backward) or beside it (2: overlapped, each bucket's
 * update after its average), N ranks against one process doing the same */
static void test_update_in_backward(int upd, tlm_ddp_mode mode, double bucket_mb, const char *name) {
    tlm_model *one = new_model(TLM_PRECISION_FP32, upd, 7, 1), *m = new_model(TLM_PRECISION_FP32, upd, 7 + rank, 1);
    tlm_ddp *d = NULL;
    tlm_ddp_config dc = tlm_ddp_defaults();
    dc.mode = mode;
    dc.bucket_mb = bucket_mb;
    die_on(tlm_ddp_create(&d, m, comm, &dc), "ddp");
    const int B = ROWS_PER_RANK * nranks;
    int32_t *x = malloc(sizeof(int32_t) * B * CTX), *y = malloc(sizeof(int32_t) * B * CTX);
    const tlm_adamw_config opt = tlm_adamw_defaults();
    for (int step = 0; step < 3; step++) {
        const tlm_batch_draw all = {5, step, 0, 1};
        die_on(tlm_tokens_get_batch(&data, B, CTX, all, x, y), "batch");
        float loss;
        die_on(tlm_model_forward(one, x, y, B, CTX, &loss), "forward");
        die_on(tlm_model_backward(one), "backward");
        die_on(tlm_model_adamw_step(one, &opt), "step");
        const size_t mine = (size_t)rank * ROWS_PER_RANK * CTX;
        die_on(tlm_model_forward(m, x + mine, y + mine, ROWS_PER_RANK, CTX, &loss), "forward");
        die_on(tlm_model_backward(m), "backward");
        die_on(tlm_ddp_sync_grads(d), "sync");
        die_on(tlm_ddp_adamw_step(d, &opt), "step");
    }
    float *a = host_params(m), *b = host_params(one);
    const char *where;
    const double e = test_worst_tensor_error(&m->layout, a, b, &where);
    RCHECK(e <= 1e-6, "%s, %d ranks: weights after 3 steps vs one process %.1e (%s; limit 1e-6)", name, nranks, e,
           where);
    free(a);
    free(b);
    free(x);
    free(y);
    tlm_ddp_free(d);
    tlm_model_free(m);
    tlm_model_free(one);
}

/* the overlapped optimizer (each bucket's update after its average) with bf16 precision and the bf16 reduction,
 * bucketed: 3 steps by hand with the weight gradients written into the staging buffer, or (cast) every gradient
 * cast; this rank's weights after them */
static float *overlapped_bf16(bool cast, tlm_ddp_timing *t) {
    tlm_model *m = new_model(TLM_PRECISION_BF16, 2, 7 + rank, 1);
    tlm_ddp *d = NULL;
    tlm_ddp_config dc = tlm_ddp_defaults();
    dc.bucket_mb = 0.05;
    dc.reduce_dtype = TLM_DTYPE_BF16;
    die_on(tlm_ddp_create(&d, m, comm, &dc), "ddp");
    if (cast) tlm_model_set_grad_sink(m, NULL);
    int32_t *x = malloc(sizeof(int32_t) * ROWS_PER_RANK * CTX), *y = malloc(sizeof(int32_t) * ROWS_PER_RANK * CTX);
    const tlm_adamw_config opt = tlm_adamw_defaults();
    for (int step = 0; step < 3; step++) {
        const tlm_batch_draw mine = {5, step, rank, nranks};
        die_on(tlm_tokens_get_batch(&data, ROWS_PER_RANK, CTX, mine, x, y), "batch");
        float loss;
        die_on(tlm_model_forward(m, x, y, ROWS_PER_RANK, CTX, &loss), "forward");
        die_on(tlm_model_backward(m), "backward");
        die_on(tlm_ddp_sync_grads(d), "sync");
        die_on(tlm_ddp_adamw_step(d, &opt), "step");
    }
    die_on(tlm_ddp_last_timing(d, t), "timing");
    float *p = host_params(m);
    free(x);
    free(y);
    tlm_ddp_free(d);
    tlm_model_free(m);
    return p;
}

static void test_overlapped_bf16(void) {
    tlm_ddp_timing td, tc;
    float *direct = overlapped_bf16(false, &td), *cast = overlapped_bf16(true, &tc);
    tlm_param_layout l;
    const tlm_config cfg = tiny();
    die_on(tlm_layout_build(&l, &cfg), "layout");
    const char *where;
    const double e = test_worst_tensor_error(&l, direct, cast, &where);
    const bool same = memcmp(direct, cast, l.flat_numel * sizeof(float)) == 0;
    RCHECK((on_cpu ? same : e <= 1e-4) && td.direct_bf16 && !tc.direct_bf16 && td.cast_floats < tc.cast_floats,
           "the overlapped optimizer, bf16, bf16 reduction: the weight gradients written by their GEMMs (%zu floats "
           "cast) = every gradient cast (%zu): weights %s (%.1e, %s; %s)", td.cast_floats, tc.cast_floats,
           same ? "the same bits" : "differ", e, where && *where ? where : "every tensor",
           on_cpu ? "the CPU: the same bits" : "GPU: limit 1e-4");
    free(direct);
    free(cast);
    tlm_layout_free(&l);
}

static void test_refusals(void) {
    tlm_model *m = new_model(TLM_PRECISION_FP32, true, 7, 1);
    tlm_ddp *d = NULL;
    tlm_ddp_config dc = tlm_ddp_defaults();
    dc.zero = 1;
    rcheck_status(tlm_ddp_create(&d, m, comm, &dc), TLM_ERR_UNSUPPORTED, "optimizer-in-backward",
                  "ZeRO-1 with optimizer-in-backward, refused on every rank");
    tlm_model_free(m);
    m = new_model(TLM_PRECISION_FP32, 2, 7, 1);
    rcheck_status(tlm_ddp_create(&d, m, comm, &dc), TLM_ERR_UNSUPPORTED, "overlapped optimizer",
                  "ZeRO-1 with the overlapped optimizer, refused on every rank");
    tlm_model_free(m);
    m = new_model(TLM_PRECISION_FP32, false, 7, 1);
    dc = tlm_ddp_defaults();
    dc.bucket_mb = rank == nranks - 1 ? 10 : 25;
    rcheck_status(tlm_ddp_create(&d, m, comm, &dc), TLM_ERR_INVALID_ARGUMENT, "disagree on the data-parallel",
                  "the last rank asks for 10 MiB buckets, the others 25: every rank refuses");
    dc.bucket_mb = 0;
    rcheck_status(tlm_ddp_create(&d, m, comm, &dc), TLM_ERR_INVALID_ARGUMENT, "bucket size", "--bucket-mb 0");
    RCHECK(m->grads_ready == NULL && m->comm == NULL, "a refused reducer leaves the model alone");
    tlm_model_free(m);
}

/* ZeRO-1's moments in a checkpoint: whole moments scattered into the shards (each rank its pieces and the tails)
 * and gathered back to rank 0 are the same bits, for several plans (a tail, many buckets, one); every value
 * kind rides along (-0, subnormals, the largest float). Before any update the gather gives zeros. */
static void test_moment_shards(void) {
    static const struct {
        tlm_ddp_mode mode;
        double mb;
    } plans[] = {{TLM_DDP_BUCKETED, 0.05}, {TLM_DDP_FLAT, 25}, {TLM_DDP_NAIVE, 25}};
    for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
        tlm_model *m = new_model(TLM_PRECISION_FP32, false, 7, 1);
        tlm_ddp *d = NULL;
        tlm_ddp_config dc = tlm_ddp_defaults();
        dc.mode = plans[k].mode;
        dc.bucket_mb = plans[k].mb;
        dc.zero = 1;
        die_on(tlm_ddp_create(&d, m, comm, &dc), "reducer");
        const size_t n = m->layout.flat_numel;
        float *whole = malloc(2 * n * sizeof(float)), *back = calloc(2 * n, sizeof(float));
        TLM_ASSERT(whole && back);
        const float kinds[] = {-0.0f, 1e-45f, 3.4028235e38f, -1.5f};
        for (size_t i = 0; i < 2 * n; i++) whole[i] = i % 97 == 0 ? kinds[i / 97 % 4] : (float)i * 1e-3f - 7.0f;
        tlm_status s = tlm_ddp_gather_moments(d, 0, n, rank ? NULL : back, rank ? NULL : back + n);
        bool zeros = s == TLM_OK;
        for (size_t i = 0; rank == 0 && zeros && i < 2 * n; i++) zeros = back[i] == 0.0f;
        RCHECK(zeros, "ZeRO-1 %s: the moments gathered before any update are zeros (%s)", tlm_ddp_mode_name(dc.mode),
               s == TLM_OK ? "ok" : tlm_last_error());
        s = tlm_ddp_scatter_moments(d, 0, n, whole, whole + n);
        if (s == TLM_OK) s = tlm_ddp_gather_moments(d, 0, n, rank ? NULL : back, rank ? NULL : back + n);
        RCHECK(s == TLM_OK && (rank != 0 || memcmp(whole, back, 2 * n * sizeof(float)) == 0),
               "ZeRO-1 %s (%d ranks, moments of %zu floats in exchanges of %zu): whole -> shards -> whole, the same "
               "bits", tlm_ddp_mode_name(dc.mode), nranks, n, TLM_DDP_MOMENT_CHUNK);
        /* spans that start and end inside pieces (a checkpoint's tensors; the exchanges of a larger model) */
        memset(back, 0, 2 * n * sizeof(float));
        for (size_t off = 0, len = 10007; s == TLM_OK && off < n; off += len) {
            const size_t span = off + len < n ? len : n - off;
            float *v = calloc(span, sizeof(float));
            TLM_ASSERT(v);
            s = tlm_ddp_gather_moments(d, off, span, rank ? NULL : back + off, rank ? NULL : v);
            if (rank == 0) memcpy(back + n + off, v, span * sizeof(float));
            free(v);
        }
        RCHECK(s == TLM_OK && (rank != 0 || memcmp(whole, back, 2 * n * sizeof(float)) == 0),
               "ZeRO-1 %s: gathered in spans of 10007 floats, the same bits", tlm_ddp_mode_name(dc.mode));
        free(whole);
        free(back);
        tlm_ddp_free(d);
        tlm_model_free(m);
    }
    tlm_model *m = new_model(TLM_PRECISION_FP32, false, 7, 1);
    tlm_ddp *d = NULL;
    const tlm_ddp_config dc = tlm_ddp_defaults();
    die_on(tlm_ddp_create(&d, m, comm, &dc), "reducer");
    float x = 0;
    rcheck_status(tlm_ddp_scatter_moments(d, 0, 1, &x, &x), TLM_ERR_INVALID_ARGUMENT, "ZeRO-1 only",
                  "scattering moments into a replicated reducer");
    RCHECK(!tlm_ddp_shards_optimizer(d) && !tlm_ddp_shards_optimizer(NULL), "a replicated reducer, or none, "
           "shards nothing");
    tlm_ddp_free(d);
    tlm_model_free(m);
}

int main(void) {
    tlm_comm_world w = {.rank = 0, .world_size = 1};
    if (tlm_comm_launched()) die_on(tlm_comm_init(&w, 60), "joining the run");
    rank = w.rank;
    nranks = w.world_size;
    if (!on_cpu) { /* NCCL: one GPU per rank, at least two ranks */
        int enough = nranks >= 2 && tlm_cuda_device_count() >= w.local_size, all_enough = enough;
        if (nranks > 1) { /* every rank skips, or none */
            int *v = malloc(sizeof(int) * (size_t)nranks);
            tlm_backend *cpu = NULL;
            tlm_comm *tmp = NULL;
            die_on(tlm_backend_cpu_create(&cpu, 1), "cpu");
            die_on(tlm_comm_create(&tmp, TLM_COMM_MPI, cpu, 60), "comm");
            die_on(tlm_comm_host_all_gather(tmp, &enough, v, sizeof enough), "gather");
            for (int r = 0; r < nranks; r++) all_enough &= v[r];
            free(v);
            tlm_comm_destroy(tmp);
            tlm_backend_destroy(cpu);
        }
        if (!all_enough) {
            if (rank == 0) printf("needs mpirun -np 2 or more with a GPU per rank (%d ranks, %d GPUs): skipped\n",
                                  nranks, tlm_cuda_device_count());
            tlm_comm_finalize();
            return 77;
        }
        die_on(tlm_backend_cuda_create(&be, w.local_rank), "the GPU of this rank");
    } else {
        die_on(tlm_backend_cpu_create(&be, 1), "cpu backend"); /* one thread a rank: the ranks share the cores */
    }
    if (rank == 0) printf("# %s; %d rank%s\n", be->description, nranks, nranks == 1 ? "" : "s");
    test_plans();
    data = (tlm_tokens){malloc(4096 * sizeof(int32_t)), 4096};
    test_random_ids(data.ids, 4096, 512, 17);
    if (nranks > 1) {
        die_on(tlm_comm_create(&comm, on_cpu ? TLM_COMM_MPI : TLM_COMM_NCCL, be, 60), "communicator");
        test_training();
        test_direct_bf16();
        test_accumulation(2);
        test_accumulation(3);
        test_update_in_backward(1, TLM_DDP_BUCKETED, 25, "optimizer-in-backward");
        test_update_in_backward(2, TLM_DDP_BUCKETED, 0.05, "overlapped optimizer, bucketed 0.05 MiB");
        test_update_in_backward(2, TLM_DDP_OVERLAP, 25, "overlapped optimizer, overlap (per tensor)");
        test_update_in_backward(2, TLM_DDP_FLAT, 25, "overlapped optimizer, flat (after the backward)");
        test_overlapped_bf16();
        test_refusals();
        test_moment_shards();
        tlm_comm_destroy(comm);
    } else {
        tlm_model *m = new_model(TLM_PRECISION_FP32, false, 7, 1);
        tlm_comm alone = {.rank = 0, .world_size = 1, .be = be};
        tlm_ddp *d = NULL;
        const tlm_ddp_config dc = tlm_ddp_defaults();
        rcheck_status(tlm_ddp_create(&d, m, &alone, &dc), TLM_ERR_INVALID_ARGUMENT, "world of 1",
                      "a reducer for a world of one");
        tlm_model_free(m);
    }
    free(data.ids);
    const int rc = test_finish();
    tlm_backend_destroy(be);
    if (tlm_comm_launched()) tlm_comm_finalize();
    return rc;
}
