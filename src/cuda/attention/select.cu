/* select.cu — which FlashAttention kernel runs a pass, and why: tlm_cuda_attention_select (the rule
 * is stated at its declaration, attention.cuh), TLM_FLASH_TILES' named tile lines and the
 * TLM_FLASH_LOG line. The only reader of the attention's knobs (include/tlm/tuning.h):
 * TLM_FLASH_LOG, TLM_FLASH_TILES, TLM_FLASH_SM90, TLM_FLASH_SPLIT; the kernels and launchers get
 * what they need from the choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/attention/attention.cuh"
#include "tlm/tuning.h"

/* a context at most this long may take a SHORT line (rule 4) */
#define FA_SHORT_MAX_CONTEXT 1024

/* the table's invariants: every d_head with kernels has one LONG line per pass and at most one SHORT */
static constexpr int fa_tiles_count(int pass, int d, int role) {
    int n = 0;
    for (int i = 0; i < TLM_ATTN_NTILES; i++)
        n += tlm_attn_tiles[i].pass == pass && tlm_attn_tiles[i].d == d && tlm_attn_tiles[i].role == role;
    return n;
}
static constexpr bool fa_tiles_valid() {
    const int ds[] = {16, 32, 64, 80, 128};
    for (int d : ds)
        for (int pass = TLM_ATTN_FORWARD; pass <= TLM_ATTN_BACKWARD; pass++)
            if (fa_tiles_count(pass, d, TLM_ATTN_LONG) != 1 || fa_tiles_count(pass, d, TLM_ATTN_SHORT) > 1)
                return false;
    return true;
}
static_assert(fa_tiles_valid(), "tiles.def: one LONG line per (pass, d_head), at most one SHORT");

void tlm_attn_tile_name(const tlm_attn_tile *t, char *buf, size_t cap) {
    snprintf(buf, cap, t->pass == TLM_ATTN_FORWARD ? "q%dk%dw%d" : "k%dq%dw%d", t->outer, t->inner, t->warps);
}

static const tlm_attn_tile *fa_tile_find(int pass, int D, int role) {
    for (int i = 0; i < TLM_ATTN_NTILES; i++)
        if (tlm_attn_tiles[i].pass == pass && tlm_attn_tiles[i].d == D && tlm_attn_tiles[i].role == role)
            return &tlm_attn_tiles[i];
    return NULL;
}

/* TLM_FLASH_TILES: a comma list of line names (tiles.def, e.g. "q64k64w4,k64q64w4"), each
 * optionally qualified by a d_head ("q64k64w4@64": that d_head's line only; a name may have lines
 * for several d_heads): a pass whose d_head has a line of a listed name runs the first such line in
 * list order — not the Hopper kernels, and split-KV only when it is that d_head's LONG line; other
 * passes and d_heads take the rule. Empty or "auto": the rule everywhere. A name with no line (for
 * its d_head) is fatal, the message listing the names. The knob is read at every launch (the GPU
 * test sets it between cases: tlm_knob_set) and parsed when its text changes. Returns the line for
 * (pass, D), or NULL. */
static const tlm_attn_tile *fa_tile_named(int pass, int D) {
    static char parsed[256];
    static bool have = false;
    static int listed[4 * TLM_ATTN_NTILES], n_listed; /* line indices, in list order */
    const char *env = tlm_knob_str(TLM_KNOB_FLASH_TILES);
    if (!have || strcmp(env, parsed) != 0) {
        if (strlen(env) >= sizeof parsed) tlm_fatal("TLM_FLASH_TILES: longer than %zu characters", sizeof parsed - 1);
        n_listed = 0;
        char list[sizeof parsed];
        snprintf(list, sizeof list, "%s", env);
        for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
            if (strcmp(tok, "auto") == 0) continue;
            char *at = strchr(tok, '@');
            const int only_d = at ? atoi(at + 1) : 0;
            if (at) *at = 0;
            bool found = false;
            for (int i = 0; i < TLM_ATTN_NTILES; i++) {
                char name[32];
                tlm_attn_tile_name(&tlm_attn_tiles[i], name, sizeof name);
                if (strcmp(tok, name) == 0 && (!only_d || tlm_attn_tiles[i].d == only_d) &&
                    n_listed < 4 * TLM_ATTN_NTILES) {
                    listed[n_listed++] = i;
                    found = true;
                }
            }
            if (!found) {
                char known[1024] = "";
                for (int i = 0; i < TLM_ATTN_NTILES; i++) {
                    char name[32];
                    tlm_attn_tile_name(&tlm_attn_tiles[i], name, sizeof name);
                    const size_t len = strlen(known);
                    snprintf(known + len, sizeof known - len, "%s%s@%d", i ? ", " : "", name, tlm_attn_tiles[i].d);
                }
                tlm_fatal("TLM_FLASH_TILES: no configuration '%s'%s%s (auto, or NAME[@D_HEAD] of "
                          "src/cuda/attention/tiles.def: %s)",
                          tok, at ? " for d_head " : "", at ? at + 1 : "", known);
            }
        }
        snprintf(parsed, sizeof parsed, "%s", env);
        have = true;
    }
    for (int k = 0; k < n_listed; k++)
        if (tlm_attn_tiles[listed[k]].pass == pass && tlm_attn_tiles[listed[k]].d == D) return &tlm_attn_tiles[listed[k]];
    return NULL;
}

