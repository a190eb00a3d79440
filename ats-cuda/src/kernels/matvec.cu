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

// Wide matrix-vector products for the K-quants of Q4_K_M / Q5_K_M models
// (Q4_K or Q5_K for most matrices, Q6_K for attn_v, ffn_down and the
// output) and for Q8_0: a lane reads
// whole 16-byte pieces of a super-block with vector loads (the chunked
// kernel above reads a byte at a time), and a warp takes MVW_ROWS rows so
// each activation loaded serves all of them. Sub-block sums are taken over
// the integer values, then scaled once: w.x = d sc sum(q x) - dmin m sum(x)
// (Q6_K: d sc (sum(q x) - 32 sum(x))). The rounding differs from the
// chunked kernel's exact dequantisation by the order of the sums only.
//
// Block: MVW_WARPS warps; grid: rows / (MVW_WARPS * MVW_ROWS).

#define MVW_WARPS 4
#define MVW_ROWS 2

// Byte k (0..11) of a Q4_K/Q5_K scale field held in words a, b, c.
__device__ __forceinline__ int scale_byte(u32 a, u32 b, u32 c, int k) {
    const u32 w = k < 4 ? a : k < 8 ? b : c;
    return (int)((w >> (8 * (k & 3))) & 0xff);
}

// Scale and min of Q4_K sub-block j from the packed field in words a, b, c.
__device__ __forceinline__ void scale_min_words(u32 a, u32 b, u32 c, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = scale_byte(a, b, c, j) & 63;
        *m = scale_byte(a, b, c, j + 4) & 63;
    } else {
        *sc = (scale_byte(a, b, c, j + 4) & 0x0f) | ((scale_byte(a, b, c, j - 4) >> 6) << 4);
        *m = (scale_byte(a, b, c, j + 4) >> 4) | ((scale_byte(a, b, c, j) >> 6) << 4);
    }
}

// 16 bytes at a 2-byte aligned address (Q6_K blocks are 210 bytes, Q8_0
// blocks 34) from aligned words, without reading past the 16 bytes: the last
// two of an address 2 mod 4 come from a 2-byte load (a Q8_0 tensor's last
// block may end the allocation).
__device__ __forceinline__ uint4 ld16_a2(const u8* p) {
    const u64 a = (u64)p;
    const u32* w = (const u32*)(a & ~(u64)3);
    uint4 r;
    r.x = w[0];
    r.y = w[1];
    r.z = w[2];
    r.w = w[3];
    if (a & 2) {
        const u32 tail = *(const u16*)(p + 14);
        r.x = (r.x >> 16) | (r.y << 16);
        r.y = (r.y >> 16) | (r.z << 16);
        r.z = (r.z >> 16) | (r.w << 16);
        r.w = (r.w >> 16) | (tail << 16);
    }
    return r;
}

// Byte i (0..15) of a 16-byte piece.
__device__ __forceinline__ u32 piece_byte(const uint4& q, int i) {
    const u32 w = i < 4 ? q.x : i < 8 ? q.y : i < 12 ? q.z : q.w;
    return (w >> (8 * (i & 3))) & 0xff;
}

// 16 activations at p (16-byte aligned) and their sum.
__device__ __forceinline__ float load16(const float* p, float* x) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 a = ((const float4*)p)[i];
        x[4 * i] = a.x;
        x[4 * i + 1] = a.y;
        x[4 * i + 2] = a.z;
        x[4 * i + 3] = a.w;
        s += (a.x + a.y) + (a.z + a.w);
    }
    return s;
}

// Writes the warp's sums: lane 0 of each row and token.
template <int NT>
__device__ __forceinline__ void mvw_store(float (&acc)[MVW_ROWS][NT], int row0, int rows,
                                          int n_tok, float* __restrict__ y,
                                          const float* __restrict__ bias) {
    const int lane = threadIdx.x % WARP;
#pragma unroll
    for (int r = 0; r < MVW_ROWS; r++) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float s = warp_sum(acc[r][t]);
                if (lane == 0 && row0 + r < rows)
                    y[(u64)t * rows + row0 + r] = s + (bias ? bias[row0 + r] : 0.0f);
            }
        }
    }
}

