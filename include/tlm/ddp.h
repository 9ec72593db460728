/* ddp.h — data-parallel training: the gradients of N ranks (processes, one per GPU) averaged over a
 * communicator (comm.h) before the optimizer step, in one of four ways, and ZeRO stage 1 (the AdamW
 * state sharded over the ranks). CS336 (Spring 2025) Assignment 2 §2.10 ("naive", "flat", "overlap
 * individual parameters", "overlap with bucketing", "optimizer state sharding").
 *
 * The model gives the seams (model.h): flat gradient buffers whose groups become complete in the
 * backward pass in reverse layer order (layout.h: head, layer L-1 .. 0, embedding; each group a
 * contiguous span, the spans in descending flat offset), a callback as each group completes
 * (tlm_model_on_grads_ready), and the mean loss and fp16 overflow count combined over the ranks
 * (tlm_model_set_comm). Each rank computes the mean loss of its own rows; the average of the ranks'
 * gradients is then the gradient of the mean over the global batch (equal rows per rank), so N ranks
 * take the step one process would take on the whole batch, up to the order of the sums.
 *
 * Buckets. A reduction is one collective over a span of the flat gradient buffer, reduced in place
 * (no copy into a bucket buffer: the layout keeps the tensors of one bucket adjacent). The spans come
 * from the tensors in the order the backward completes them (descending flat offset), cut as PyTorch
 * DDP cuts its buckets (torch.distributed's _compute_bucket_assignment_by_size: a tensor joins the
 * open bucket, which closes once it holds at least the cap; a tensor larger than the cap closes the
 * bucket it joins, alone if that bucket was empty; PyTorch's smaller first bucket is not copied).
 * A bucket runs from its lowest tensor's first element to the next bucket's first (the padding
 * between tensors, zero, rides along), so the buckets tile [0, flat_numel). A bucket is complete
 * when the group holding its lowest element is (tlm_ddp_bucket.ready_group).
 *
 * Modes (tlm_ddp_mode):
 *   NAIVE     one all-reduce per tensor, all issued after the backward pass;
 *   FLAT      one all-reduce of the whole flat buffer after the backward pass (llm.c's way);
 *   OVERLAP   one all-reduce per tensor, issued from the grads-ready callback of its group;
 *   BUCKETED  buckets of at most about bucket_mb MiB (2^20 bytes of float32 gradients, PyTorch's
 *             bucket_cap_mb; default 25), each issued from the callback that completes it.
 * Streams. NCCL: the reductions run on a communication stream of their own; before issuing, that
 * stream waits for an event recorded on the compute stream after the group's last gradient op, so
 * the reduction of layer l overlaps the backward of the layers below; after the backward, the compute
 * stream waits for an event at the end of the communication stream (tlm_ddp_sync_grads). MPI (the
 * CPU backend): the collectives are synchronous, so OVERLAP and BUCKETED "overlap" only in that they
 * are issued from the callback, inside the backward pass, which waits for each; nothing is hidden.
 *
 * Averaging: the comm's avg op (NCCL ncclAvg; MPI the sum divided by the world size in float32).
 * reduce_dtype BF16 (PyTorch's bf16_compress_hook): each span is cast to bf16 in a staging buffer
 * (2 bytes per parameter, the flat layout), averaged in bf16 (NCCL and MPI add in float32 and round
 * each partial sum to bf16), and cast back into the float32 gradients; on NCCL both casts run on the
 * communication stream. The staging buffer is the model's gradient sink (model.h,
 * tlm_model_set_grad_sink): where the model says so (tlm_model_grads_to_sink: bf16 precision, no
 * gradient accumulation, not optimizer-in-backward), the linear layers' weight-gradient GEMMs write
 * their bf16 result there themselves (the bits of the cast), and only the rest of a span (RMSNorm
 * gains, the embedding, padding) is cast in; with ZeRO-1 alike (the reduce-scatter reads the same
 * buffer; outside this rank's pieces m->grads then holds no weight gradient, where the cast path left
 * this rank's own). Otherwise (fp32, tf32 and fp16 precision, accumulation's float32 sums,
 * optimizer-in-backward) the whole span is cast as above. The cast back stays: AdamW, the norm and
 * the clip read the float32 gradients, which hold the weight gradients only from then on.
 *
 * ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
 * Parameter Models", sec. 5.1, P_os): each bucket is reduce-scattered instead of all-reduced; rank r
 * keeps the average of piece r of every bucket (its shard) and holds AdamW's moments for its pieces
 * only (one allocation of about flat_numel / N floats); the optimizer step updates the pieces, then
 * every bucket's parameters are all-gathered (NCCL: on the communication stream, bucket b's gather
 * overlapping the update of bucket b+1). The bf16/fp16 GEMM copy (model.h's params_lp) stays current:
 * the update writes its pieces' copy as the replicated AdamW does, and the other ranks' pieces are cast
 * once gathered (NCCL: on the communication stream, after their all-gather), so the next forward casts
 * nothing (on xl, 4 ms of an H100's forward: bench/results/h100x4-2026-11-27-ddp).
 * With ZeRO every bucket boundary is rounded up to a multiple of 16 N floats (equal pieces of whole
 * 64-byte lines); the top bucket's last (flat_numel - its start) mod 16 N floats, if any, are
 * all-reduced and updated by every rank (moments replicated: fewer than 16 N floats). FLAT with ZeRO
 * is one reduce-scatter: each rank's shard is one contiguous span.
 * Gradient clipping: the norm of the averaged gradients (tlm_ddp_grad_norm: with ZeRO the pieces'
 * sums of squares, gathered over the ranks and added in rank order, so every rank clips alike).
 * fp16: the loss scaler's overflow count is all-reduced (loss_scaler.h), every rank skips alike.
 *
 * The overlapped optimizer (model.h, run.optimizer_overlap: the step plan's OVERLAPPED; not with ZeRO): once a bucket's average is
 * complete (NCCL: an event of its own on the communication stream), its AdamW update is issued on the
 * model's optimizer stream (tlm_model_overlap_update), so the updates run beside the rest of the
 * backward and the reductions still queued; MPI: right after the synchronous reduction.
 * Not supported: ZeRO with optimizer-in-backward (each group's update would need its group's shard
 * before the next group is complete) or with the overlapped optimizer, CUDA graphs (a world of more
 * than one rank runs the passes eagerly: tlm_ddp_create tells the model, tlm_model_plan_data_parallel,
 * whose step plan then captures no graph). With
 * optimizer-in-backward and no ZeRO, each group is all-reduced in its callback on the compute stream,
 * before its update (one reduction per group whatever the mode: there is no flat gradient buffer to
 * bucket), so nothing of it is hidden: the overlapped optimizer is the way to hide the updates. */
