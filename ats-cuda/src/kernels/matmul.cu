// Tiled matrix products for prefill-sized rounds, and the dequantisation of
// weight tiles that feed cuBLAS.
//
// mm_*: y[t, o] = W[o, :] . x[t, :] (+ bias[o]) in f32. A block computes a
// 64 (weight rows) x 64 (tokens) tile; each step dequantises one 32-column
// chunk of 64 weight rows into shared memory next to the matching 32 columns
// of 64 token rows, then every thread accumulates a 4 x 4 sub-tile.
// mm_moe_*: the same for routed experts: block row y is a tile of the tokens
// routed to one expert, found from the routing metadata built by moe.cu.

#define MM_BO 64
#define MM_BT 64
#define MM_BK 32
#define MM_THREADS 256

template <int DT, bool TAIL>
__device__ __forceinline__ void mm_core(const u8* __restrict__ w, u64 row_bytes, int rows, int cols,
                                        const float* __restrict__ x, float* __restrict__ y,
                                        int o0, int t0, int n_tile, const int* __restrict__ list,
                                        int x_div, const float* __restrict__ bias) {
    __shared__ __align__(16) float ws[MM_BK][MM_BO];
    __shared__ __align__(16) float xs[MM_BK][MM_BT];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    // the token row this thread loads (4 threads per token, 8 columns each)
    const int lt = tid / 4, lq = tid % 4;
    int xrow = -1;
    if (lt < n_tile) xrow = list ? list[t0 + lt] / x_div : t0 + lt;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    const int chunks = (cols + MM_BK - 1) / MM_BK;
    float v[32];
    for (int c = 0; c < chunks; c++) {
        if (tid < MM_BO) {
            const int o = o0 + tid;
            if (o < rows) {
                if constexpr (TAIL) deq32_tail<DT>(w + (u64)o * row_bytes, c, cols, v);
                else deq32<DT>(w + (u64)o * row_bytes, c, v);
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) v[i] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < MM_BK; k++) ws[k][tid] = v[k];
        }
        {
            float a[8];
            if (TAIL && xrow >= 0) {
                const float* p = x + (u64)xrow * cols;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int e = c * MM_BK + lq * 8 + i;
                    a[i] = e < cols ? p[e] : 0.0f;
                }
            } else if (xrow >= 0) {
                const float4* p = (const float4*)(x + (u64)xrow * cols + c * MM_BK + lq * 8);
                const float4 p0 = p[0], p1 = p[1];
                a[0] = p0.x; a[1] = p0.y; a[2] = p0.z; a[3] = p0.w;
                a[4] = p1.x; a[5] = p1.y; a[6] = p1.z; a[7] = p1.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) a[i] = 0.0f;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) xs[lq * 8 + i][lt] = a[i];
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < MM_BK; k++) {
            const float4 wa = *(const float4*)&ws[k][ty * 4];
            const float4 xb = *(const float4*)&xs[k][tx * 4];
            const float wv[4] = {wa.x, wa.y, wa.z, wa.w};
            const float xv[4] = {xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += wv[i] * xv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int t = tx * 4 + j;
        if (t >= n_tile) continue;
        const u64 yrow = list ? (u64)list[t0 + t] : (u64)(t0 + t);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int o = o0 + ty * 4 + i;
            if (o < rows) y[yrow * rows + o] = acc[i][j] + (bias ? bias[o] : 0.0f);
        }
    }
}

// Routing metadata (int32, built by moe_index): offsets[E+1] into the sorted
// list, tile_offsets[E+1] (tiles of MM_BT tokens per expert), then the list of
// routed slots `t * top_k + k` grouped by expert.
__device__ __forceinline__ int moe_tile_expert(const int* tiles, int n_expert, int ty) {
    int lo = 0, hi = n_expert;  // largest e with tiles[e] <= ty
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tiles[mid] <= ty) lo = mid; else hi = mid;
    }
    return lo;
}

#define MM_KERNELS(NAME, DT)                                                                      \
    extern "C" __global__ void __launch_bounds__(MM_THREADS)                                      \
        mm_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x, int n_tok,      \
                  float* y, const float* bias) {                                                  \
        const int t0 = blockIdx.y * MM_BT;                                                        \
        mm_core<DT, false>(w, row_bytes, rows, cols, x, y, blockIdx.x * MM_BO, t0,                       \
                    min(MM_BT, n_tok - t0), nullptr, 1, bias);                                    \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(MM_THREADS)                                      \
        mm_moe_##NAME(const u8* w, u64 row_bytes, u64 expert_bytes, int rows, int cols,           \
                      const float* x, float* y, const int* meta, int n_expert, int x_div) {       \
        const int* offsets = meta;                                                                \
        const int* tiles = meta + n_expert + 1;                                                   \
        const int* list = meta + 2 * (n_expert + 1);                                              \
        const int ty = blockIdx.y;                                                                \
        if (ty >= tiles[n_expert]) return;                                                        \
        const int e = moe_tile_expert(tiles, n_expert, ty);                                       \
        const int start = offsets[e] + (ty - tiles[e]) * MM_BT;                                   \
        const int n = min(MM_BT, offsets[e + 1] - start);                                         \
        mm_core<DT, false>(w + (u64)e * expert_bytes, row_bytes, rows, cols, x, y, blockIdx.x * MM_BO,   \
                    start, n, list, x_div, nullptr);                                              \
    }                                                                                             \
    extern "C" __global__ void dequant_f16_##NAME(const u8* w, u64 row_bytes, int rows, int cols, \
                                                  u16* out) {                                     \
        const u64 per_row = cols / 32;                                                            \
        const u64 g = (u64)blockIdx.x * blockDim.x + threadIdx.x;                                 \
        if (g >= per_row * rows) return;                                                          \
        const u64 r = g / per_row;                                                                \
        const int c = (int)(g % per_row);                                                         \
        float v[32];                                                                              \
        deq32<DT>(w + r * row_bytes, c, v);                                                       \
        u16* o = out + r * cols + 32 * c;                                                         \
        for (int i = 0; i < 32; i++) o[i] = f2h(v[i]);                                            \
    }                                                                                             \
    extern "C" __global__ void dequant_f32_##NAME(const u8* w, u64 row_bytes, int rows, int cols, \
                                                  float* out) {                                   \
        const u64 per_row = cols / 32;                                                            \
        const u64 g = (u64)blockIdx.x * blockDim.x + threadIdx.x;                                 \
        if (g >= per_row * rows) return;                                                          \
        const u64 r = g / per_row;                                                                \
        const int c = (int)(g % per_row);                                                         \
        float v[32];                                                                              \
        deq32<DT>(w + r * row_bytes, c, v);                                                       \
        float* o = out + r * cols + 32 * c;                                                       \
        for (int i = 0; i < 32; i++) o[i] = v[i];                                                 \
    }

#define MM_TAIL_KERNEL(NAME, DT)                                                                  \
    extern "C" __global__ void __launch_bounds__(MM_THREADS)                                      \
        mm_tail_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x, int n_tok, \
                       float* y, const float* bias) {                                             \
        const int t0 = blockIdx.y * MM_BT;                                                        \
        mm_core<DT, true>(w, row_bytes, rows, cols, x, y, blockIdx.x * MM_BO, t0,                 \
                          min(MM_BT, n_tok - t0), nullptr, 1, bias);                              \
    }

FOR_EACH_DTYPE(MM_KERNELS)
FOR_EACH_FLOAT_DTYPE(MM_TAIL_KERNEL)
