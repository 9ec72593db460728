/* ddp.c — the data-parallel reducer (ddp.h): the parameters broadcast at the start, each bucket's
 * reduction issued from the grads-ready callback (OVERLAP, BUCKETED) or after the backward (NAIVE,
 * FLAT), once per optimizer step (with gradient accumulation in the last micro-batch's backward), on
 * the communication stream (NCCL) or in place of the caller (MPI), the compute stream ordered after
 * them; ZeRO-1's update of this rank's pieces and the all-gather of the parameters; the norm of the
 * averaged gradients; and where the step's communication time went. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddp/ddp_internal.h"
#include "tlm/ddp.h"
#include "tlm/model.h"

struct tlm_ddp {
    tlm_ddp_config cfg;
    tlm_model *m;
    tlm_comm *c;
    tlm_backend *be;
    int rank, world;
    bool nccl;                 /* asynchronous on `stream`; else MPI: synchronous, host-clock timing */
    bool overlapped;           /* OVERLAP, BUCKETED: issued from the callbacks */
    tlm_ddp_bucket *buckets;   /* [nb] in completion order */
    int nb;
    size_t *moment_off;        /* ZeRO: [nb] where bucket k's piece (or tail) sits in the shard's moments */
    size_t opt_numel;          /* ZeRO: floats per moment on this rank */
    tlm_adamw opt;             /* ZeRO: the shard's AdamW (moments of opt_numel floats) */
    double *sq;                /* ZeRO: [nb] backend float64: each piece's sum of squares (the norm) */
    uint16_t *staging;         /* (flat_numel) bf16: the compressed gradients (reduce_dtype BF16); the
                                  model's gradient sink (model.h: the weight gradients' GEMMs write there) */
    size_t *cast_spans;        /* [2 n_cast] the spans [lo, hi) of the flat layout outside the sink's
                                  tensors (RMSNorm gains, the embedding, padding), in ascending order */
    int n_cast;
    tlm_stream *stream;        /* NCCL: the communication stream */
    tlm_event **averaged;      /* NCCL, plan.update OVERLAPPED: [nb] bucket k's average is complete */
    tlm_event *ev_ready, *ev_bwd_end, *ev_comm_done, *ev_joined, *ev_upd_end, *ev_ag_joined;
    /* the step */
    int next_bucket;           /* buckets issued so far */
    bool pending;              /* a backward ran: sync_grads is due */
    bool direct;               /* the step's backward wrote the weight gradients into the staging buffer */
    bool timed_after, timed_params; /* NCCL: the step recorded those events */
    tlm_status status;         /* the first failure of a callback (returned by sync_grads) */
    double host_in_bwd, host_after, host_params; /* MPI: ms inside the collectives */
    int collectives;
    size_t bytes, cast_floats;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* ---- one reduction -------------------------------------------------------------------------------------- */

/* The span [off, off + n) of the gradients (held at g) into the staging buffer in bf16: all of it, or
 * when the backward wrote the weight gradients there (d->direct) only the spans outside them */
static void stage_span(tlm_ddp *d, const float *g, size_t off, size_t n, tlm_stream *s) {
    if (!d->direct) {
        tlm_ddp_cast(d->be, s, d->staging + off, g, n, true);
        d->cast_floats += n;
        return;
    }
    for (int i = 0; i < d->n_cast; i++) {
        const size_t lo = d->cast_spans[2 * i] > off ? d->cast_spans[2 * i] : off;
        const size_t hi = d->cast_spans[2 * i + 1] < off + n ? d->cast_spans[2 * i + 1] : off + n;
        if (lo >= hi) continue;
        tlm_ddp_cast(d->be, s, d->staging + lo, g + (lo - off), hi - lo, true);
        d->cast_floats += hi - lo;
    }
}

/* Averages the span [off, off + n) of the gradients, held at g (the flat buffer's place, or a group's
 * own with optimizer-in-backward), over the ranks, in place, on stream s: all-reduced, or (sharded)
 * reduce-scattered so that this rank's piece holds the average; bf16 through the staging buffer (the
 * span staged first, then the average cast back into g: this rank's piece when sharded). */
