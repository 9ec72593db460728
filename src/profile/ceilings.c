/* ceilings.c — what the device can do, measured by tlm on the device itself (profile.h,
 * tlm_profile_measure_ceilings): a square GEMM per precision mode through the backend's own
 * matmul_forward op, and a large float32 copy through its cast op (F32 to F32 is a copy); the best
 * of several timed runs after a warm-up, timed between events on the compute stream. The op table
 * divides achieved FLOP/s and bytes/s by these. */
#include <stdlib.h>

#include "tlm/backend.h"
#include "tlm/profile.h"

#define CHUNK_FLOATS ((size_t)1 << 22) /* the host pattern copied over the buffers: 16 MiB */

/* dst (n floats, backend memory) filled with a pseudo-random pattern in [-1, 1) */
static tlm_status fill(tlm_backend *be, float *dst, size_t n, float *chunk) {
    for (size_t off = 0; off < n; off += CHUNK_FLOATS) {
        const size_t k = n - off < CHUNK_FLOATS ? n - off : CHUNK_FLOATS;
        tlm_copy_to_backend(be, dst + off, chunk, k * sizeof *dst);
    }
    return TLM_OK;
}

/* the best time (ms) of reps runs of fn after one untimed run */
typedef void (*run_fn)(tlm_backend *be, void *ctx);

static double best_ms(tlm_backend *be, tlm_event *e0, tlm_event *e1, int reps, run_fn fn, void *ctx) {
    fn(be, ctx);
    double best = 1e300;
    for (int r = 0; r < reps; r++) {
        tlm_event_record(be, e0, NULL);
        fn(be, ctx);
        tlm_event_record(be, e1, NULL);
        const double ms = tlm_event_elapsed_ms(be, e0, e1);
        if (ms > 0 && ms < best) best = ms;
    }
    return best;
}

typedef struct {
    void *y, *x, *w;
    float *src, *dst;
    int n;
    size_t floats;
    tlm_precision p;
} bufs;

static void run_gemm(tlm_backend *be, void *ctx) {
    const bufs *b = ctx;
    tlm_matmul_forward(be, b->y, NULL, b->x, b->w, b->n, b->n, b->n, b->p);
}

static void run_copy(tlm_backend *be, void *ctx) {
    const bufs *b = ctx;
    tlm_cast(be, b->dst, b->src, b->floats, TLM_DTYPE_F32);
}

tlm_status tlm_profile_measure_ceilings(tlm_backend *be, const bool want[TLM_PRECISION_COUNT], tlm_ceilings *c) {
    const bool cuda = be->kind == TLM_DEVICE_CUDA;
    const int n = cuda ? 8192 : 1024;
    const size_t nn = (size_t)n * n, copy_floats = cuda ? (size_t)1 << 27 : (size_t)1 << 24;
    const int reps = cuda ? 10 : 3;
    bufs b = {.n = n, .floats = copy_floats};
    tlm_event *e0 = NULL, *e1 = NULL;
    float *chunk = malloc(CHUNK_FLOATS * sizeof *chunk);
    tlm_status s = chunk ? TLM_OK : tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory measuring the ceilings");
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; chunk && i < CHUNK_FLOATS; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        chunk[i] = (float)((double)(rng >> 40) / (double)(1ull << 23) - 1.0);
    }
    if (s == TLM_OK) s = tlm_event_create(be, &e0);
    if (s == TLM_OK) s = tlm_event_create(be, &e1);
    /* the copy: src (copy_floats) -> dst */
    if (s == TLM_OK) {
        b.src = tlm_alloc(be, copy_floats * sizeof(float), TLM_MEM_WORKSPACE, "ceiling.copy_src");
        b.dst = b.src ? tlm_alloc(be, copy_floats * sizeof(float), TLM_MEM_WORKSPACE, "ceiling.copy_dst") : NULL;
        if (!b.dst) s = TLM_ERR_OUT_OF_MEMORY; /* tlm_alloc said which */
    }
    if (s == TLM_OK) s = fill(be, b.src, copy_floats, chunk);
    if (s == TLM_OK) {
        const double ms = best_ms(be, e0, e1, reps, run_copy, &b);
        c->copy_bytes = 2 * copy_floats * sizeof(float);
        c->copy_gbps = (double)c->copy_bytes / (ms * 1e-3) / 1e9;
    }
    tlm_free(be, b.dst);
    tlm_free(be, b.src);
    b.src = b.dst = NULL;
    /* the GEMMs: y (n,n) = x (n,n) . w^T (n,n), operands in the mode's dtype, from an fp32 pattern */
    for (int p = 0; s == TLM_OK && p < TLM_PRECISION_COUNT; p++) {
        if (!want[p]) continue;
        const tlm_dtype dt = tlm_precision_act_dtype((tlm_precision)p);
        const size_t es = tlm_dtype_size(dt);
        float *f32 = tlm_alloc(be, nn * sizeof(float), TLM_MEM_WORKSPACE, "ceiling.pattern");
        b.x = f32 ? tlm_alloc(be, nn * es, TLM_MEM_WORKSPACE, "ceiling.x") : NULL;
        b.w = b.x ? tlm_alloc(be, nn * es, TLM_MEM_WORKSPACE, "ceiling.w") : NULL;
        b.y = b.w ? tlm_alloc(be, nn * es, TLM_MEM_WORKSPACE, "ceiling.y") : NULL;
        if (!b.y) s = TLM_ERR_OUT_OF_MEMORY;
        if (s == TLM_OK) s = fill(be, f32, nn, chunk);
        if (s == TLM_OK) {
            tlm_cast(be, b.x, f32, nn, dt);
            tlm_cast(be, b.w, f32, nn, dt);
            b.p = (tlm_precision)p;
            const double ms = best_ms(be, e0, e1, cuda ? 5 : 2, run_gemm, &b);
            c->gemm_tflops[p] = 2.0 * n * (double)nn / (ms * 1e-3) / 1e12;
            c->gemm_n = n;
        }
        tlm_synchronize(be);
        tlm_free(be, b.y);
        tlm_free(be, b.w);
        tlm_free(be, b.x);
        tlm_free(be, f32);
        b.x = b.w = b.y = NULL;
    }
    tlm_synchronize(be);
    tlm_event_destroy(be, e0);
    tlm_event_destroy(be, e1);
    free(chunk);
    return s;
}
