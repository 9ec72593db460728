/* attention_kv_cache.cu — attention of a few new positions against a KV cache on the GPU (ops.def,
 * attention_kv_cache; the CPU version, src/cpu/attention_kv_cache.c, is the spec): one kernel
 * appends the new keys and values to the cache, a second runs one block per (sequence, head, query):
 * its warps take the visible keys in turn (lanes over d_head, a warp-shuffle sum) into scores in
 * shared memory, the block takes their max and the sum of the exponentials, and groups of d_head
 * threads each sum the values of every G-th key weighted by the probabilities (G = threads / d_head),
 * the groups' partial sums then added in a fixed order. Scores, softmax and sums in fp32. Naive: the
 * cached rows are read once per query (decoding's Tq = 1: once), which is what bounds a decoding
 * step; nothing is tiled or tensor-cored. */
#include "cuda/cuda_common.cuh"

#define KV_THREADS 256

template <typename T>
__global__ void kv_append_kernel(T *k_cache, T *v_cache, const T *qkv, int Tq, int pos0, int S, int C,
                                 size_t total) {
    /* total = B*Tq*C: element c of new row n = b*Tq + i */
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t n = idx / C;
        const int c = (int)(idx % C), i = (int)(n % Tq);
        const size_t b = n / Tq, at = (b * S + pos0 + i) * C + c;
        k_cache[at] = qkv[n * 3 * C + C + c];
        v_cache[at] = qkv[n * 3 * C + 2 * C + c];
    }
}

/* the block's max (is_max) or sum of x, returned to every thread; red holds 32 floats */
__device__ float kv_block_reduce(float x, float *red, bool is_max) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    __syncthreads(); /* red may still be read from the last call */
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < nwarps; w++) x = is_max ? fmaxf(x, red[w]) : x + red[w];
    return x;
}

template <typename T>
__global__ void kv_attention_kernel(T *out, const T *qkv, const T *k_cache, const T *v_cache, int Tq, int pos0, int S,
                                    int H, int D, float scale) {
    /* shared: q (D), red (32), the groups' partial sums (blockDim), scores (pos0 + Tq) */
    extern __shared__ float smem[];
    float *qs = smem, *red = smem + D, *part = red + 32, *p = part + blockDim.x;
    const int w = blockIdx.x, i = w % Tq, h = (w / Tq) % H, b = w / (Tq * H);
    const int C = H * D, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const size_t n = (size_t)b * Tq + i;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = tlm_f32(qkv[n * 3 * C + (size_t)h * D + d]);
    __syncthreads();
    const int len = pos0 + i + 1;
    const T *kb = k_cache + (size_t)b * S * C + (size_t)h * D, *vb = v_cache + (size_t)b * S * C + (size_t)h * D;
    for (int j = warp; j < len; j += nwarps) {
        float s = 0.0f;
        for (int d = lane; d < D; d += 32) s += qs[d] * tlm_f32(kb[(size_t)j * C + d]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) p[j] = s * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, p[j]);
    mx = kv_block_reduce(mx, red, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float e = expf(p[j] - mx);
        p[j] = e;
        sum += e;
    }
    sum = kv_block_reduce(sum, red, false); /* its barriers also publish p */
    const float inv = 1.0f / sum;
    T *o = out + n * C + (size_t)h * D;
    if (D > (int)blockDim.x) { /* a head wider than the block: each thread its columns, every key */
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
            float acc = 0.0f;
            for (int j = 0; j < len; j++) acc += p[j] * tlm_f32(vb[(size_t)j * C + d]);
            o[d] = tlm_round<T>(acc * inv);
        }
        return;
    }
    const int G = (int)blockDim.x / D, d = (int)threadIdx.x % D, grp = (int)threadIdx.x / D;
    if (grp < G) { /* group grp: keys grp, grp + G, ... */
        float acc = 0.0f;
        for (int j = grp; j < len; j += G) acc += p[j] * tlm_f32(vb[(size_t)j * C + d]);
        part[grp * D + d] = acc;
    }
    __syncthreads();
    if (grp == 0) {
        float acc = 0.0f;
        for (int g = 0; g < G; g++) acc += part[g * D + d];
        o[d] = tlm_round<T>(acc * inv);
    }
}

void tlm_cuda_attention_kv_cache(tlm_backend *be, void *out, const void *qkv, void *k_cache, void *v_cache, int B,
                                 int Tq, int pos0, int S, int H, int D, tlm_dtype dt) {
    if (B <= 0 || Tq <= 0 || H <= 0) return;
    const char *op = "attention_kv_cache";
    cudaStream_t st = tlm_cuda_stream(be);
    const int C = H * D;
    const size_t smem = ((size_t)D + 32 + KV_THREADS + (size_t)pos0 + Tq) * sizeof(float);
    int dev_max = 0;
    TLM_CUDA_CHECK_OP(op, cudaDeviceGetAttribute(&dev_max, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                                 tlm_cuda_of(be)->device));
    if (smem > (size_t)dev_max)
        tlm_fatal("%s: %d cached positions need %zu bytes of shared memory, more than the device's %d", op, pos0 + Tq,
                  smem, dev_max);
    tlm_cuda_dispatch(dt, op, [&](auto tag) {
        using E = typename decltype(tag)::type;
        const size_t total = (size_t)B * Tq * C;
        kv_append_kernel<E><<<tlm_cuda_grid(be, total, 256), 256, 0, st>>>(
            static_cast<E *>(k_cache), static_cast<E *>(v_cache), static_cast<const E *>(qkv), Tq, pos0, S, C, total);
        TLM_CUDA_CHECK_OP(op, cudaGetLastError());
        if (smem > 48 * 1024)
            TLM_CUDA_CHECK_OP(op, cudaFuncSetAttribute(kv_attention_kernel<E>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kv_attention_kernel<E><<<(unsigned)((size_t)B * H * Tq), KV_THREADS, smem, st>>>(
            static_cast<E *>(out), static_cast<const E *>(qkv), static_cast<const E *>(k_cache),
            static_cast<const E *>(v_cache), Tq, pos0, S, H, D, 1.0f / sqrtf((float)D));
        TLM_CUDA_CHECK_OP(op, cudaGetLastError());
    });
}