static tlm_status reduce_span(tlm_ddp *d, float *g, size_t off, size_t n, bool sharded, tlm_stream *s) {
    const size_t piece = sharded ? n / (size_t)d->world : n, mine = sharded ? (size_t)d->rank * piece : 0;
    const bool bf16 = d->cfg.reduce_dtype == TLM_DTYPE_BF16;
    void *buf = bf16 ? (void *)(d->staging + off) : (void *)g;
    const size_t es = bf16 ? 2 : 4;
    if (bf16) stage_span(d, g, off, n, s);
    if (sharded)
        TLM_TRY(tlm_comm_reduce_scatter(d->c, buf, (char *)buf + mine * es, piece, d->cfg.reduce_dtype,
                                        TLM_REDUCE_AVG, s));
    else
        TLM_TRY(tlm_comm_all_reduce(d->c, buf, buf, n, d->cfg.reduce_dtype, TLM_REDUCE_AVG, s));
    if (bf16) tlm_ddp_cast(d->be, s, g + mine, d->staging + off + mine, piece, false);
    d->collectives++;
    d->bytes += n * es;
    return TLM_OK;
}

/* issues buckets next_bucket.. while they are complete by group `upto` (all of them: upto INT_MAX); with
 * the overlapped optimizer each bucket's update follows its average on the model's optimizer stream */
static tlm_status issue_ready(tlm_ddp *d, int upto) {
    while (d->next_bucket < d->nb && d->buckets[d->next_bucket].ready_group <= upto) {
        const int k = d->next_bucket++;
        const tlm_ddp_bucket *b = &d->buckets[k];
        TLM_TRY(reduce_span(d, d->m->grads + b->offset, b->offset, b->numel, b->sharded, d->stream));
        if (d->m->plan.update != TLM_UPDATE_OVERLAPPED) continue;
        if (d->nccl && !d->averaged)
            return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the overlapped optimizer was turned on after the data-parallel "
                            "reducer was made (make the reducer after setting m->run)");
        if (d->nccl) tlm_event_record(d->be, d->averaged[k], d->stream);
        TLM_TRY(tlm_model_overlap_update(d->m, b->offset, b->numel, d->nccl ? d->averaged[k] : NULL));
    }
    return TLM_OK;
}

/* the communication stream waits for the compute stream's work so far (NCCL) */
static void comm_waits_compute(tlm_ddp *d) {
    if (!d->nccl) return;
    tlm_event_record(d->be, d->ev_ready, NULL);
    tlm_stream_wait_event(d->be, d->stream, d->ev_ready);
}

/* the compute stream waits for the communication stream's work so far, `mark` recorded after (NCCL) */
static void compute_waits_comm(tlm_ddp *d, tlm_event *mark) {
    if (!d->nccl) return;
    tlm_event_record(d->be, d->ev_comm_done, d->stream);
    tlm_stream_wait_event(d->be, NULL, d->ev_comm_done);
    tlm_event_record(d->be, mark, NULL);
}

/* the grads-ready callback (model.h): group gi of the layout is complete */
static void on_grads_ready(void *user, tlm_model *m, const tlm_param_group *g) {
    tlm_ddp *d = user;
    const int gi = (int)(g - m->layout.groups);
    if (gi == 0 && tlm_model_micro_batch(m) == 0) { /* a new step: its first (or only) backward pass */
        d->timed_after = d->timed_params = false;
        d->host_in_bwd = d->host_after = d->host_params = 0;
        d->collectives = 0;
        d->bytes = d->cast_floats = 0;
    }
    /* gradient accumulation: the micro-batches before the last only add into the local gradients (PyTorch
     * DDP's no_sync); the last one's backward reduces their sum, bucket by bucket as without accumulation */
    if (!tlm_model_last_micro_batch(m)) return;
    if (gi == 0) { /* the step's reduction begins */
        d->next_bucket = 0;
        d->pending = true;
        d->status = TLM_OK;
        d->direct = d->staging && tlm_model_grads_to_sink(m);
    }
    const bool in_backward = m->plan.update == TLM_UPDATE_IN_BACKWARD;
    if (d->status != TLM_OK || (!d->overlapped && !in_backward)) return;
    const double t0 = now_ms();
    if (in_backward) { /* the group's update follows on the compute stream: reduce it there */
        d->status = reduce_span(d, tlm_model_group_grads(m, gi), g->offset, g->numel, false, NULL);
    } else {
        comm_waits_compute(d);
        d->status = issue_ready(d, gi);
    }
    if (!d->nccl) d->host_in_bwd += now_ms() - t0;
}