/* compute capability major of the current device, cached per device */
static int fa_cc_major(void) {
    static int major[64];
    int dev = 0;
    TLM_CUDA_CHECK_OP("flash_attention", cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return 0;
    if (!major[dev])
        TLM_CUDA_CHECK_OP("flash_attention", cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev));
    return major[dev];
}

/* the split of (pass, the kernel's tiles br x bc, its split instantiation's occupancy) into c */
static void fa_plan_split(tlm_backend *be, tlm_attn_choice *c, tlm_attn_pass pass, int B, int H, int Tq, int Tk,
                          int D, bool causal, int br, int bc, tlm_flash_split_family family, int occ) {
    c->split = 1;
    c->split_len = 0;
    if (!tlm_knob_int(TLM_KNOB_FLASH_SPLIT)) return;
    int S = 1;
    const int len = pass == TLM_ATTN_FORWARD
                        ? tlm_cuda_flash_fwd_split(be, B, H, Tq, Tk, D, br, bc, causal, family, occ, &S)
                        : tlm_cuda_flash_bwd_split(be, B, H, Tq, Tk, D, br, bc, causal, family, occ, &S);
    if (len > 0) c->split = S, c->split_len = len;
}

/* rule 4's split of a LONG line (the forward's tiles outer x inner, the backward's inner x outer) */
static void fa_plan_mma_split(tlm_backend *be, tlm_attn_choice *c, tlm_attn_pass pass, tlm_dtype dt, int B, int H,
                              int Tq, int Tk, int D, bool causal) {
    const tlm_attn_tile *t = c->tile;
    const bool fwd = pass == TLM_ATTN_FORWARD;
    const int occ = fwd ? tlm_attn_mma_forward_occupancy(dt, t, true) : tlm_attn_mma_backward_occupancy(dt, t, true);
    fa_plan_split(be, c, pass, B, H, Tq, Tk, D, causal, fwd ? t->outer : t->inner, fwd ? t->inner : t->outer,
                  TLM_FLASH_SPLIT_16BIT, occ);
}

