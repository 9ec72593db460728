/* shm_allreduce.c — tlm's all-reduce schedule for ranks on one host (shm_allreduce.h): the shared
 * segment, the progress counters and their bounded waits, the chunked and skewed copy-in, reduce,
 * copy-out pipeline, and the float32/bf16 sums with streaming (non-temporal) stores to recv. */
#define _GNU_SOURCE
#include "comm/shm_allreduce.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TLM_SHM_X86 1
#else
#define TLM_SHM_X86 0
#endif

#include "comm/comm_internal.h"
#include "core/convert.h"
#include "tlm/tuning.h"

enum { STAGE_IN = 0, STAGE_RED = 1, STAGE_OUT = 2, NUM_STAGES = 3 };
static const char *const stage_names[NUM_STAGES] = {"copy its chunk in", "reduce its slice", "copy the results out"};

#define LINE 128                  /* a counter per 128 bytes: no two on one line or adjacent-line pair */
#define HEADER_BYTES (NUM_STAGES * LINE)
#define ALIGN_ELEMS_BYTES 64      /* slices start on 64-byte boundaries of the buffer */

struct tlm_shm {
    int rank, size;
    char *base;                   /* the segment: size headers, then size x 2 slots */
    size_t map_bytes, headers_bytes;
    uint64_t seq;                 /* chunks done so far on this communicator: the same on every rank */
    size_t llc_bytes;             /* the last-level cache: larger buffers are written past it */
    int threads;                  /* threads that move one rank's bytes: the host's cores / ranks */
};

static _Atomic uint64_t *counter(const tlm_shm *s, int q, int stage) {
    return (_Atomic uint64_t *)(void *)(s->base + (size_t)q * HEADER_BYTES + (size_t)stage * LINE);
}

static char *slot(const tlm_shm *s, int q, uint64_t g) {
    return s->base + s->headers_bytes + ((size_t)q * 2 + (size_t)(g & 1)) * TLM_SHM_SLOT_BYTES;
}

/* ---- the segment ------------------------------------------------------------------------------------------ */

static size_t last_level_cache(void) {
    long b = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (b <= 0) b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? (size_t)b : (size_t)8 << 20;
}