/* ---- creation -------------------------------------------------------------------------------------------- */

static tlm_status create_streams(tlm_ddp *d) {
    if (!d->nccl) return TLM_OK;
    TLM_TRY(tlm_stream_create(d->be, &d->stream));
    if (d->m->plan.update == TLM_UPDATE_OVERLAPPED) {
        if (!(d->averaged = calloc((size_t)d->nb, sizeof *d->averaged)))
            return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the buckets' events");
        for (int k = 0; k < d->nb; k++) TLM_TRY(tlm_event_create(d->be, &d->averaged[k]));
    }
    tlm_event **ev[] = {&d->ev_ready, &d->ev_bwd_end, &d->ev_comm_done, &d->ev_joined, &d->ev_upd_end,
                        &d->ev_ag_joined};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++) TLM_TRY(tlm_event_create(d->be, ev[i]));
    return TLM_OK;
}

tlm_status tlm_ddp_agree(tlm_comm *c, tlm_status mine) {
    int *all = malloc(sizeof(int) * (size_t)c->world_size), m = (int)mine;
    char why[512];
    snprintf(why, sizeof why, "%s", tlm_last_error());
    tlm_status s = all ? tlm_comm_host_all_gather(c, &m, all, sizeof m) : TLM_ERR_OUT_OF_MEMORY;
    for (int r = 0; s == TLM_OK && r < c->world_size; r++)
        if (all[r] != TLM_OK)
            s = r == c->rank ? tlm_fail(mine, "%s", why)
                             : tlm_fail((tlm_status)all[r], "rank %d failed (its own message says why)", r);
    free(all);
    return s;
}

/* the spans of the flat layout that the backward leaves in float32 when it writes the weight gradients
 * into the staging buffer (model.h, tlm_model_sink_tensor): what stage_span casts */
static tlm_status plan_cast_spans(tlm_ddp *d) {
    const tlm_param_layout *l = &d->m->layout;
    d->cast_spans = malloc(((size_t)l->num_tensors + 1) * 2 * sizeof *d->cast_spans);
    if (!d->cast_spans) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the bf16 staging plan");
    size_t at = 0; /* the end of the last sink tensor (the layout's tensors ascend) */
    for (int t = 0; t <= l->num_tensors; t++) {
        const bool end = t == l->num_tensors;
        if (!end && !tlm_model_sink_tensor(d->m, t)) continue;
        const size_t lo = end ? l->flat_numel : l->tensors[t].offset;
        if (lo > at) {
            d->cast_spans[2 * d->n_cast] = at;
            d->cast_spans[2 * d->n_cast++ + 1] = lo;
        }
        if (!end) at = l->tensors[t].offset + l->tensors[t].numel;
    }
    return TLM_OK;
}

/* this rank's part: the plan, the shard's moments' places, the staging buffer, the stream and events */
static tlm_status local_setup(tlm_ddp *d) {
    const tlm_param_layout *l = &d->m->layout;
    const tlm_ddp_config *cfg = &d->cfg;
    TLM_TRY(tlm_ddp_plan_buckets(l, tlm_ddp_cap_bytes(cfg), cfg->zero ? d->world : 0, &d->buckets, &d->nb));
    if (cfg->zero) {
        d->moment_off = malloc((size_t)d->nb * sizeof *d->moment_off);
        if (!d->moment_off) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the shard's plan");
        for (int k = 0; k < d->nb; k++) { /* each bucket's piece, or its tail, after the ones before it */
            d->moment_off[k] = d->opt_numel;
            d->opt_numel += tlm_ddp_shard_numel(&d->buckets[k], 1, d->world);
        }
        tlm_adamw_init(&d->opt, d->be, d->opt_numel, &d->m->optimizer.config);
        d->sq = tlm_alloc(d->be, (size_t)d->nb * sizeof(double), TLM_MEM_WORKSPACE, "ddp.norm");
        if (!d->sq) return TLM_ERR_OUT_OF_MEMORY;
    } else {
        d->opt_numel = l->flat_numel;
    }
    if (cfg->reduce_dtype == TLM_DTYPE_BF16) {
        d->staging = tlm_alloc(d->be, l->flat_numel * sizeof(uint16_t), TLM_MEM_WORKSPACE, "ddp.bf16_staging");
        if (!d->staging) return TLM_ERR_OUT_OF_MEMORY;
        TLM_TRY(plan_cast_spans(d));
    }
    return create_streams(d);
}

