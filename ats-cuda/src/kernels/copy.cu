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

// Appends this round's key or value rows to a cache: cache[offset + i] = x[i].
extern "C" __global__ void kv_append_f16(const float* __restrict__ x, u16* __restrict__ cache,
                                         u64 offset, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[offset + i] = f2h(x[i]);
}

extern "C" __global__ void kv_append_f32(const float* __restrict__ x, float* __restrict__ cache,
                                         u64 offset, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        cache[offset + i] = x[i];
}