tlm_status tlm_shm_create(tlm_shm **out, MPI_Comm comm, char *why, size_t n) {
    *out = NULL;
    why[0] = '\0';
    int rank = 0, size = 1;
    TLM_MPI_TRY(MPI_Comm_rank(comm, &rank));
    TLM_MPI_TRY(MPI_Comm_size(comm, &size));
    tlm_shm *s = calloc(1, sizeof *s);
    if (!s) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory (shared-memory all-reduce)");
    s->rank = rank;
    s->size = size;
    s->headers_bytes = ((size_t)size * HEADER_BYTES + 4095) / 4096 * 4096;
    s->map_bytes = s->headers_bytes + (size_t)size * 2 * TLM_SHM_SLOT_BYTES;
    s->llc_bytes = last_level_cache();
    /* the host's cores shared among the ranks, and no more than this rank may run on (mpirun binds 2
     * ranks to a core each by default) */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    const long allowed = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : cores;
    const long share = cores > size ? cores / size : 1;
    const int forced = tlm_knob_int(TLM_KNOB_SHM_THREADS); /* tests: the threaded path on a machine of few cores */
    s->threads = forced > 0 ? forced : (int)(share < allowed ? share : allowed);
    if (s->threads > TLM_SHM_MAX_THREADS) s->threads = TLM_SHM_MAX_THREADS;

    /* rank 0 makes the segment and reserves its space (a full /dev/shm fails here, not with SIGBUS
     * later); then each rank maps it, and all learn whether every rank could */
    struct {
        int ok;
        char name[64];
        char error[160];
    } made = {1, "", ""};
    char error[160] = "";
    if (rank == 0) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        snprintf(made.name, sizeof made.name, "/tlm-allreduce-%ld-%ld", (long)getpid(), (long)(t.tv_nsec & 0xfffff));
        const int fd = shm_open(made.name, O_CREAT | O_EXCL | O_RDWR, 0600);
        int e = fd < 0 ? errno : 0;
        if (!e && ftruncate(fd, (off_t)s->map_bytes) != 0) e = errno;
        if (!e) e = posix_fallocate(fd, 0, (off_t)s->map_bytes);
        if (e) {
            made.ok = 0;
            snprintf(made.error, sizeof made.error, "rank 0: %zu bytes of shared memory (shm_open %s): %s", s->map_bytes,
                     made.name, strerror(e));
            if (fd >= 0) shm_unlink(made.name);
        }
        if (fd >= 0) close(fd);
    }
    int rc = MPI_Bcast(&made, (int)sizeof made, MPI_BYTE, 0, comm);
    if (rc != MPI_SUCCESS) {
        if (rank == 0 && made.ok) shm_unlink(made.name);
        free(s);
        return tlm_mpi_fail(rc, "MPI_Bcast (the shared-memory segment's name)");
    }
    int mapped = 0;
    if (made.ok) {
        const int fd = shm_open(made.name, O_RDWR, 0600);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED)
            snprintf(error, sizeof error, "rank %d: mapping %zu bytes of shared memory (%s): %s", rank, s->map_bytes,
                     made.name, strerror(errno));
        else
            s->base = p, mapped = 1;
        if (fd >= 0) close(fd);
    } else {
        snprintf(error, sizeof error, "%s", made.error);
    }
    int all = 0;
    rc = MPI_Allreduce(&mapped, &all, 1, MPI_INT, MPI_MIN, comm);
    if (rank == 0 && made.ok) shm_unlink(made.name); /* every rank has opened it (or given up) */
    if (rc != MPI_SUCCESS || !all) {
        if (s->base) munmap(s->base, s->map_bytes);
        free(s);
        if (rc != MPI_SUCCESS) return tlm_mpi_fail(rc, "MPI_Allreduce (the shared-memory segment mapped?)");
        /* the first rank that failed says why */
        struct {
            int failed;
            char error[160];
        } mine = {!mapped, ""}, *said = malloc(sizeof mine * (size_t)size);
        snprintf(mine.error, sizeof mine.error, "%s", error);
        if (!said) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
        rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, said, (int)sizeof mine, MPI_BYTE, comm);
        for (int q = 0; rc == MPI_SUCCESS && q < size; q++)
            if (said[q].failed) {
                snprintf(why, n, "%s", said[q].error);
                break;
            }
        free(said);
        if (rc != MPI_SUCCESS) return tlm_mpi_fail(rc, "MPI_Allgather (why shared memory failed)");
        return TLM_OK;
    }
    *out = s;
    return TLM_OK;
}

int tlm_shm_threads(const tlm_shm *s) { return s->threads; }

void tlm_shm_destroy(tlm_shm *s) {
    if (!s) return;
    if (s->base) munmap(s->base, s->map_bytes);
    free(s);
}

/* ---- waits ------------------------------------------------------------------------------------------------- */