#ifndef TLM_DDP_H
#define TLM_DDP_H

#include <stdbool.h>
#include <stddef.h>
#include "tlm/comm.h"
#include "tlm/layout.h"
#include "tlm/model.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TLM_DDP_NAIVE = 0, TLM_DDP_FLAT = 1, TLM_DDP_OVERLAP = 2, TLM_DDP_BUCKETED = 3 } tlm_ddp_mode;

const char *tlm_ddp_mode_name(tlm_ddp_mode m);                /* "naive", "flat", "overlap", "bucketed" */
bool tlm_ddp_mode_parse(const char *name, tlm_ddp_mode *out); /* those four; false otherwise */

typedef struct {
    tlm_ddp_mode mode;       /* default BUCKETED */
    double bucket_mb;        /* BUCKETED: the cap in MiB (2^20 bytes of float32 gradients), > 0; default 25 */
    tlm_dtype reduce_dtype;  /* TLM_DTYPE_F32 (default) or TLM_DTYPE_BF16 */
    int zero;                /* ZeRO stage: 0 (default) or 1 */
} tlm_ddp_config;

tlm_ddp_config tlm_ddp_defaults(void);

/* INVALID_ARGUMENT naming the field for a mode, cap, dtype or stage outside the above. */
tlm_status tlm_ddp_config_check(const tlm_ddp_config *c);

