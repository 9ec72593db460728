/* ops.cu — the FlashAttention ops of tlm/backend.h on CUDA (flash_attention_forward, _backward,
 * _check; FlashAttention-2, Dao 2023, with the Hopper kernels of FlashAttention-3, Shah et al.
 * 2024): each checks its arguments, asks the selector which kernel runs (tlm_cuda_attention_select,
 * attention.cuh: the rule), takes the split buffer when the choice splits, logs the choice
 * (TLM_FLASH_LOG) and launches it in one switch. The semantics, layout and masking rules are those
 * of tlm/flash_attention.h (the CPU reference). */
#include "cuda/attention/attention.cuh"

tlm_status tlm_cuda_flash_attention_check(int D, tlm_dtype dt) {
    if (dt != TLM_DTYPE_F32 && dt != TLM_DTYPE_BF16 && dt != TLM_DTYPE_F16)
        return tlm_fail(TLM_ERR_UNSUPPORTED, "flash attention on cuda: dtype %s is not supported (F32, BF16, F16)",
                        tlm_dtype_name(dt));
    if (!tlm_cuda_flash_supports_d(D))
        return tlm_fail(TLM_ERR_UNSUPPORTED,
                        "flash attention on cuda: d_head %d is not supported (kernels for d_head 16, 32, 64, 80, 128; "
                        "use --attention naive)",
                        D);
    return TLM_OK;
}

static void fa_check_args(const char *op, int D, tlm_dtype dt, int ld_qkv, int ld_out, int H, const void *const *ptrs,
                          int nptrs) {
    if (tlm_cuda_flash_attention_check(D, dt) != TLM_OK) tlm_fatal("%s: %s", op, tlm_last_error());
    if (ld_qkv < H * D || ld_out < H * D) tlm_fatal("%s: ld_qkv %d, ld_out %d < H*D = %d", op, ld_qkv, ld_out, H * D);
    if (dt == TLM_DTYPE_F32) return;
    if (ld_qkv % 8 || ld_out % 8)
        tlm_fatal("%s: ld_qkv %d and ld_out %d must be multiples of 8 elements (16-byte rows)", op, ld_qkv, ld_out);
    for (int i = 0; i < nptrs; i++)
        if (!tlm_aligned16(ptrs[i])) tlm_fatal("%s: tensor %d is not 16-byte aligned", op, i);
}

/* the TLM_ATTN_TF32_ALIGNED flag: every tensor 16-byte aligned, ld_qkv and ld_out multiples of 4 */
static unsigned fa_tf32_aligned(int ld_qkv, int ld_out, const void *const *ptrs, int n) {
    if (ld_qkv % 4 || ld_out % 4) return 0;
    for (int i = 0; i < n; i++)
        if (!tlm_aligned16(ptrs[i])) return 0;
    return TLM_ATTN_TF32_ALIGNED;
}

void tlm_cuda_flash_attention_forward(tlm_backend *be, void *out, float *lse, const void *q, const void *k,
                                      const void *v, int ld_qkv, int ld_out, int B, int Tq, int Tk, int H, int D,
                                      bool causal, tlm_precision p) {
    const char *op = "flash_attention_forward";
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    if (B <= 0 || Tq <= 0 || Tk <= 0 || H <= 0) return;
    const void *ptrs[] = {out, q, k, v};
    fa_check_args(op, D, dt, ld_qkv, ld_out, H, ptrs, 4);
    if (H > 65535 || B > 65535) tlm_fatal("%s: batch %d or heads %d above 65535", op, B, H);
    unsigned layout = 0;
    if (dt == TLM_DTYPE_F32) {
        layout = fa_tf32_aligned(ld_qkv, ld_out, ptrs, 4) | (ld_out % 4 == 0 && tlm_aligned16(out) ? TLM_ATTN_F32_SPLITS : 0);
    }
    tlm_attn_choice c = tlm_cuda_attention_select(be, TLM_ATTN_FORWARD, p, B, H, Tq, Tk, D, causal, layout);
    float *part = tlm_attn_take_split(be, &c);
    tlm_attn_log(TLM_ATTN_FORWARD, &c, B, H, Tq, Tk, D, causal);
    const tlm_attn_fwd_args a = {out, lse, q, k, v, ld_qkv, ld_out, B, Tq, Tk, H, D, causal, dt};
    switch (c.family) {
    case TLM_ATTN_SM90: tlm_attn_sm90_forward(be, &c, &a); break;
    case TLM_ATTN_MMA: tlm_attn_mma_forward(be, &c, &a, part); break;
    case TLM_ATTN_TF32: tlm_attn_tf32_forward(be, &c, &a, part); break;
    case TLM_ATTN_F32: tlm_attn_f32_forward(be, &c, &a, part); break;
    }
}

void tlm_cuda_flash_attention_backward(tlm_backend *be, void *dq, void *dk, void *dv, float *workspace,
                                       const void *dout, const void *q, const void *k, const void *v,
                                       const void *out, const float *lse, int ld_qkv, int ld_out, int B, int Tq,
                                       int Tk, int H, int D, bool causal, tlm_precision p) {
    const char *op = "flash_attention_backward";
    const tlm_dtype dt = tlm_precision_act_dtype(p);
    if (B <= 0 || Tq <= 0 || Tk <= 0 || H <= 0) return;
    const void *ptrs[] = {dq, dk, dv, dout, q, k, v, out};
    fa_check_args(op, D, dt, ld_qkv, ld_out, H, ptrs, 8);
    if (H > 65535 || B > 65535) tlm_fatal("%s: batch %d or heads %d above 65535", op, B, H);
    if (!workspace) tlm_fatal("%s: no workspace (tlm_flash_workspace_floats floats)", op);
    unsigned layout = 0;
    if (dt == TLM_DTYPE_F32) {
        const void *all[] = {dq, dk, dv, workspace, dout, q, k, v, out};
        layout = fa_tf32_aligned(ld_qkv, ld_out, all, 9) |
                 (ld_qkv % 4 == 0 && tlm_aligned16(dk) && tlm_aligned16(dv) ? TLM_ATTN_F32_SPLITS : 0);
    } else if (!tlm_aligned16(workspace)) { /* the dQ accumulator, first: float4 atomics */
        tlm_fatal("%s: the workspace is not 16-byte aligned", op);
    }
    tlm_attn_choice c = tlm_cuda_attention_select(be, TLM_ATTN_BACKWARD, p, B, H, Tq, Tk, D, causal, layout);
    float *dkv = tlm_attn_take_split(be, &c);
    tlm_attn_log(TLM_ATTN_BACKWARD, &c, B, H, Tq, Tk, D, causal);
    const tlm_attn_bwd_args a = {dq, dk, dv, workspace, dout, q, k, v, out, lse, ld_qkv, ld_out, B, Tq, Tk, H, D,
                                 causal, dt};
    switch (c.family) {
    case TLM_ATTN_SM90: tlm_attn_sm90_backward(be, &c, &a); break;
    case TLM_ATTN_MMA: tlm_attn_mma_backward(be, &c, &a, dkv); break;
    case TLM_ATTN_TF32: tlm_attn_tf32_backward(be, &c, &a, dkv); break;
    case TLM_ATTN_F32: tlm_attn_f32_backward(be, &c, &a, dkv); break;
    }
}
