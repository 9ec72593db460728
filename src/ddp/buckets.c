/* buckets.c — the data-parallel reducer's plan (ddp.h): modes and their names, the configuration's
 * check, and the buckets of a layout in the order the backward completes them, cut by PyTorch DDP's
 * size rule, with ZeRO's rounding to equal pieces and the top bucket's tail. */
#include <stdint.h>
#include <stdlib.h>

#include "tlm/ddp.h"
#include "tlm/util.h"

static const char *const mode_names[] = {"naive", "flat", "overlap", "bucketed"}; /* by tlm_ddp_mode */

const char *tlm_ddp_mode_name(tlm_ddp_mode m) { return (unsigned)m <= TLM_DDP_BUCKETED ? mode_names[m] : "?"; }

bool tlm_ddp_mode_parse(const char *name, tlm_ddp_mode *out) {
    const int i = tlm_name_index(mode_names, 4, name);
    if (i >= 0) *out = (tlm_ddp_mode)i;
    return i >= 0;
}

tlm_ddp_config tlm_ddp_defaults(void) {
    return (tlm_ddp_config){.mode = TLM_DDP_BUCKETED, .bucket_mb = 25.0, .reduce_dtype = TLM_DTYPE_F32, .zero = 0};
}

tlm_status tlm_ddp_config_check(const tlm_ddp_config *c) {
    if ((unsigned)c->mode > TLM_DDP_BUCKETED)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "unknown data-parallel mode %d (known: naive, flat, overlap, "
                        "bucketed)", (int)c->mode);
    if (!(c->bucket_mb > 0 && c->bucket_mb <= 1e7))
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "bucket size %g MiB is outside (0, 1e7]", c->bucket_mb);
    if (c->reduce_dtype != TLM_DTYPE_F32 && c->reduce_dtype != TLM_DTYPE_BF16)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "gradients are reduced in fp32 or bf16, not %s",
                        (unsigned)c->reduce_dtype < TLM_DTYPE_NUM ? tlm_dtype_name(c->reduce_dtype) : "?");
    if (c->zero != 0 && c->zero != 1)
        return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "ZeRO stage %d: tlm shards the optimizer state (stage 1) or "
                        "nothing (0); stages 2 and 3 are not built", c->zero);
    return TLM_OK;
}

size_t tlm_ddp_cap_bytes(const tlm_ddp_config *c) {
    switch (c->mode) {
    case TLM_DDP_NAIVE:
    case TLM_DDP_OVERLAP: return 0;
    case TLM_DDP_FLAT: return SIZE_MAX;
    case TLM_DDP_BUCKETED: break;
    }
    return (size_t)(c->bucket_mb * 1048576.0);
}

/* the group holding flat offset `at` */
static int group_at(const tlm_param_layout *l, size_t at) {
    for (int g = 0; g < l->num_groups; g++)
        if (at >= l->groups[g].offset && at < l->groups[g].offset + l->groups[g].numel) return g;
    return l->num_groups - 1;
}

static tlm_ddp_bucket make_bucket(const tlm_param_layout *l, size_t lo, size_t hi, bool sharded) {
    tlm_ddp_bucket b = {.offset = lo, .numel = hi - lo, .ready_group = group_at(l, lo), .sharded = sharded};
    for (int t = 0; t < l->num_tensors; t++) b.num_tensors += l->tensors[t].offset >= lo && l->tensors[t].offset < hi;
    return b;
}

tlm_status tlm_ddp_plan_buckets(const tlm_param_layout *l, size_t cap_bytes, int zero_ranks, tlm_ddp_bucket **out,
                                int *n) {
    *out = NULL;
    *n = 0;
    /* the first offset of each bucket, walking the tensors in the order the backward completes them */
    size_t *starts = malloc(((size_t)l->num_tensors + 1) * sizeof *starts);
    tlm_ddp_bucket *b = malloc(((size_t)l->num_tensors + 2) * sizeof *b);
    if (!starts || !b) {
        free(starts);
        free(b);
        return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory for the bucket plan");
    }
    int ns = 0;
    size_t held = 0; /* bytes in the open bucket */
    for (int t = l->num_tensors - 1; t >= 0; t--) {
        held += l->tensors[t].numel * sizeof(float);
        if (held >= cap_bytes || t == 0) { /* PyTorch: the bucket closes once it holds the cap */
            starts[ns++] = t == 0 ? 0 : l->tensors[t].offset;
            held = 0;
        }
    }
    const size_t g = zero_ranks > 0 ? 16 * (size_t)zero_ranks : 1; /* ZeRO: pieces of whole 64-byte lines */
    size_t hi = l->flat_numel;
    for (int k = 0; k < ns; k++) {
        size_t lo = (starts[k] + g - 1) / g * g;
        if (lo >= hi) continue; /* rounded away: its floats go to the next bucket */
        if (zero_ranks > 0 && (hi - lo) % g != 0) { /* only the top bucket: its tail, all-reduced */
            const size_t main_end = hi - (hi - lo) % g;
            b[(*n)++] = make_bucket(l, main_end, hi, false);
            hi = main_end;
            if (lo == hi) continue;
        }
        b[(*n)++] = make_bucket(l, lo, hi, zero_ranks > 0);
        hi = lo;
    }
    free(starts);
    *out = b;
    return TLM_OK;
}

size_t tlm_ddp_shard_numel(const tlm_ddp_bucket *b, int n, int zero_ranks) {
    size_t numel = 0;
    for (int k = 0; k < n; k++) numel += b[k].sharded ? b[k].numel / (size_t)zero_ranks : b[k].numel;
    return numel;
}

tlm_status tlm_ddp_memory_estimate(const tlm_config *cfg, const tlm_run_config *run, const tlm_ddp_config *c,
                                   int world_size, tlm_memory_estimate *e) {
    if (world_size < 1) return tlm_fail(TLM_ERR_INVALID_ARGUMENT, "world size %d", world_size);
    TLM_TRY(tlm_ddp_config_check(c));
    if (world_size == 1) return TLM_OK;
    tlm_step_plan plan;
    TLM_TRY(tlm_step_plan_decide(&plan, run));
    if (c->zero && plan.updates_in_backward)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "ZeRO-1 with %s is not supported (ddp.h)",
                        tlm_update_place_name(plan.update));
    tlm_param_layout l;
    TLM_TRY(tlm_layout_build(&l, cfg));
    tlm_status s = TLM_OK;
    if (c->zero && e->optimizer) {
        tlm_ddp_bucket *b = NULL;
        int n = 0;
        s = tlm_ddp_plan_buckets(&l, tlm_ddp_cap_bytes(c), world_size, &b, &n);
        if (s == TLM_OK) e->optimizer = 2 * tlm_ddp_shard_numel(b, n, world_size) * sizeof(float);
        free(b);
    }
    if (c->zero && e->weight_copy_in_arena) { /* ZeRO-1 keeps the GEMM copy apart (step_plan.h) */
        e->weight_copy = l.flat_numel * tlm_dtype_size(tlm_precision_act_dtype(run->precision));
        e->weight_copy_in_arena = 0;
        e->arena = e->arena_copy_apart;
        e->arena_live = e->arena_live_copy_apart;
    }
    if (c->reduce_dtype == TLM_DTYPE_BF16) e->workspace += l.flat_numel * sizeof(uint16_t);
    e->total = e->parameters + e->weight_copy + e->optimizer + e->arena + e->workspace;
    tlm_layout_free(&l);
    return s;
}