/* ---- buckets (pure: no communicator) -------------------------------------------------------------- */

typedef struct {
    size_t offset, numel;  /* floats: the span [offset, offset + numel) of the flat buffers */
    int ready_group;       /* index into layout.groups: the bucket is complete when that group is */
    int num_tensors;       /* tensors starting inside the span (0 for a ZeRO tail) */
    bool sharded;          /* ZeRO: reduce-scattered into world_size equal pieces (numel % world_size
                              == 0); else all-reduced (every mode without ZeRO; a ZeRO tail) */
} tlm_ddp_bucket;

/* The buckets of layout l in the order they complete (descending offset): cap_bytes 0 gives one per
 * tensor (NAIVE, OVERLAP), SIZE_MAX one for the whole buffer (FLAT), anything else PyTorch's rule
 * above (BUCKETED: bucket_mb * 2^20). zero_ranks > 0: ZeRO over that many ranks (boundaries rounded
 * up to multiples of 16 * zero_ranks floats, empty buckets dropped, the top bucket's remainder a tail
 * bucket of its own, not sharded). *out is malloc'ed (free it). Errors: OUT_OF_MEMORY. */
tlm_status tlm_ddp_plan_buckets(const tlm_param_layout *l, size_t cap_bytes, int zero_ranks, tlm_ddp_bucket **out,
                                int *n);

/* The cap of a mode in bytes, for tlm_ddp_plan_buckets. */
size_t tlm_ddp_cap_bytes(const tlm_ddp_config *c);

/* Floats per AdamW moment that one rank of a ZeRO plan keeps: its piece (numel / zero_ranks) of every
 * sharded bucket, the whole of a tail. */
size_t tlm_ddp_shard_numel(const tlm_ddp_bucket *b, int n, int zero_ranks);

/* One rank's memory under data parallelism: *e is the model's estimate for this rank's rows
 * (tlm_model_memory_estimate with batch / world_size), changed as the reducer changes it. ZeRO-1: the
 * optimizer state becomes the shard's two moments (tlm_ddp_shard_numel floats each, as tlm_ddp_create
 * allocates them); bf16 reductions: the staging buffer (2 bytes per parameter) joins the workspace;
 * total again the sum. NCCL's own buffers are not counted. world_size 1 leaves *e as it is.
 * Errors: INVALID_ARGUMENT (world_size < 1, a bad config), UNSUPPORTED (ZeRO with
 * optimizer-in-backward), OUT_OF_MEMORY (host). */
tlm_status tlm_ddp_memory_estimate(const tlm_config *cfg, const tlm_run_config *run, const tlm_ddp_config *c,
                                   int world_size, tlm_memory_estimate *e);

/* ---- the reducer ---------------------------------------------------------------------------------------- */

typedef struct tlm_ddp tlm_ddp;

/* Sets up data parallelism for model m (its parameters allocated and set on rank 0 at least) over
 * communicator c (the model's backend's; every rank calls it, with the same config: checked, with the
 * model's layout and precision, before the first collective). Broadcasts the parameters from rank 0,
 * registers the grads-ready callback, gives the model the communicator (tlm_model_set_comm), tells
 * the model's step plan (tlm_model_plan_data_parallel: no CUDA graphs; with ZeRO the update is this
 * layer's, step_plan.h's SHARDED), creates the communication stream and its events (NCCL), the bf16 staging
 * buffer (reduce_dtype BF16; tag WORKSPACE) and with ZeRO the shard's AdamW state (tag OPTIMIZER,
 * allocated by the first step, as AdamW's). Errors: INVALID_ARGUMENT (a bad config; ranks that
 * disagree; a world of one), UNSUPPORTED (ZeRO with optimizer-in-backward or the overlapped optimizer), OUT_OF_MEMORY, BACKEND
 * (a collective failed). Every rank returns the same status for the first three. */