tlm_attn_choice tlm_cuda_attention_select(tlm_backend *be, tlm_attn_pass pass, tlm_precision p, int B, int H, int Tq,
                                          int Tk, int D, bool causal, unsigned layout) {
    tlm_attn_choice c;
    memset(&c, 0, sizeof c);
    c.split = 1;
    const bool fwd = pass == TLM_ATTN_FORWARD;
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    const int sms = tlm_cuda_of(be)->num_sms;

    /* 1. fp32 tensors: tf32 tensor cores where they apply, else exact fp32 */
    if (dt == TLM_DTYPE_F32) {
        int br = 0, bc = 0, occ = 0;
        if (p == TLM_PRECISION_TF32 && (layout & TLM_ATTN_TF32_ALIGNED))
            occ = tlm_attn_tf32_occupancy(be, pass, D, &br, &bc);
        if (occ > 0) {
            c.family = TLM_ATTN_TF32;
            c.why = "tf32 precision";
        } else {
            c.family = TLM_ATTN_F32;
            c.why = p == TLM_PRECISION_TF32 ? "tf32 precision, its kernels do not apply" : "fp32 precision";
            if (layout & TLM_ATTN_F32_SPLITS) occ = tlm_attn_f32_occupancy(pass, D, &br, &bc);
        }
        if (occ > 0) fa_plan_split(be, &c, pass, B, H, Tq, Tk, D, causal, br, bc, TLM_FLASH_SPLIT_32BIT, occ);
        return c;
    }

    /* 2. a line TLM_FLASH_TILES names */
    c.family = TLM_ATTN_MMA;
    const tlm_attn_tile *named = fa_tile_named(pass, D);
    if (named) {
        c.tile = named;
        c.why = "TLM_FLASH_TILES";
        if (named->role == TLM_ATTN_LONG) fa_plan_mma_split(be, &c, pass, dt, B, H, Tq, Tk, D, causal);
        return c;
    }

    /* 3. the Hopper kernels where their grid is at least two thirds of a wave: smaller grids go to
     * the mma.sync kernels' split-KV. From two thirds of a wave on, these kernels with some SMs idle
     * beat the split mma.sync ones (H100, flash-benchmarking d_head 128, seq 16384: 128 blocks on
     * 132 SMs, split took 0.51 / 1.60 ms against cuDNN's 0.36 / 0.83; the LM's small model, 96
     * blocks at context 256: fwd+bwd 2.82 against 2.88 ms) */
    const int sm90 = tlm_knob_int(TLM_KNOB_FLASH_SM90);
    if ((D == 32 || D == 64 || D == 80 || D == 128) && sm90 != 0 && fa_cc_major() == 9) {
        const int consumers = fwd ? (D <= 64 && Tq >= 1024 ? 3 : 2) : 0;
        const int64_t blocks =
            fwd ? (int64_t)B * H * ((Tq + 64 * consumers - 1) / (64 * consumers)) : (int64_t)B * H * ((Tk + 127) / 128);
        if (sm90 >= 2 || 3 * blocks >= 2 * (int64_t)sms) {
            c.family = TLM_ATTN_SM90;
            c.sm90_consumers = consumers;
            c.sm90_tma = sm90 != 3;
            c.why = sm90 >= 2 ? (sm90 == 3 ? "TLM_FLASH_SM90=3, cp.async copies" : "TLM_FLASH_SM90=2")
                              : "grid of at least two thirds of a wave";
            return c;
        }
    }

    /* 4. the LONG line, or SHORT for a short context whose LONG grid is small and not split */
    const tlm_attn_tile *lng = fa_tile_find(pass, D, TLM_ATTN_LONG), *sh = fa_tile_find(pass, D, TLM_ATTN_SHORT);
    if (!lng) tlm_fatal("flash_attention: no tile line for d_head %d", D);
    c.tile = lng;
    c.why = "rule: long";
    fa_plan_mma_split(be, &c, pass, dt, B, H, Tq, Tk, D, causal);
    if (!sh || max(Tq, Tk) > FA_SHORT_MAX_CONTEXT || c.split > 1) return c;
    const int occ = fwd ? tlm_attn_mma_forward_occupancy(dt, lng, false) : tlm_attn_mma_backward_occupancy(dt, lng, false);
    const int64_t blocks = (int64_t)B * H * (((fwd ? Tq : Tk) + lng->outer - 1) / lng->outer);
    if (blocks >= (int64_t)2 * sms * occ) return c;
    c.tile = sh;
    c.why = "rule: short";
    return c;
}

void tlm_attn_log(tlm_attn_pass pass, const tlm_attn_choice *c, int B, int H, int Tq, int Tk, int D, bool causal) {
    if (!tlm_knob_int(TLM_KNOB_FLASH_LOG)) return;
    static char last[2][224];
    char what[48], line[224];
    switch (c->family) {
    case TLM_ATTN_SM90:
        if (c->sm90_consumers) snprintf(what, sizeof what, "sm90 wgmma, %d consumers", c->sm90_consumers);
        else snprintf(what, sizeof what, "sm90 wgmma");
        break;
    case TLM_ATTN_MMA: tlm_attn_tile_name(c->tile, what, sizeof what); break;
    case TLM_ATTN_TF32: snprintf(what, sizeof what, "tf32 mma.sync"); break;
    default: snprintf(what, sizeof what, "fp32 exact"); break;
    }
    char split[32] = "";
    if (c->split > 1) snprintf(split, sizeof split, ", split-KV into %d", c->split);
    snprintf(line, sizeof line, "B=%d H=%d Tq=%d Tk=%d D=%d %s: %s (%s)%s", B, H, Tq, Tk, D,
             causal ? "causal" : "full", what, c->why, split);
    if (strcmp(line, last[pass]) == 0) return;
    snprintf(last[pass], sizeof last[pass], "%s", line);
    fprintf(stderr, "tlm flash %s: %s\n", pass == TLM_ATTN_FORWARD ? "forward" : "backward", line);
}