// Q4_K and Q5_K: piece p (0..7) of a block is qs bytes 16p..16p+16 (qs at
// block offset 16, Q5_K 48), the low nibbles elements 64j + 16h + i of
// sub-block 2j and the high ones 32 further (2j+1), with j = p / 2,
// h = p % 2. Q5_K adds a fifth bit per value from qh bytes 16h + i (block
// offset 16 + 16h): bit 2j for the low nibble, 2j + 1 for the high one.
template <int NT, bool Q5>
__device__ __forceinline__ void mvw_k4(const u8* __restrict__ w, u64 row_bytes, int rows, int cols,
                                       const float* __restrict__ x, int n_tok,
                                       float* __restrict__ y, const float* __restrict__ bias) {
    constexpr int BYTES = Q5 ? 176 : 144, QS = Q5 ? 48 : 16;
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * MVW_WARPS + threadIdx.x / WARP) * MVW_ROWS;
    if (row0 >= rows) return;  // the whole warp
    float acc[MVW_ROWS][NT] = {};
    const int pieces = cols / 256 * 8;
    for (int pc = lane; pc < pieces; pc += WARP) {
        const int b = pc >> 3, p = pc & 7, j = p >> 1, h = p & 1;
        uint4 q[MVW_ROWS], qh[MVW_ROWS];
        float dl[MVW_ROWS][2], ml[MVW_ROWS][2];
#pragma unroll
        for (int r = 0; r < MVW_ROWS; r++) {
            // rows past the end read the last row; their sums are not stored
            const u8* blk = w + (u64)min(row0 + r, rows - 1) * row_bytes + (u64)b * BYTES;
            q[r] = *(const uint4*)(blk + QS + 16 * p);
            if constexpr (Q5) qh[r] = *(const uint4*)(blk + 16 + 16 * h);
            const uint4 hd = *(const uint4*)blk;
            const float d = h2f((u16)(hd.x & 0xffff)), dmin = h2f((u16)(hd.x >> 16));
#pragma unroll
            for (int s = 0; s < 2; s++) {
                int sc, m;
                scale_min_words(hd.y, hd.z, hd.w, 2 * j + s, &sc, &m);
                dl[r][s] = d * (float)sc;
                ml[r][s] = dmin * (float)m;
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + 256 * b + 64 * j + 16 * h;
#pragma unroll
                for (int s = 0; s < 2; s++) {  // low nibbles, then high
                    float xs[16];
                    const float sum = load16(xt + 32 * s, xs);
#pragma unroll
                    for (int r = 0; r < MVW_ROWS; r++) {
                        float dot = 0.0f;
#pragma unroll
                        for (int i = 0; i < 16; i++) {
                            u32 v = (piece_byte(q[r], i) >> (4 * s)) & 0x0f;
                            if constexpr (Q5) v |= ((piece_byte(qh[r], i) >> (2 * j + s)) & 1) << 4;
                            dot += (float)v * xs[i];
                        }
                        acc[r][t] += dl[r][s] * dot - ml[r][s] * sum;
                    }
                }
            }
        }
    }
    mvw_store(acc, row0, rows, n_tok, y, bias);
}

template <int NT>
__device__ __forceinline__ void mvw_q4_k(const u8* __restrict__ w, u64 row_bytes, int rows,
                                         int cols, const float* __restrict__ x, int n_tok,
                                         float* __restrict__ y, const float* __restrict__ bias) {
    mvw_k4<NT, false>(w, row_bytes, rows, cols, x, n_tok, y, bias);
}

template <int NT>
__device__ __forceinline__ void mvw_q5_k(const u8* __restrict__ w, u64 row_bytes, int rows,
                                         int cols, const float* __restrict__ x, int n_tok,
                                         float* __restrict__ y, const float* __restrict__ bias) {
    mvw_k4<NT, true>(w, row_bytes, rows, cols, x, n_tok, y, bias);
}

