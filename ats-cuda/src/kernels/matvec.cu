// Matrix-vector products for decode-sized rounds: y[t, o] = W[o, :] . x[t, :]
// (+ bias[o]) for up to MV_MAX_TOKENS tokens at once, reading each weight
// row once and dequantising it on the fly (no f32 copy of the weights).
//
// One warp per output row; lane i takes chunks i, i+32, ... of the row, so
// the warp reads the row front to back. Block: MV_ROWS warps.

#define MV_MAX_TOKENS 8
#define MV_ROWS 4

template <int DT, bool TAIL>
__device__ __forceinline__ void matvec_impl(const u8* __restrict__ w, u64 row_bytes, int rows,
                                            int cols, const float* __restrict__ x, int n_tok,
                                            float* __restrict__ y, const float* __restrict__ bias) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * MV_ROWS + threadIdx.x / WARP;
    if (row >= rows) return;
    const u8* wr = w + (u64)row * row_bytes;
    float acc[MV_MAX_TOKENS];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOKENS; t++) acc[t] = 0.0f;
    const int chunks = (cols + 31) / 32;
    float v[32];
    for (int c = lane; c < chunks; c += WARP) {
        if constexpr (TAIL) deq32_tail<DT>(wr, c, cols, v);
        else deq32<DT>(wr, c, v);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOKENS; t++) {
            if (t < n_tok) {
                float s = 0.0f;
                if constexpr (TAIL) {
                    const float* xr = x + (u64)t * cols;
                    for (int i = 0; i < 32 && 32 * c + i < cols; i++) s += v[i] * xr[32 * c + i];
                } else {
                    const float4* xv = (const float4*)(x + (u64)t * cols + 32 * c);
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        const float4 a = xv[i];
                        s += v[4 * i] * a.x + v[4 * i + 1] * a.y + v[4 * i + 2] * a.z + v[4 * i + 3] * a.w;
                    }
                }
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MV_MAX_TOKENS; t++) {
        if (t < n_tok) {
            const float s = warp_sum(acc[t]);
            if (lane == 0) y[(u64)t * rows + row] = s + (bias ? bias[row] : 0.0f);
        }
    }
}

#define MATVEC_KERNEL(NAME, DT)                                                                  \
    extern "C" __global__ void __launch_bounds__(MV_ROWS * WARP)                                 \
        matvec_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x, int n_tok, \
                      float* y, const float* bias) {                                             \
        matvec_impl<DT, false>(w, row_bytes, rows, cols, x, n_tok, y, bias);                     \
    }

#define MATVEC_TAIL_KERNEL(NAME, DT)                                                              \
    extern "C" __global__ void __launch_bounds__(MV_ROWS * WARP)                                  \
        matvec_tail_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x,        \
                           int n_tok, float* y, const float* bias) {                              \
        matvec_impl<DT, true>(w, row_bytes, rows, cols, x, n_tok, y, bias);                       \
    }

FOR_EACH_DTYPE(MATVEC_KERNEL)
FOR_EACH_FLOAT_DTYPE(MATVEC_TAIL_KERNEL)