tlm_status tlm_ddp_create(tlm_ddp **out, tlm_model *m, tlm_comm *c, const tlm_ddp_config *cfg);

/* Waits for queued reductions (NCCL), frees the staging buffer, the shard's state, the stream and
 * events, and detaches the callback and communicator from the model. NULL: no-op. */
void tlm_ddp_free(tlm_ddp *d);

/* After tlm_model_backward: issues the reductions the mode leaves for after the backward pass (NAIVE,
 * FLAT: all of them) and orders the compute stream after every reduction of the step. From here m->grads
 * holds the averaged gradients (with ZeRO: in this rank's pieces and tails only). Errors: BACKEND
 * (a collective failed: named), INVALID_ARGUMENT (no backward since the last call). With gradient
 * accumulation (model.h, tlm_model_set_micro_batch) the callbacks act only in the last micro-batch's
 * backward (no_sync before it): call this once per optimizer step, after that backward. */
tlm_status tlm_ddp_sync_grads(tlm_ddp *d);

/* The global L2 norm of the averaged gradients (as tlm_grad_norm, model.h: unscaled in fp16, after a
 * clip already recorded), the same on every rank. Without ZeRO the whole buffer (every rank holds the
 * average); with ZeRO the pieces' float64 sums of squares, gathered over the ranks and added in rank
 * order (tails counted once). scratch: TLM_CLIP_SCRATCH_BYTES of backend memory (model.h). */
tlm_status tlm_ddp_grad_norm(tlm_ddp *d, void *scratch, double *norm);

/* The optimizer step with these hyperparameters: without ZeRO the model's (tlm_model_adamw_step: every
 * rank the same update); with ZeRO this rank's pieces with its shard's moments (fp16: unscaled and
 * checked first, as the model does, the overflow count all-reduced), then the all-gather of every
 * sharded bucket's parameters. Errors: the model's, BACKEND, OUT_OF_MEMORY (the shard's moments). */
tlm_status tlm_ddp_adamw_step(tlm_ddp *d, const tlm_adamw_config *opt);

/* Where the last step's communication time went (ms), measured with events on the compute and
 * communication streams (NCCL) or the host clock around each collective (MPI, synchronous):
 *   in_backward_ms     reductions issued from the callbacks that held up the backward pass (MPI: all
 *                      of them, the backward waits for each; NCCL: 0, they run on their own stream);
 *   after_backward_ms  from the end of the backward pass until the compute stream may go on: the
 *                      reductions not hidden behind the backward (NAIVE and FLAT: all of them);
 *   params_ms          ZeRO: the all-gather of the parameters not hidden behind the update;
 *   exposed_ms         their sum: the communication the step waited for.
 * Waits for the step's events. */
typedef struct {
    double in_backward_ms, after_backward_ms, params_ms, exposed_ms;
    int collectives;        /* issued in the step */
    size_t bytes;           /* bytes per rank the step's collectives carried (counts x dtype size) */
    size_t cast_floats;     /* bf16: gradients cast into the staging buffer (the whole layout, or with
                               direct_bf16 only what lies outside the linear layers' weights) */
    bool direct_bf16;       /* bf16: the weight-gradient GEMMs wrote into the staging buffer (above) */
} tlm_ddp_timing;
tlm_status tlm_ddp_last_timing(tlm_ddp *d, tlm_ddp_timing *t);

/* What the reducer plans: the buckets, and this rank's share of the optimizer state. */
typedef struct {
    int num_buckets;
    const tlm_ddp_bucket *buckets;  /* [num_buckets], owned by the reducer */
    size_t optimizer_numel;         /* floats per moment this rank keeps (flat_numel without ZeRO) */
    size_t staging_bytes;           /* the bf16 staging buffer (0 with float32 reductions) */
} tlm_ddp_plan_info;
void tlm_ddp_plan(const tlm_ddp *d, tlm_ddp_plan_info *out);