// Q6_K: piece (h, u) (0..3) of a block is elements 128h + 16u + 32k + i,
// k = 0..3, i < 16: low nibbles of ql bytes 64h + 16u + i (k = 0) and
// 64h + 32 + 16u + i (k = 1), their high nibbles (k = 2, 3), two bits each
// from qh bytes 128 + 32h + 16u + i; scale sc[8h + u + 2k].
// NT: most tokens (n_tok <= NT); one kernel per NT keeps registers for 1 low.
template <int NT>
__device__ __forceinline__ void mvw_q6_k(const u8* __restrict__ w, u64 row_bytes, int rows,
                                         int cols, const float* __restrict__ x, int n_tok,
                                         float* __restrict__ y, const float* __restrict__ bias) {
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * MVW_WARPS + threadIdx.x / WARP) * MVW_ROWS;
    if (row0 >= rows) return;  // the whole warp
    float acc[MVW_ROWS][NT] = {};
    const int pieces = cols / 256 * 4;
    for (int pc = lane; pc < pieces; pc += WARP) {
        const int b = pc >> 2, h = (pc >> 1) & 1, u = pc & 1;
        uint4 ql[MVW_ROWS][2], qh[MVW_ROWS];
        float ds[MVW_ROWS][4];
#pragma unroll
        for (int r = 0; r < MVW_ROWS; r++) {
            const u8* blk = w + (u64)min(row0 + r, rows - 1) * row_bytes + (u64)b * 210;
            ql[r][0] = ld16_a2(blk + 64 * h + 16 * u);
            ql[r][1] = ld16_a2(blk + 64 * h + 32 + 16 * u);
            qh[r] = ld16_a2(blk + 128 + 32 * h + 16 * u);
            const float d = h2f(*(const u16*)(blk + 208));
#pragma unroll
            for (int k = 0; k < 4; k++) ds[r][k] = d * (float)(i8)blk[192 + 8 * h + u + 2 * k];
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + 256 * b + 128 * h + 16 * u;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float xs[16];
                    const float sum = load16(xt + 32 * k, xs);
#pragma unroll
                    for (int r = 0; r < MVW_ROWS; r++) {
                        float dot = 0.0f;
#pragma unroll
                        for (int i = 0; i < 16; i++) {
                            const u32 lo = (piece_byte(ql[r][k & 1], i) >> (4 * (k >> 1))) & 0x0f;
                            const u32 hi = (piece_byte(qh[r], i) >> (2 * k)) & 3;
                            dot += (float)(lo | (hi << 4)) * xs[i];
                        }
                        acc[r][t] += ds[r][k] * (dot - 32.0f * sum);
                    }
                }
            }
        }
    }
    mvw_store(acc, row0, rows, n_tok, y, bias);
}

// Q8_0: a piece is one 34-byte block (2-byte aligned): the f16 scale, then
// 32 signed values read as two 16-byte pieces through aligned words.
template <int NT>
__device__ __forceinline__ void mvw_q8_0(const u8* __restrict__ w, u64 row_bytes, int rows,
                                         int cols, const float* __restrict__ x, int n_tok,
                                         float* __restrict__ y, const float* __restrict__ bias) {
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * MVW_WARPS + threadIdx.x / WARP) * MVW_ROWS;
    if (row0 >= rows) return;  // the whole warp
    float acc[MVW_ROWS][NT] = {};
    const int pieces = cols / 32;
    for (int pc = lane; pc < pieces; pc += WARP) {
        uint4 q[MVW_ROWS][2];
        float d[MVW_ROWS];
#pragma unroll
        for (int r = 0; r < MVW_ROWS; r++) {
            const u8* blk = w + (u64)min(row0 + r, rows - 1) * row_bytes + (u64)pc * 34;
            d[r] = h2f(*(const u16*)blk);
            q[r][0] = ld16_a2(blk + 2);
            q[r][1] = ld16_a2(blk + 18);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + 32 * pc;
#pragma unroll
                for (int s = 0; s < 2; s++) {
                    float xs[16];
                    load16(xt + 16 * s, xs);
#pragma unroll
                    for (int r = 0; r < MVW_ROWS; r++) {
                        float dot = 0.0f;
#pragma unroll
                        for (int i = 0; i < 16; i++) dot += (float)(i8)piece_byte(q[r][s], i) * xs[i];
                        acc[r][t] += d[r] * dot;
                    }
                }
            }
        }
    }
    mvw_store(acc, row0, rows, n_tok, y, bias);
}