static tlm_status setup(tlm_ddp *d) {
    tlm_model *m = d->m;
    const tlm_param_layout *l = &m->layout;
    const tlm_ddp_config *cfg = &d->cfg;
    /* the same reducer on every rank, before the first collective: a different plan would hang */
    char text[512];
    snprintf(text, sizeof text, "mode %s bucket_mb %.17g reduce %s zero %d; layout %zu floats, %d tensors; %s; "
             "update %s; micro-batches %d", tlm_ddp_mode_name(cfg->mode), cfg->bucket_mb,
             tlm_dtype_name(cfg->reduce_dtype), cfg->zero, l->flat_numel, l->num_tensors,
             tlm_precision_name(m->run.precision), tlm_update_place_name(m->plan.update),
             tlm_model_grad_accum_steps(m));
    TLM_TRY(tlm_comm_check_same(d->c, "the data-parallel configuration", text));
    TLM_TRY(tlm_ddp_config_check(cfg)); /* the same on every rank from here on */
    /* the model's plan: the callbacks run on the host every step; ZeRO's update is ours (step_plan.h) */
    TLM_TRY(tlm_model_plan_data_parallel(m, cfg->zero != 0));
    TLM_TRY(tlm_ddp_agree(d->c, local_setup(d))); /* no rank goes on to the broadcast alone */
    /* rank 0's parameters everywhere; the GEMM copy follows them in the next forward */
    TLM_TRY(tlm_comm_broadcast(d->c, m->params, m->params, l->flat_numel, TLM_DTYPE_F32, 0, NULL));
    TLM_TRY(tlm_comm_synchronize(d->c, NULL));
    tlm_model_params_changed(m, false);
    tlm_model_set_comm(m, d->c);
    tlm_model_on_grads_ready(m, on_grads_ready, d);
    if (d->staging) tlm_model_set_grad_sink(m, d->staging); /* used where tlm_model_grads_to_sink says */
    return TLM_OK;
}

tlm_status tlm_ddp_create(tlm_ddp **out, tlm_model *m, tlm_comm *c, const tlm_ddp_config *cfg) {
    *out = NULL;
    if (c->world_size < 2)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "data parallelism over a world of %d rank: nothing to reduce",
                        c->world_size);
    if (c->be != m->backend)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the communicator's backend (%s) is not the model's (%s)",
                        c->be->name, m->backend->name);
    tlm_ddp *d = calloc(1, sizeof *d);
    if (!d) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the data-parallel reducer");
    *d = (tlm_ddp){.cfg = *cfg, .m = m, .c = c, .be = m->backend, .rank = c->rank, .world = c->world_size,
                   .nccl = c->kind == TLM_COMM_NCCL,
                   .overlapped = cfg->mode == TLM_DDP_OVERLAP || cfg->mode == TLM_DDP_BUCKETED};
    const tlm_status s = setup(d);
    if (s == TLM_OK) *out = d;
    else tlm_ddp_free(d);
    return s;
}

void tlm_ddp_free(tlm_ddp *d) {
    if (!d) return;
    if (d->m->grads_ready_user == d) {
        tlm_model_on_grads_ready(d->m, NULL, NULL);
        tlm_model_set_comm(d->m, NULL);
    }
    if (d->staging && d->m->grad_sink == d->staging) tlm_model_set_grad_sink(d->m, NULL);
    if (d->stream) (void)tlm_comm_synchronize(d->c, d->stream); /* nothing of ours still queued */
    tlm_event *ev[] = {d->ev_ready, d->ev_bwd_end, d->ev_comm_done, d->ev_joined, d->ev_upd_end, d->ev_ag_joined};
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        if (ev[i]) tlm_event_destroy(d->be, ev[i]);
    for (int k = 0; d->averaged && k < d->nb; k++) tlm_event_destroy(d->be, d->averaged[k]);
    free(d->averaged);
    if (d->stream) tlm_stream_destroy(d->be, d->stream);
    tlm_free(d->be, d->staging);
    tlm_free(d->be, d->sq);
    tlm_adamw_free(&d->opt);
    free(d->moment_off);
    free(d->cast_spans);
    free(d->buckets);
    free(d);
}