/* Every rank's status of a step each took on its own (an allocation, a step of the model): TLM_OK when
 * all are; else, on every rank, this rank's failure or one naming the first rank that failed, so the
 * ranks go on, or stop, together. Collective (a host all-gather). */
tlm_status tlm_ddp_agree(tlm_comm *c, tlm_status mine);

/* ---- ZeRO-1's moments in a checkpoint --------------------------------------------------------------------
 * Under ZeRO-1 rank r keeps AdamW's moments of piece r of every sharded bucket (and of the tails, which
 * every rank keeps alike), one shard allocation on the rank's device (above). A checkpoint holds the moments
 * whole, as a replicated run's (train.h), so that it resumes at any rank count, with or without ZeRO: the
 * save gathers the pieces to rank 0, a resume re-cuts them by its own plan. The model's AdamW step count
 * (m->optimizer.t) stays the run's under ZeRO: the shard's update takes it and advances it. */

/* floats per moment that one exchange of tlm_ddp_gather_moments carries per rank (16 MiB) */
#define TLM_DDP_MOMENT_CHUNK ((size_t)1 << 22)

/* Whether d keeps AdamW's moments sharded (ZeRO-1); false for NULL (one rank) or replicated. */
bool tlm_ddp_shards_optimizer(const tlm_ddp *d);

/* Collective (every rank, the same span): the moments m and v of the flat span [off, off + n) (the layout's
 * offsets, floats) into rank 0's host buffers m_out and v_out (n floats each; the other ranks pass NULL),
 * exactly (the float32 bits copied). In exchanges of TLM_DDP_MOMENT_CHUNK floats: besides the output, each
 * rank holds (2 + 2 x world) x the chunk of host memory and no device memory. Before the first update: zeros.
 * Errors (on every rank): INVALID_ARGUMENT (not ZeRO), OUT_OF_MEMORY (host; rank 0 without outputs), BACKEND. */
tlm_status tlm_ddp_gather_moments(tlm_ddp *d, size_t off, size_t n, float *m_out, float *v_out);

/* Local: sets this rank's pieces (and tails) of the flat span [off, off + n) of the shard's moments from the
 * whole moments m_in, v_in (host, n float32 each, any alignment: a checkpoint's tensor), allocating the
 * shard's moments if no update has. Errors: INVALID_ARGUMENT (not ZeRO), OUT_OF_MEMORY (device). */
tlm_status tlm_ddp_scatter_moments(tlm_ddp *d, size_t off, size_t n, const void *m_in, const void *v_in);

/* ---- one process of a data-parallel run (src/ddp/launch.c) ----------------------------------------------- */

typedef struct {
    tlm_comm_world world;  /* rank and world size: 0 of 1 without a launcher */
    tlm_backend *be;       /* this rank's backend (several ranks); NULL in a world of one: the caller's */
    tlm_comm *comm;        /* every rank's communicator; NULL in a world of one */
} tlm_ddp_process;

/* Joins the run a launcher started (mpirun, srun: tlm_comm_launched; else a world of one, and nothing
 * happens). With several ranks: the backend of this rank, CUDA on GPU gpu + local_rank (a rank that sees
 * one GPU uses it) when device is "cuda" (or NULL and a GPU is visible), else the CPU with `threads`
 * threads (<= 0: the cores divided among the ranks of this host), and the communicator over it (NCCL on
 * CUDA, MPI on the CPU) with the watchdog's timeout_s. Errors: comm.h's (BACKEND, INVALID_ARGUMENT),
 * the backend's. */
tlm_status tlm_ddp_join(tlm_ddp_process *p, const char *device, int gpu, int threads, double timeout_s);

/* Destroys the communicator and the backend it made; finalize: leaves the run cleanly (a barrier of
 * every rank: call it only when every rank does; after a failure of this rank alone, just return and
 * the communication layer tells the others). */
tlm_status tlm_ddp_leave(tlm_ddp_process *p, bool finalize);

#ifdef __cplusplus
}
#endif
#endif
