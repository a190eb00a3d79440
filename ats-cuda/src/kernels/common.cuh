// Shared helpers of every ATS CUDA kernel. NVRTC compiles each kernel file
// with this text in front; nothing here includes a system or CUDA header, so
// the kernels compile with NVRTC alone (no toolkit headers are needed).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define WARP 32

#ifdef ATS_EMULATE
// The host emulator (ats-cuda/tests/emulate) converts in software.
__device__ __forceinline__ float h2f(u16 h) { return emu_h2f(h); }
__device__ __forceinline__ u16 f2h(float f) { return emu_f2h(f); }
#else
// f16 <-> f32 through PTX, so no cuda_fp16.h is needed.
__device__ __forceinline__ float h2f(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f2h(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

// The block's dynamic shared memory as an array of T.
#ifndef DYN_SHARED
#define DYN_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif

__device__ __forceinline__ float bf2f(u16 h) {
    return __uint_as_float(((u32)h) << 16);
}

// Little-endian u16 / u32 at any byte address (blocks are not aligned).
__device__ __forceinline__ u16 ld_u16(const u8* p) {
    return (u16)p[0] | ((u16)p[1] << 8);
}

__device__ __forceinline__ u32 ld_u32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

__device__ __forceinline__ float ld_f16(const u8* p) {
    return h2f(ld_u16(p));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of up to 1024 threads; `scratch` holds 32 floats. Every
// thread gets the total.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int nw = (blockDim.x + WARP - 1) / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    float t = lane < nw ? scratch[lane] : 0.0f;
    t = warp_sum(t);
    return t;
}

// Same for f64 partial sums (norms accumulate in f64 like the CPU reference).
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ double block_sum_d(double v, double* scratch) {
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int nw = (blockDim.x + WARP - 1) / WARP;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) scratch[wid] = v;
    __syncthreads();
    double t = lane < nw ? scratch[lane] : 0.0;
    t = warp_sum_d(t);
    return t;
}

#define NEG_INF __int_as_float(0xff800000)

// Expert id of a MoE routing entry as the CPU reference reads it (`f as
// usize`): NaN and negatives give 0; n_expert means "no expert".
__device__ __forceinline__ int expert_of(float f, int n_expert) {
    if (!(f >= 0.0f)) return 0;
    if (f >= (float)n_expert) return n_expert;
    return (int)f;
}
