// Copies run by the streaming multiprocessors: activations between device
// memory and mapped (pinned, device-visible) host memory, on the compute
// stream, so they never queue behind weight copies on the copy engine.
// Also the f32 -> f16 conversions (cuBLAS inputs, KV cache appends).

// dst[i] = src[i] for n bytes; 16-byte words when both ends are aligned.
extern "C" __global__ void copy_bytes(const u8* __restrict__ src, u8* __restrict__ dst, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if ((((u64)src | (u64)dst) & 15) == 0) {
        const u64 words = n / 16;
        const uint4* s = (const uint4*)src;
        uint4* d = (uint4*)dst;
        for (u64 i = tid; i < words; i += stride) d[i] = s[i];
        for (u64 i = words * 16 + tid; i < n; i += stride) dst[i] = src[i];
    } else {
        for (u64 i = tid; i < n; i += stride) dst[i] = src[i];
    }
}

// y[i] = f16(x[i]).
extern "C" __global__ void f32_to_f16(const float* __restrict__ x, u16* __restrict__ y, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = f2h(x[i]);
}

// Appends a sequence's new key or value rows to its cache rows: row i of x
// (width w) is the sequence's token past + i, at its cache row through its
// block table (blocks of 1 << block_shift rows; none: row past + i).
__device__ __forceinline__ u64 kv_dst(const unsigned* __restrict__ blocks, int block_shift,
                                      u64 past, u64 i, u64 w) {
    const u64 t = past + i / w;
    const u64 row = blocks ? (((u64)blocks[t >> block_shift] << block_shift) |
                              (t & (((u64)1 << block_shift) - 1)))
                           : t;
    return row * w + i % w;
}

extern "C" __global__ void kv_append_rows_f16(const float* __restrict__ x, u16* __restrict__ cache,
                                              const unsigned* __restrict__ blocks, int block_shift,
                                              u64 past, u64 w, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[kv_dst(blocks, block_shift, past, i, w)] = f2h(x[i]);
}

extern "C" __global__ void kv_append_rows_f32(const float* __restrict__ x, float* __restrict__ cache,
                                              const unsigned* __restrict__ blocks, int block_shift,
                                              u64 past, u64 w, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[kv_dst(blocks, block_shift, past, i, w)] = x[i];
}


// The experts a router chose, copied from mapped host memory by the SMs on
// the transfer stream, so the host never reads the expert ids back: block
// row blockIdx.y is expert e, which returns at once unless some row of
// `routing` (rows of top_k ids as floats, then top_k weights) names it; a
// chosen expert's per_expert bytes go to dst at the same offset.
extern "C" __global__ void copy_routed_experts(const u8* __restrict__ src, u8* __restrict__ dst,
                                               u64 per_expert, const float* __restrict__ routing,
                                               int rows, int top_k) {
    const int e = blockIdx.y;
    __shared__ int chosen;
    if (threadIdx.x == 0) {
        int hit = 0;
        for (int r = 0; r < rows && !hit; ++r)
            for (int k = 0; k < top_k; ++k) {
                const float id = routing[(u64)r * 2 * top_k + k];
                if (id >= 0.0f && (int)id == e) hit = 1;
            }
        chosen = hit;
    }
    __syncthreads();
    if (!chosen) return;
    const u8* s = src + (u64)e * per_expert;
    u8* d = dst + (u64)e * per_expert;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if ((((u64)s | (u64)d) & 15) == 0) {
        const u64 words = per_expert / 16;
        for (u64 i = tid; i < words; i += stride) ((uint4*)d)[i] = ((const uint4*)s)[i];
        for (u64 i = words * 16 + tid; i < per_expert; i += stride) d[i] = s[i];
    } else {
        for (u64 i = tid; i < per_expert; i += stride) d[i] = s[i];
    }
}