// 16 bytes at any address (MXFP4 blocks are 17 bytes) from aligned words,
// without reading past the 16 bytes: the last 1..3 come a byte at a time
// (a tensor's last block may end the allocation).
__device__ __forceinline__ uint4 ld16_a1(const u8* p) {
    const u64 a = (u64)p;
    const int s = (int)(a & 3);
    const u32* w = (const u32*)(a & ~(u64)3);
    uint4 r;
    r.x = w[0];
    r.y = w[1];
    r.z = w[2];
    r.w = w[3];
    if (s) {
        u32 tail = 0;
        for (int i = 0; i < s; i++) tail |= (u32)p[16 - s + i] << (8 * i);
        const int lo = 8 * s, hi = 32 - 8 * s;
        r.x = (r.x >> lo) | (r.y << hi);
        r.y = (r.y >> lo) | (r.z << hi);
        r.z = (r.z >> lo) | (r.w << hi);
        r.w = (r.w >> lo) | (tail << hi);
    }
    return r;
}

// Dot product of 32 packed 4-bit table indices (16 bytes: element i in the
// low nibble of byte i, element 16 + i in the high one) with x0 (elements
// 0..16) and x1 (16..32), the table packed as in quant.cuh.
__device__ __forceinline__ float table_dot(const uint4& q, u64 lo, u64 hi, const float* x0,
                                           const float* x1) {
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int b = (int)piece_byte(q, i);
        dot += kv_level(lo, hi, b & 0x0f) * x0[i] + kv_level(lo, hi, b >> 4) * x1[i];
    }
    return dot;
}

// IQ4_NL (18-byte blocks: the f16 scale 2-byte aligned) and MXFP4 (17-byte
// blocks, any alignment; an E8M0 scale byte): a piece is one block, its 16
// bytes of indices read through aligned words and looked up in registers.
template <int NT, bool NL>
__device__ __forceinline__ void mvw_t4(const u8* __restrict__ w, u64 row_bytes, int rows,
                                       int cols, const float* __restrict__ x, int n_tok,
                                       float* __restrict__ y, const float* __restrict__ bias) {
    constexpr int BYTES = NL ? 18 : 17;
    constexpr u64 LO = NL ? IQ4NL_LO : MXFP4_LO, HI = NL ? IQ4NL_HI : MXFP4_HI;
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * MVW_WARPS + threadIdx.x / WARP) * MVW_ROWS;
    if (row0 >= rows) return;  // the whole warp
    float acc[MVW_ROWS][NT] = {};
    const int pieces = cols / 32;
    for (int pc = lane; pc < pieces; pc += WARP) {
        uint4 q[MVW_ROWS];
        float d[MVW_ROWS];
#pragma unroll
        for (int r = 0; r < MVW_ROWS; r++) {
            const u8* blk = w + (u64)min(row0 + r, rows - 1) * row_bytes + (u64)pc * BYTES;
            if constexpr (NL) {
                d[r] = h2f(*(const u16*)blk);
                q[r] = ld16_a2(blk + 2);
            } else {
                d[r] = e8m0_half(blk[0]);
                q[r] = ld16_a1(blk + 1);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + 32 * pc;
                float x0[16], x1[16];
                load16(xt, x0);
                load16(xt + 16, x1);
#pragma unroll
                for (int r = 0; r < MVW_ROWS; r++) acc[r][t] += d[r] * table_dot(q[r], LO, HI, x0, x1);
            }
        }
    }
    mvw_store(acc, row0, rows, n_tok, y, bias);
}

template <int NT>
__device__ __forceinline__ void mvw_iq4_nl(const u8* __restrict__ w, u64 row_bytes, int rows,
                                           int cols, const float* __restrict__ x, int n_tok,
                                           float* __restrict__ y, const float* __restrict__ bias) {
    mvw_t4<NT, true>(w, row_bytes, rows, cols, x, n_tok, y, bias);
}

template <int NT>
__device__ __forceinline__ void mvw_mxfp4(const u8* __restrict__ w, u64 row_bytes, int rows,
                                          int cols, const float* __restrict__ x, int n_tok,
                                          float* __restrict__ y, const float* __restrict__ bias) {
    mvw_t4<NT, false>(w, row_bytes, rows, cols, x, n_tok, y, bias);
}