static inline void cpu_relax(void) {
#if TLM_SHM_X86
    _mm_pause();
#endif
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void publish(tlm_shm *s, int stage, uint64_t value) {
    atomic_store_explicit(counter(s, s->rank, stage), value, memory_order_release);
}

/* Until every other rank's counter of `stage` reaches `target`: spin a while, then yield the core
 * (more ranks than cores still progress); past the timeout + 5 s, an error naming the rank (the
 * watchdog normally ends the job before). */
static tlm_status wait_peers(tlm_shm *s, int stage, uint64_t target) {
    for (int q = 0; q < s->size; q++) {
        if (q == s->rank) continue;
        _Atomic uint64_t *c = counter(s, q, stage);
        int64_t start = 0;
        for (unsigned spins = 0; atomic_load_explicit(c, memory_order_acquire) < target; spins++) {
            if (spins < 4096) {
                cpu_relax();
                continue;
            }
            sched_yield();
            if ((spins & 255) != 0) continue;
            const int64_t t = now_ns();
            if (!start) start = t;
            const double limit_s = (tlm_watchdog_timeout() > 0 ? tlm_watchdog_timeout() : 60.0) + 5.0;
            if ((double)(t - start) * 1e-9 > limit_s)
                return tlm_fail(TLM_ERR_BACKEND, "shared-memory all-reduce: rank %d did not %s (chunk %llu) within "
                                "%g s", q, stage_names[stage], (unsigned long long)target, limit_s);
        }
    }
    return TLM_OK;
}

/* ---- copies and sums ---------------------------------------------------------------------------------------- */

/* one non-temporal store (past the cache) of STREAM_BYTES from q (any alignment) to d (aligned) */
#if TLM_SHM_X86 && defined(__AVX__)
#define STREAM_BYTES 32
static inline void stream_store(char *d, const char *q) {
    _mm256_stream_si256((__m256i *)(void *)d, _mm256_loadu_si256((const __m256i *)(const void *)q));
}
#elif TLM_SHM_X86
#define STREAM_BYTES 16
static inline void stream_store(char *d, const char *q) {
    _mm_stream_si128((__m128i *)(void *)d, _mm_loadu_si128((const __m128i *)(const void *)q));
}
#endif

/* dst = src (bytes); stream: non-temporal stores for the STREAM_BYTES-aligned body */
static void copy_out(void *dst, const void *src, size_t bytes, bool stream) {
#ifdef STREAM_BYTES
    if (stream && bytes >= 256) {
        char *d = dst;
        const char *q = src;
        const size_t head = (size_t)(-(uintptr_t)d & (STREAM_BYTES - 1));
        memcpy(d, q, head);
        d += head, q += head, bytes -= head;
        const size_t body = bytes & ~(size_t)(STREAM_BYTES - 1);
        for (size_t i = 0; i < body; i += STREAM_BYTES) stream_store(d + i, q + i);
        memcpy(d + body, q + body, bytes - body);
        return;
    }
#endif
    (void)stream;
    memcpy(dst, src, bytes);
}

static void stream_fence(void) {
#if TLM_SHM_X86
    _mm_sfence();
#endif
}

/* The slice's sum, element by element: float32 sums in rank order 0..n-1 (avg: divided by n in
 * float32), rounded to dt; written to shared (the slot) and recv. Fused in one pass so that the
 * reads of the rank's own term from memory never pause (a sum into a block, then two copies of
 * it, ran 1.5x slower here). */
static inline float term(const void *t, size_t i, tlm_dtype dt) {
    return dt == TLM_DTYPE_BF16 ? tlm_bf16_to_f32(((const uint16_t *)t)[i]) : ((const float *)t)[i];
}

static void reduce_scalar(const void *const *terms, int n, size_t from, size_t to, tlm_dtype dt, bool avg,
                          void *shared) {
    for (size_t i = from; i < to; i++) {
        float v = term(terms[0], i, dt) + term(terms[1], i, dt);
        for (int q = 2; q < n; q++) v += term(terms[q], i, dt);
        if (avg) v /= (float)n;
        if (dt == TLM_DTYPE_BF16) ((uint16_t *)shared)[i] = tlm_f32_to_bf16(v);
        else ((float *)shared)[i] = v;
    }
}

#if TLM_SHM_X86 && defined(__AVX2__)
/* 8 elements of a term as float32 */
static inline __m256 load8(const void *t, size_t i, tlm_dtype dt) {
    if (dt == TLM_DTYPE_F32) return _mm256_loadu_ps((const float *)t + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)t + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 8 float32 to bf16, as tlm_f32_to_bf16: nearest even; NaN made quiet, sign and top payload kept */
static inline __m128i to_bf16x8(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x00400000));
    const __m256i top = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, nan), 16);
    const __m256i packed = _mm256_packus_epi32(top, top); /* per 128-bit lane: 4 values twice */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

/* The first len rounded down to 8 elements; the count done. */
static inline __attribute__((always_inline)) size_t reduce_avx2(const void *const *terms, int n, size_t len,
                                                                tlm_dtype dt, bool avg, void *shared) {
    const __m256 nf = _mm256_set1_ps((float)n);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        __m256 v = _mm256_add_ps(load8(terms[0], i, dt), load8(terms[1], i, dt));
        for (int q = 2; q < n; q++) v = _mm256_add_ps(v, load8(terms[q], i, dt));
        if (avg) v = _mm256_div_ps(v, nf);
        if (dt == TLM_DTYPE_F32) _mm256_storeu_ps((float *)shared + i, v);
        else _mm_storeu_si128((__m128i *)(void *)((uint16_t *)shared + i), to_bf16x8(v));
    }
    return i;
}
#endif