void tlm_ddp_plan(const tlm_ddp *d, tlm_ddp_plan_info *out) {
    *out = (tlm_ddp_plan_info){.num_buckets = d->nb, .buckets = d->buckets, .optimizer_numel = d->opt_numel,
                               .staging_bytes = d->staging ? d->m->layout.flat_numel * sizeof(uint16_t) : 0};
}

/* ---- the step -------------------------------------------------------------------------------------------------- */

tlm_status tlm_ddp_sync_grads(tlm_ddp *d) {
    if (!d->pending) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "no backward pass to reduce the gradients of");
    d->pending = false;
    TLM_TRY(d->status);
    if (d->m->plan.update == TLM_UPDATE_IN_BACKWARD) return TLM_OK; /* each group was reduced before its update */
    const double t0 = now_ms();
    if (d->nccl) tlm_event_record(d->be, d->ev_bwd_end, NULL);
    comm_waits_compute(d); /* NAIVE, FLAT: the whole backward; the overlapped modes issued every bucket */
    TLM_TRY(issue_ready(d, d->m->layout.num_groups));
    compute_waits_comm(d, d->ev_joined);
    d->timed_after = d->nccl;
    if (!d->nccl) d->host_after = now_ms() - t0;
    return TLM_OK;
}

tlm_status tlm_ddp_grad_norm(tlm_ddp *d, void *scratch, double *norm) {
    tlm_model *m = d->m;
    if (!d->cfg.zero) return tlm_grad_norm(m, scratch, norm); /* every rank holds the average */
    if (!m->grads) return tlm_grad_norm(m, scratch, norm);   /* its message */
    tlm_memset_zero(d->be, d->sq, (size_t)d->nb * sizeof(double));
    for (int k = 0; k < d->nb; k++) {
        const tlm_ddp_bucket *b = &d->buckets[k];
        const size_t piece = b->numel / (size_t)d->world;
        if (b->sharded) tlm_sum_squares(d->be, d->sq + k, m->grads + b->offset + (size_t)d->rank * piece, piece);
        else if (d->rank == 0) tlm_sum_squares(d->be, d->sq + k, m->grads + b->offset, b->numel); /* once */
    }
    double *host = malloc(((size_t)d->nb + (size_t)d->world) * sizeof(double));
    if (!host) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the gradient norm");
    tlm_copy_to_host(d->be, host, d->sq, (size_t)d->nb * sizeof(double));
    double mine = 0, total = 0;
    for (int k = 0; k < d->nb; k++) mine += host[k];
    double *all = host + d->nb;
    const tlm_status s = tlm_comm_host_all_gather(d->c, &mine, all, sizeof mine);
    for (int r = 0; r < d->world; r++) total += all[r]; /* rank order: the same sum everywhere */
    free(host);
    TLM_TRY(s);
    float scale, clip;
    tlm_model_grad_factors(m, &scale, &clip);
    *norm = sqrt(total) / ((double)scale / clip);
    return TLM_OK;
}

/* element i of the GEMM copy (model.h's params_lp, dtype dt) */
static void *lowp_at(tlm_model *m, size_t i, tlm_dtype dt) { return (char *)m->params_lp + i * tlm_dtype_size(dt); }

/* the GEMM copy (model.h's params_lp, dtype dt) of the span [off, off + n) cast from the parameters, on the
 * communication stream after what is queued there (NCCL), else in place of the caller */
static void cast_lowp(tlm_ddp *d, tlm_model *m, size_t off, size_t n, tlm_dtype dt) {
    if (n == 0) return;
    if (d->stream) tlm_stream_ops_begin(d->be, d->stream);
    tlm_cast(d->be, lowp_at(m, off, dt), m->params + off, n, dt);
    if (d->stream) tlm_stream_ops_end(d->be);
}

/* ZeRO-1's update (tlm_model_adamw_step_by): this rank's pieces and the tails with the shard's moments,
 * each sharded bucket's parameters all-gathered as soon as its piece is updated. With a GEMM copy of the
 * parameters (bf16, fp16) the update writes its own pieces' copy as it goes (as the replicated AdamW does),
 * and the other ranks' pieces are cast on the communication stream once gathered, beside the next
 * pieces' updates, rather than the whole copy at the next forward (4 ms of xl's step on an H100). */