// IQ4_XS: piece p (0..7) of a 136-byte block (8-byte aligned in a row of
// whole blocks) is sub-block p: indices at 8 + 16p, scale d * (ls_p - 32).
template <int NT>
__device__ __forceinline__ void mvw_iq4_xs(const u8* __restrict__ w, u64 row_bytes, int rows,
                                           int cols, const float* __restrict__ x, int n_tok,
                                           float* __restrict__ y, const float* __restrict__ bias) {
    const int lane = threadIdx.x % WARP;
    const int row0 = (blockIdx.x * MVW_WARPS + threadIdx.x / WARP) * MVW_ROWS;
    if (row0 >= rows) return;  // the whole warp
    float acc[MVW_ROWS][NT] = {};
    const int pieces = cols / 32;
    for (int pc = lane; pc < pieces; pc += WARP) {
        const int b = pc >> 3, p = pc & 7;
        uint4 q[MVW_ROWS];
        float dl[MVW_ROWS];
#pragma unroll
        for (int r = 0; r < MVW_ROWS; r++) {
            const u8* blk = w + (u64)min(row0 + r, rows - 1) * row_bytes + (u64)b * 136;
            dl[r] = h2f(*(const u16*)blk) * (float)(iq4xs_scale(blk, p) - 32);
            q[r] = ld16_a2(blk + 8 + 16 * p);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                const float* xt = x + (u64)t * cols + 32 * pc;
                float x0[16], x1[16];
                load16(xt, x0);
                load16(xt + 16, x1);
#pragma unroll
                for (int r = 0; r < MVW_ROWS; r++)
                    acc[r][t] += dl[r] * table_dot(q[r], IQ4NL_LO, IQ4NL_HI, x0, x1);
            }
        }
    }
    mvw_store(acc, row0, rows, n_tok, y, bias);
}

// matvec_wide_*: up to MV_MAX_TOKENS tokens; matvec_wide1_*: one (decode).
#define MVW_KERNEL(NAME)                                                                         \
    extern "C" __global__ void __launch_bounds__(MVW_WARPS * WARP)                               \
        matvec_wide_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x,       \
                           int n_tok, float* y, const float* bias) {                             \
        mvw_##NAME<MV_MAX_TOKENS>(w, row_bytes, rows, cols, x, n_tok, y, bias);                  \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(MVW_WARPS * WARP)                               \
        matvec_wide1_##NAME(const u8* w, u64 row_bytes, int rows, int cols, const float* x,      \
                            int n_tok, float* y, const float* bias) {                            \
        mvw_##NAME<1>(w, row_bytes, rows, cols, x, 1, y, bias);                                  \
    }

// Routed experts of a decode round (few tokens): grid row `slot` (token
// slot / top_k, its k-th choice) multiplies the chosen expert's matrix
// (w + e * expert_bytes) with x row slot / x_div into y row slot. Slots with
// no expert write nothing (moe_combine skips them). The expert ids are read
// on the device: no host readback of the routing.
#define MVW_MOE_KERNEL(NAME)                                                                     \
    extern "C" __global__ void __launch_bounds__(MVW_WARPS * WARP) matvec_wide_moe_##NAME(      \
        const u8* w, u64 row_bytes, u64 expert_bytes, int rows, int cols, const float* x,        \
        int x_div, float* y, const float* routing, int top_k, int n_expert) {                    \
        const int slot = blockIdx.y;                                                             \
        const int e = expert_of(routing[(u64)(slot / top_k) * 2 * top_k + slot % top_k], n_expert); \
        if (e >= n_expert) return;                                                               \
        mvw_##NAME<1>(w + (u64)e * expert_bytes, row_bytes, rows, cols, x + (u64)(slot / x_div) * cols, \
                   1, y + (u64)slot * rows, nullptr);                                            \
    }

MVW_KERNEL(q4_k)
MVW_KERNEL(q5_k)
MVW_KERNEL(q6_k)
MVW_KERNEL(q8_0)
MVW_KERNEL(iq4_nl)
MVW_KERNEL(iq4_xs)
MVW_KERNEL(mxfp4)
MVW_MOE_KERNEL(q4_k)
MVW_MOE_KERNEL(q5_k)
MVW_MOE_KERNEL(q6_k)
MVW_MOE_KERNEL(q8_0)
MVW_MOE_KERNEL(iq4_nl)
MVW_MOE_KERNEL(iq4_xs)
MVW_MOE_KERNEL(mxfp4)