static void reduce_slice(const void *const *terms, int n, size_t len, tlm_dtype dt, tlm_reduce_op op, void *shared) {
    const bool avg = op == TLM_REDUCE_AVG;
    size_t done = 0;
#if TLM_SHM_X86 && defined(__AVX2__)
    /* constant dtypes and ops: one loop each, without branches inside */
    if (dt == TLM_DTYPE_F32) done = avg ? reduce_avx2(terms, n, len, TLM_DTYPE_F32, true, shared)
                                        : reduce_avx2(terms, n, len, TLM_DTYPE_F32, false, shared);
    else done = avg ? reduce_avx2(terms, n, len, TLM_DTYPE_BF16, true, shared)
                    : reduce_avx2(terms, n, len, TLM_DTYPE_BF16, false, shared);
#endif
    reduce_scalar(terms, n, done, len, dt, avg, shared);
}

/* ---- the rank's threads ----------------------------------------------------------------------------------------
 * Each stage of a chunk (copy-in, reduce, gather) is one parallel region over the rank's threads, in pieces of
 * whole 64-byte lines (one core does not reach the memory bandwidth of a rank's share of the host); each element
 * is still summed by one thread in rank order, so the bits do not depend on the thread count. Below PAR_MIN_BYTES
 * a stage, one thread. */
#define PAR_MIN_BYTES ((size_t)64 << 10)

/* piece t of n of [0, len) elements of es bytes, in whole lines */
static void piece(size_t len, size_t es, int t, int n, size_t *lo, size_t *hi) {
    const size_t line = ALIGN_ELEMS_BYTES / es;
    size_t per = (len + (size_t)n - 1) / (size_t)n;
    per = (per + line - 1) / line * line;
    *lo = (size_t)t * per < len ? (size_t)t * per : len;
    *hi = (size_t)(t + 1) * per < len ? (size_t)(t + 1) * per : len;
}

static int threads_for(const tlm_shm *s, size_t bytes) {
    return bytes >= PAR_MIN_BYTES && s->threads > 1 ? s->threads : 1;
}

/* reduce_slice over [0, len) of the terms, split over the threads */
static void par_reduce(const tlm_shm *s, const void *const *terms, size_t len, tlm_dtype dt, tlm_reduce_op op,
                       void *shared) {
    const size_t es = tlm_dtype_size(dt);
    const int n = threads_for(s, len * es * (size_t)s->size);
#pragma omp parallel for num_threads(n) schedule(static) if (n > 1)
    for (int t = 0; t < n; t++) {
        size_t lo, hi;
        piece(len, es, t, n, &lo, &hi);
        if (hi == lo) continue;
        const void *mine[64];
        for (int q = 0; q < s->size; q++) mine[q] = (const char *)terms[q] + lo * es;
        reduce_slice(mine, s->size, hi - lo, dt, op, (char *)shared + lo * es);
    }
}

/* ---- the schedule ---------------------------------------------------------------------------------------------- */

typedef struct {
    const char *send;
    char *recv;
    size_t count, chunk, es;  /* elements; chunk: per chunk */
    tlm_dtype dt;
    tlm_reduce_op op;
    bool stream;
} job;

/* chunk j's first element and length; slice q of it: [lo, hi) relative to the chunk */
static size_t chunk_len(const job *b, size_t j) {
    const size_t at = j * b->chunk;
    return b->count - at < b->chunk ? b->count - at : b->chunk;
}

static void slice_of(const tlm_shm *s, const job *b, size_t len, int q, size_t *lo, size_t *hi) {
    const size_t align = ALIGN_ELEMS_BYTES / b->es;
    size_t per = (len + (size_t)s->size - 1) / (size_t)s->size;
    per = (per + align - 1) / align * align;
    *lo = (size_t)q * per < len ? (size_t)q * per : len;
    *hi = (size_t)(q + 1) * per < len ? (size_t)(q + 1) * per : len;
}

/* copy-in of chunk j (global g): every slice but this rank's into its slot */
static tlm_status copy_in(tlm_shm *s, const job *b, size_t j, uint64_t g) {
    if (g >= 2) TLM_TRY(wait_peers(s, STAGE_OUT, g - 1)); /* chunk g - 2 is out of this slot everywhere */
    const size_t len = chunk_len(b, j), base = j * b->chunk * b->es;
    size_t lo, hi;
    slice_of(s, b, len, s->rank, &lo, &hi);
    char *mine = slot(s, s->rank, g);
    const char *send = b->send + base;
    const size_t before = lo * b->es, after_at = hi * b->es, after = (len - hi) * b->es; /* bytes */
    const int n = threads_for(s, before + after);
#pragma omp parallel for num_threads(n) schedule(static) if (n > 1)
    for (int t = 0; t < n; t++) { /* piece t of both ranges */
        size_t p, e;
        piece(before, 1, t, n, &p, &e);
        memcpy(mine + p, send + p, e - p);
        piece(after, 1, t, n, &p, &e);
        memcpy(mine + after_at + p, send + after_at + p, e - p);
    }
    publish(s, STAGE_IN, g + 1);
    return TLM_OK;
}