static tlm_status zero_update(void *user, tlm_model *m) {
    tlm_ddp *d = user;
    tlm_adamw *o = &d->opt;
    o->t = m->optimizer.t; /* the model's count is the run's (a checkpoint's, when resumed) */
    TLM_TRY(tlm_adamw_begin_step(o)); /* t += 1; the first allocates the shard's moments */
    m->optimizer.t = o->t;
    const tlm_adamw_config *h = &o->config;
    const tlm_dtype dt = m->params_lp ? tlm_precision_act_dtype(m->run.precision) : TLM_DTYPE_F32;
    float clip;
    tlm_model_grad_factors(m, NULL, &clip);
    double comm_ms = 0;
    for (int k = 0; k < d->nb; k++) {
        const tlm_ddp_bucket *b = &d->buckets[k];
        const size_t piece = b->sharded ? b->numel / (size_t)d->world : b->numel;
        const size_t at = b->offset + (b->sharded ? (size_t)d->rank * piece : 0);
        tlm_adamw_step(d->be, m->params + at, m->grads + at, clip, o->m + d->moment_off[k],
                       o->v + d->moment_off[k], piece, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, o->t,
                       dt != TLM_DTYPE_F32 ? lowp_at(m, at, dt) : NULL, dt);
        if (!b->sharded) continue; /* a tail: every rank updated it alike */
        comm_waits_compute(d);
        const double t0 = now_ms();
        TLM_TRY(tlm_comm_all_gather(d->c, m->params + at, m->params + b->offset, piece, TLM_DTYPE_F32, d->stream));
        comm_ms += now_ms() - t0;
        if (dt != TLM_DTYPE_F32) { /* the pieces before this rank's and after it */
            cast_lowp(d, m, b->offset, (size_t)d->rank * piece, dt);
            cast_lowp(d, m, at + piece, (size_t)(d->world - 1 - d->rank) * piece, dt);
        }
        d->collectives++;
        d->bytes += b->numel * sizeof(float);
    }
    if (d->nccl) tlm_event_record(d->be, d->ev_upd_end, NULL);
    compute_waits_comm(d, d->ev_ag_joined);
    d->timed_params = d->nccl;
    if (!d->nccl) d->host_params = comm_ms;
    /* without a GEMM copy kept up to date here, the next forward casts it from the gathered parameters */
    tlm_model_params_changed(m, dt != TLM_DTYPE_F32);
    return TLM_OK;
}

tlm_status tlm_ddp_adamw_step(tlm_ddp *d, const tlm_adamw_config *opt) {
    if (!d->cfg.zero) return tlm_model_adamw_step(d->m, opt);
    d->opt.config = *opt;
    return tlm_model_adamw_step_by(d->m, zero_update, d);
}

tlm_status tlm_ddp_last_timing(tlm_ddp *d, tlm_ddp_timing *t) {
    *t = (tlm_ddp_timing){.in_backward_ms = d->host_in_bwd, .after_backward_ms = d->host_after,
                          .params_ms = d->host_params, .collectives = d->collectives, .bytes = d->bytes,
                          .cast_floats = d->cast_floats, .direct_bf16 = d->direct};
    if (d->timed_after) t->after_backward_ms = tlm_event_elapsed_ms(d->be, d->ev_bwd_end, d->ev_joined);
    if (d->timed_params) t->params_ms = tlm_event_elapsed_ms(d->be, d->ev_upd_end, d->ev_ag_joined);
    t->exposed_ms = t->in_backward_ms + t->after_backward_ms + t->params_ms;
    return TLM_OK;
}

/* ---- ZeRO-1's moments in checkpoints ------------------------------------------------------------------------ */

bool tlm_ddp_shards_optimizer(const tlm_ddp *d) { return d && d->cfg.zero; }

/* The first run of [lo, hi) held by one rank under ZeRO: its length; *owner the rank (-1: a tail, every rank
 * holds it), *at where it starts in that rank's shard of the moments. The buckets tile the flat buffer. */
