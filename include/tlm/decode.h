/* decode.h — the CS336 model's incremental forward pass for generation: a KV cache (the keys and
 * values of every layer for the positions run so far) and a forward of a few new positions that
 * reads it: the prompt's positions at once (the prefill), then one position per step (the decode
 * phase; Pope et al. 2022, "Efficiently Scaling Transformer Inference"). The same ops as
 * tlm_model_forward (model.h) but the attention, which is attention_kv_cache (ops.def); RoPE takes
 * its tables from the new positions' offset. The logits of the last new position only are computed
 * (lm_head on one row).
 *
 * One sequence (batch 1). Memory, through the tracked allocator (memory.h): the cache, 2 x num_layers
 * x max_len x d_model elements of the mode's activation dtype (tag activations, "kv_cache"), and the
 * work buffers of one chunk of up to TLM_DECODE_CHUNK positions (tag activations). A prompt longer
 * than a chunk runs chunk by chunk (the same results up to the GEMMs' rounding). */
#ifndef TLM_DECODE_H
#define TLM_DECODE_H

#include <stdint.h>
#include "tlm/model.h"
#include "tlm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TLM_DECODE_CHUNK 512 /* positions one forward of the decoder runs at most (a longer call loops) */

typedef struct tlm_decoder tlm_decoder;

/* A decoder of m (not owned; its weights are read at each forward, so it must outlive the decoder)
 * with a cache of max_len positions, 1 <= max_len <= the model's context_length (its RoPE table).
 * In bf16/fp16 the weights' GEMM copy is cast here (and again by a forward after they change).
 * Errors: INVALID_ARGUMENT (max_len out of range, naming both numbers), OUT_OF_MEMORY. */
tlm_status tlm_decoder_create(tlm_decoder **out, tlm_model *m, int max_len);
void tlm_decoder_free(tlm_decoder *d);

/* Runs tokens[0..n) (host memory) at positions len..len+n-1, where len is the positions run so far,
 * appending their keys and values to the cache, and writes the logits of the last one to host memory
 * (vocab_size float32, widened from bf16/fp16; logits NULL: not copied, nothing waits). Errors:
 * INVALID_ARGUMENT (n < 1, len + n > max_len: both numbers named; a token outside [0, vocab_size)),
 * and the model's (the GEMM copy's OUT_OF_MEMORY). */
tlm_status tlm_decoder_forward(tlm_decoder *d, const int32_t *tokens, int n, float *logits);

/* positions run so far (in the cache) */
int tlm_decoder_length(const tlm_decoder *d);

/* Empties the cache (a new sequence; nothing is freed). */
void tlm_decoder_reset(tlm_decoder *d);

#ifdef __cplusplus
}
#endif
#endif