static tlm_status reduce(tlm_shm *s, const job *b, size_t j, uint64_t g) {
    TLM_TRY(wait_peers(s, STAGE_IN, g + 1));
    const size_t len = chunk_len(b, j), base = j * b->chunk * b->es;
    size_t lo, hi;
    slice_of(s, b, len, s->rank, &lo, &hi);
    const void *terms[64];
    const void **t = s->size <= 64 ? terms : malloc(sizeof *t * (size_t)s->size);
    if (!t) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int q = 0; q < s->size; q++)
        t[q] = q == s->rank ? b->send + base + lo * b->es : slot(s, q, g) + lo * b->es;
    if (s->size <= 64) par_reduce(s, t, hi - lo, b->dt, b->op, slot(s, s->rank, g) + lo * b->es);
    else reduce_slice(t, s->size, hi - lo, b->dt, b->op, slot(s, s->rank, g) + lo * b->es);
    if (t != terms) free(t);
    publish(s, STAGE_RED, g + 1);
    return TLM_OK;
}

static tlm_status gather(tlm_shm *s, const job *b, size_t j, uint64_t g) {
    TLM_TRY(wait_peers(s, STAGE_RED, g + 1));
    const size_t len = chunk_len(b, j), base = j * b->chunk * b->es;
    const int n = threads_for(s, len * b->es);
#pragma omp parallel for num_threads(n) schedule(static) if (n > 1)
    for (int t = 0; t < n; t++) { /* piece t of every slice */
        for (int k = 0; k < s->size; k++) {
            const int q = (s->rank + k) % s->size; /* its own first; the ranks start on different slots */
            size_t lo, hi, p, e;
            slice_of(s, b, len, q, &lo, &hi);
            piece((hi - lo) * b->es, 1, t, n, &p, &e);
            const size_t at = lo * b->es + p;
            copy_out(b->recv + base + at, slot(s, q, g) + at, e - p, b->stream);
        }
        if (b->stream && n > 1) stream_fence(); /* each thread orders its own non-temporal stores */
    }
    publish(s, STAGE_OUT, g + 1);
    return TLM_OK;
}

tlm_status tlm_shm_all_reduce(tlm_shm *s, const void *send, void *recv, size_t count, tlm_dtype dt, tlm_reduce_op op,
                              size_t chunk_bytes) {
    if (count == 0) return TLM_OK;
    const size_t es = tlm_dtype_size(dt);
    if (chunk_bytes == 0) /* by size (comm.h) */
        chunk_bytes = count * es >= TLM_COMM_SHM_LARGE_BYTES ? TLM_COMM_SHM_LARGE_CHUNK_BYTES : TLM_COMM_SHM_CHUNK_BYTES;
    if (chunk_bytes > TLM_SHM_SLOT_BYTES) chunk_bytes = TLM_SHM_SLOT_BYTES;
    chunk_bytes = chunk_bytes / 64 * 64;
    if (chunk_bytes < 64 * (size_t)s->size) chunk_bytes = 64 * (size_t)s->size;
    const job b = {.send = send, .recv = recv, .count = count, .chunk = chunk_bytes / es, .es = es, .dt = dt, .op = op,
                   .stream = count * es > s->llc_bytes};
    const size_t chunks = (count + b.chunk - 1) / b.chunk;
    const uint64_t g0 = s->seq;
    s->seq += chunks;
    /* skewed: in(0); then per chunk j: reduce(j), in(j + 1), out(j) */
    TLM_TRY(copy_in(s, &b, 0, g0));
    for (size_t j = 0; j < chunks; j++) {
        TLM_TRY(reduce(s, &b, j, g0 + j));
        if (j + 1 < chunks) TLM_TRY(copy_in(s, &b, j + 1, g0 + j + 1));
        TLM_TRY(gather(s, &b, j, g0 + j));
    }
    if (b.stream) stream_fence();
    return TLM_OK;
}