static size_t segment(const tlm_ddp *d, size_t lo, size_t hi, int *owner, size_t *at) {
    *owner = -1;
    *at = 0;
    for (int k = 0; k < d->nb; k++) {
        const tlm_ddp_bucket *b = &d->buckets[k];
        if (lo < b->offset || lo >= b->offset + b->numel) continue;
        size_t first = b->offset, end = b->offset + b->numel;
        if (b->sharded) {
            const size_t piece = b->numel / (size_t)d->world;
            *owner = (int)((lo - b->offset) / piece);
            first = b->offset + (size_t)*owner * piece;
            end = first + piece;
        }
        *at = d->moment_off[k] + (lo - first);
        return (hi < end ? hi : end) - lo;
    }
    return hi - lo; /* not reached */
}

/* rank r's floats of [lo, hi), as `segment` cuts them (a tail: rank 0's) */
static bool holds(int owner, int r) { return owner == r || (owner < 0 && r == 0); }

tlm_status tlm_ddp_gather_moments(tlm_ddp *d, size_t off, size_t n, float *m_out, float *v_out) {
    if (!d->cfg.zero) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the moments are gathered under ZeRO-1 only");
    const size_t chunk = TLM_DDP_MOMENT_CHUNK, W = (size_t)d->world;
    float *send = malloc(2 * chunk * sizeof(float)), *recv = malloc(2 * chunk * W * sizeof(float));
    tlm_status mine = send && recv && (d->rank != 0 || (m_out && v_out)) ? TLM_OK
                      : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for gathering the AdamW moments");
    tlm_status s = tlm_ddp_agree(d->c, mine); /* no rank enters the exchange alone */
    for (size_t lo = off; s == TLM_OK && lo < off + n; lo += chunk) {
        const size_t hi = lo + chunk < off + n ? lo + chunk : off + n;
        size_t cnt = 0, len, at = 0;
        int owner = -1;
        for (size_t i = lo; i < hi; i += len) { /* this rank's floats of the chunk, in flat order */
            len = segment(d, i, hi, &owner, &at);
            if (!holds(owner, d->rank)) continue;
            if (d->opt.m) {
                tlm_copy_to_host(d->be, send + cnt, d->opt.m + at, len * sizeof(float));
                tlm_copy_to_host(d->be, send + chunk + cnt, d->opt.v + at, len * sizeof(float));
            } else { /* before the first update: zeros, as the replicated AdamW's */
                memset(send + cnt, 0, len * sizeof(float));
                memset(send + chunk + cnt, 0, len * sizeof(float));
            }
            cnt += len;
        }
        s = tlm_comm_host_all_gather(d->c, send, recv, 2 * chunk * sizeof(float));
        if (s != TLM_OK || d->rank != 0) continue;
        size_t *used = calloc(W, sizeof *used);
        if (!used) s = tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        for (size_t i = lo; used && i < hi; i += len) { /* each rank's floats where they belong */
            len = segment(d, i, hi, &owner, &at);
            const size_t r = owner < 0 ? 0 : (size_t)owner;
            const float *from = recv + r * 2 * chunk + used[r];
            memcpy(m_out + (i - off), from, len * sizeof(float));
            memcpy(v_out + (i - off), from + chunk, len * sizeof(float));
            used[r] += len;
        }
        free(used);
    }
    free(send);
    free(recv);
    return s;
}

tlm_status tlm_ddp_scatter_moments(tlm_ddp *d, size_t off, size_t n, const void *m_in, const void *v_in) {
    if (!d->cfg.zero) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "the moments are scattered under ZeRO-1 only");
    if (!d->opt.m) { /* the shard's moments, allocated as the first update would (its count is the model's) */
        TLM_TRY(tlm_adamw_begin_step(&d->opt));
        d->opt.t = d->m->optimizer.t;
    }
    size_t len, at = 0;
    int owner = -1;
    for (size_t i = off; i < off + n; i += len) {
        len = segment(d, i, off + n, &owner, &at);
        if (owner >= 0 && owner != d->rank) continue;
        const size_t bytes = (i - off) * sizeof(float);
        tlm_copy_to_backend(d->be, d->opt.m + at, (const char *)m_in + bytes, len * sizeof(float));
        tlm_copy_to_backend(d->be, d->opt.v + at, (const char *)v_in + bytes, len * sizeof(float));
    }
    tlm_synchronize(d->be); /* the caller's buffers may go */
    return TLM_OK;
}
