// Flash attention: online softmax over tiles of keys, so no score matrix of
// more than one tile ever exists. A block takes one KV head and a chunk of
// query rows (Q-chunking); the query heads that share the KV head (GQA) are
// processed together, so each key/value tile is loaded once for all of them.
// Masks: causal (with the cache offset; with a sliding window, only the
// last `window` keys up to the query's own), full, and segments (windows:
// keys of the query's own segment only). Optional sink logits, one per query
// head, count in each softmax's sum with no value (gpt-oss). Long key ranges
// with few queries (decode) are split across blocks and merged by
// attn_combine.
//
// Dynamic shared memory (floats): Q[R][D], K[BK][D+1], V[BK][D], S[R][BK+1],
// then per vector: m, l, corr, and per vector the key bounds (2 ints).

#define ATTN_THREADS 128
#define ATTN_MAX_ACC 32
#define MASK_CAUSAL 0
#define MASK_FULL 1
#define MASK_SEGMENTS 2

template <typename KV>
__device__ __forceinline__ float kv_load(const KV* p, u64 i);
template <>
__device__ __forceinline__ float kv_load<u16>(const u16* p, u64 i) { return h2f(p[i]); }
template <>
__device__ __forceinline__ float kv_load<float>(const float* p, u64 i) { return p[i]; }

__device__ __forceinline__ void key_bounds(int mask, int qi, int offset, int n_keys,
                                           const int* bounds, int n_bounds, int window, int* lo,
                                           int* hi) {
    if (mask == MASK_CAUSAL) {
        *hi = min(offset + qi + 1, n_keys);
        *lo = window > 0 ? min(max(offset + qi + 1 - window, 0), *hi) : 0;
    } else if (mask == MASK_FULL) {
        *lo = 0;
        *hi = n_keys;
    } else {
        int a = 0, b = n_bounds;  // first s with bounds[s] > qi
        while (a < b) {
            const int m = (a + b) / 2;
            if (bounds[m] <= qi) a = m + 1; else b = m;
        }
        const int l = a == 0 ? 0 : bounds[a - 1];
        const int h = a < n_bounds ? min(bounds[a], n_keys) : n_keys;
        *lo = min(l, h);
        *hi = h;
    }
}

// The attention output of a query vector of head h from its softmax state
// (running max m, sum l, unnormalised accumulator acc): acc / l, or with a
// sink logit s for the head, acc e^(m-M) / (l e^(m-M) + e^(s-M)) with
// M = max(m, s). No key seen: 0.
__device__ __forceinline__ float attn_finish(float acc, float m, float l,
                                             const float* __restrict__ sinks, int h) {
    if (m == NEG_INF || !(l > 0.0f)) return 0.0f;
    if (!sinks) return acc / l;
    const float s = sinks[h];
    const float M = fmaxf(m, s);
    const float c = expf(m - M);
    return acc * c / (l * c + expf(s - M));
}

// The cache row of a sequence's key `key`: through its block table (blocks
// of 1 << block_shift rows), or row `key` itself without one.
__device__ __forceinline__ u64 kv_row(const unsigned* __restrict__ blocks, int block_shift,
                                      int key) {
    if (!blocks) return (u64)key;
    const u64 mask = ((u64)1 << block_shift) - 1;
    return ((u64)blocks[key >> block_shift] << block_shift) | ((u64)key & mask);
}

template <typename KV>
__device__ void attn_impl(const float* __restrict__ q, const KV* __restrict__ k,
                          const KV* __restrict__ v, float* __restrict__ out,
                          float* __restrict__ part_o, float* __restrict__ part_ml, int n_q,
                          int n_keys, int n_heads, int n_kv, int D, float scale, int mask,
                          int offset, const int* __restrict__ bounds, int n_bounds, int R,
                          int BK, int split_keys, const unsigned* __restrict__ blocks,
                          int block_shift, int window, const float* __restrict__ sinks) {
    DYN_SHARED(float, smem);
    const int group = n_heads / n_kv;
    const int qr = R / group;  // query rows per block
    const int g = blockIdx.y;
    const int row0 = blockIdx.x * qr;
    const int rows = min(qr, n_q - row0);
    const int nv = rows * group;  // valid query vectors
    const int tid = threadIdx.x;
    const int T = blockDim.x;
    float* qs = smem;
    float* ks = qs + R * D;
    float* vs = ks + BK * (D + 1);
    float* ss = vs + BK * D;
    float* ml_m = ss + R * (BK + 1);
    float* ml_l = ml_m + R;
    float* corr = ml_l + R;
    int* lo = (int*)(corr + R);
    int* hi = lo + R;
    const u64 q_w = (u64)n_heads * D, kv_w = (u64)n_kv * D;

    for (int r = tid; r < R; r += T) {
        int a = 0, b = 0;
        if (r < nv)
            key_bounds(mask, row0 + r / group, offset, n_keys, bounds, n_bounds, window, &a, &b);
        lo[r] = a;
        hi[r] = b;
        ml_m[r] = NEG_INF;
        ml_l[r] = 0.0f;
    }
    for (int i = tid; i < R * D; i += T) {
        const int r = i / D, d = i % D;
        qs[i] = r < nv ? q[(u64)(row0 + r / group) * q_w + (u64)(g * group + r % group) * D + d]
                       : 0.0f;
    }
    __syncthreads();
    int k_lo = n_keys, k_hi = 0;
    for (int r = 0; r < nv; r++) {
        k_lo = min(k_lo, lo[r]);
        k_hi = max(k_hi, hi[r]);
    }
    const int s0 = blockIdx.z * split_keys;
    k_lo = max(k_lo, s0);
    k_hi = min(k_hi, s0 + split_keys);

    float acc[ATTN_MAX_ACC];
#pragma unroll
    for (int i = 0; i < ATTN_MAX_ACC; i++) acc[i] = 0.0f;
    const int n_out = R * D;

    for (int kb = k_lo; kb < k_hi; kb += BK) {
        const int nk = min(BK, k_hi - kb);
        for (int i = tid; i < nk * D; i += T) {
            const int j = i / D, d = i % D;
            const u64 src = kv_row(blocks, block_shift, kb + j) * kv_w + (u64)g * D + d;
            ks[j * (D + 1) + d] = kv_load<KV>(k, src);
            vs[j * D + d] = kv_load<KV>(v, src);
        }
        __syncthreads();
        for (int i = tid; i < nv * nk; i += T) {
            const int r = i / nk, j = i % nk;
            const int key = kb + j;
            float sc = NEG_INF;
            if (key >= lo[r] && key < hi[r]) {
                const float* qr_ = qs + r * D;
                const float* kr = ks + j * (D + 1);
                float dot = 0.0f;
                for (int d = 0; d < D; d++) dot += qr_[d] * kr[d];
                sc = dot * scale;
            }
            ss[r * (BK + 1) + j] = sc;
        }
        __syncthreads();
        for (int r = tid; r < nv; r += T) {
            float* sr = ss + r * (BK + 1);
            float mx = ml_m[r];
            for (int j = 0; j < nk; j++) mx = fmaxf(mx, sr[j]);
            float c = 1.0f, sum = 0.0f;
            if (mx == NEG_INF) {
                for (int j = 0; j < nk; j++) sr[j] = 0.0f;
            } else {
                c = expf(ml_m[r] - mx);  // 0 when nothing was seen yet
                for (int j = 0; j < nk; j++) {
                    const float p = expf(sr[j] - mx);
                    sr[j] = p;
                    sum += p;
                }
                ml_m[r] = mx;
            }
            ml_l[r] = ml_l[r] * c + sum;
            corr[r] = c;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < ATTN_MAX_ACC; a++) {
            const int i = tid + a * T;
            if (i < n_out) {
                const int r = i / D, d = i % D;
                if (r < nv) {
                    const float* pr = ss + r * (BK + 1);
                    float s = acc[a] * corr[r];
                    for (int j = 0; j < nk; j++) s += pr[j] * vs[j * D + d];
                    acc[a] = s;
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int a = 0; a < ATTN_MAX_ACC; a++) {
        const int i = tid + a * T;
        if (i < n_out) {
            const int r = i / D, d = i % D;
            if (r < nv) {
                const int row = row0 + r / group, h = g * group + r % group;
                if (part_o) {
                    const u64 slot = ((u64)blockIdx.z * n_q + row) * n_heads + h;
                    part_o[slot * D + d] = acc[a];
                    if (d == 0) {
                        part_ml[2 * slot] = ml_m[r];
                        part_ml[2 * slot + 1] = ml_l[r];
                    }
                } else {
                    out[(u64)row * q_w + (u64)h * D + d] =
                        attn_finish(acc[a], ml_m[r], ml_l[r], sinks, h);
                }
            }
        }
    }
}

#define ATTN_ARGS                                                                                 \
    const float *q, const KVT *k, const KVT *v, float *out, float *part_o, float *part_ml,         \
        int n_q, int n_keys, int n_heads, int n_kv, int D, float scale, int mask, int offset,     \
        const int *bounds, int n_bounds, int R, int BK, int split_keys, const unsigned *blocks, \
        int block_shift, int window, const float *sinks
#define ATTN_CALL \
    q, k, v, out, part_o, part_ml, n_q, n_keys, n_heads, n_kv, D, scale, mask, offset, bounds, \
        n_bounds, R, BK, split_keys, blocks, block_shift, window, sinks

#define KVT u16
extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attn_f16kv(ATTN_ARGS) {
    attn_impl<u16>(ATTN_CALL);
}
#undef KVT
#define KVT float
extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attn_f32kv(ATTN_ARGS) {
    attn_impl<float>(ATTN_CALL);
}
#undef KVT

// Merges the key splits: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M)
// (plus e^(sink - M) in the sum with sinks, M then covering the sink too).
// One block per (query row, head), threads over the head's columns.
extern "C" __global__ void attn_combine(const float* __restrict__ part_o,
                                        const float* __restrict__ part_ml, float* __restrict__ out,
                                        int n_q, int n_heads, int D, int n_split,
                                        const float* __restrict__ sinks) {
    const u64 slot = blockIdx.x;  // row * n_heads + h
    float M = NEG_INF;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, part_ml[2 * ((u64)s * n_q * n_heads + slot)]);
    float L = 0.0f;
    if (sinks && M != NEG_INF) {
        const float sink = sinks[slot % n_heads];
        M = fmaxf(M, sink);
        L = expf(sink - M);
    }
    for (int s = 0; s < n_split; s++) {
        const u64 i = 2 * ((u64)s * n_q * n_heads + slot);
        if (part_ml[i] != NEG_INF) L += part_ml[i + 1] * expf(part_ml[i] - M);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const u64 i = (u64)s * n_q * n_heads + slot;
            const float m = part_ml[2 * i];
            if (m != NEG_INF) o += part_o[i * D + d] * expf(m - M);
        }
        out[slot * D + d] = L > 0.0f ? o / L : 0.0f;
    }
}

// Decode attention ("flash decoding"): few query vectors per KV head
// (n_q * group <= DEC_MAX_VECS) over a long cache, causal or full. A block
// takes one KV head and one split of the keys; each warp takes tiles of 32
// keys: one key per lane for the scores of every query vector (no
// reductions over the head), then the lanes share the head's columns for the
// weighted values, the probabilities passed by shuffles. Warps keep their own
// online softmax, merged in shared memory at the end; splits are merged by
// attn_combine, or the block writes the output when there is one split.
//
// Dynamic shared memory (floats): Q[DEC_MAX_VECS][D], then per warp m and l
// [DEC_WARPS][DEC_MAX_VECS] and the accumulators [DEC_WARPS][DEC_MAX_VECS][D].

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / WARP)
#define DEC_MAX_VECS 8

// N consecutive cache elements as floats, one aligned vector load.
template <int N>
__device__ __forceinline__ void load_kv(const u16* p, float* f) {
    if constexpr (N == 8) {
        const uint4 r = *(const uint4*)p;
        const u32 w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = h2f((u16)(w[i] & 0xffff));
            f[2 * i + 1] = h2f((u16)(w[i] >> 16));
        }
    } else if constexpr (N == 4) {
        const uint2 r = *(const uint2*)p;
        f[0] = h2f((u16)(r.x & 0xffff));
        f[1] = h2f((u16)(r.x >> 16));
        f[2] = h2f((u16)(r.y & 0xffff));
        f[3] = h2f((u16)(r.y >> 16));
    } else {
        static_assert(N == 2, "2, 4 or 8 elements");
        const u32 r = *(const u32*)p;
        f[0] = h2f((u16)(r & 0xffff));
        f[1] = h2f((u16)(r >> 16));
    }
}

template <int N>
__device__ __forceinline__ void load_kv(const float* p, float* f) {
    if constexpr (N == 2) {
        const float2 r = *(const float2*)p;
        f[0] = r.x;
        f[1] = r.y;
    } else {
        static_assert(N % 4 == 0, "2 or a multiple of 4 elements");
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const float4 r = ((const float4*)p)[i];
            f[4 * i] = r.x;
            f[4 * i + 1] = r.y;
            f[4 * i + 2] = r.z;
            f[4 * i + 3] = r.w;
        }
    }
}

// DL: head columns per lane (head_dim / 32).
template <typename KV, int DL>
__device__ void attn_decode_impl(const float* __restrict__ q, const KV* __restrict__ k,
                                 const KV* __restrict__ v, float* __restrict__ out,
                                 float* __restrict__ part_o, float* __restrict__ part_ml, int n_q,
                                 int n_keys, int n_heads, int n_kv, float scale, int mask,
                                 int offset, int split_keys, const unsigned* __restrict__ blocks,
                                 int block_shift, int window, const float* __restrict__ sinks) {
    constexpr int D = DL * WARP;
    constexpr int KS = D < 8 ? D : 8;  // key columns per load in the scores
    DYN_SHARED(float, smem);
    float* qs = smem;
    float* wm = qs + DEC_MAX_VECS * D;
    float* wl = wm + DEC_WARPS * DEC_MAX_VECS;
    float* wo = wl + DEC_WARPS * DEC_MAX_VECS;
    const int group = n_heads / n_kv;
    const int nv = n_q * group;  // block-uniform: branches on it keep warps converged
    const int g = blockIdx.x;
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    const u64 q_w = (u64)n_heads * D, kv_w = (u64)n_kv * D;

    for (int i = threadIdx.x; i < nv * D; i += blockDim.x) {
        const int vi = i / D, d = i % D;
        qs[i] = q[(u64)(vi / group) * q_w + (u64)(g * group + vi % group) * D + d];
    }
    int lo[DEC_MAX_VECS], hi[DEC_MAX_VECS];  // keys vector vi sees: lo..hi
    int k_beg = n_keys, k_end = 0;
#pragma unroll
    for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
        hi[vi] = vi >= nv ? 0 : mask == MASK_CAUSAL ? min(offset + vi / group + 1, n_keys) : n_keys;
        lo[vi] = vi < nv && mask == MASK_CAUSAL && window > 0
                     ? min(max(offset + vi / group + 1 - window, 0), hi[vi])
                     : 0;
        if (vi < nv) k_beg = min(k_beg, lo[vi]);
        k_end = max(k_end, hi[vi]);
    }
    // splits before the first key any vector sees start there (and end at once)
    const int s0 = max((int)blockIdx.y * split_keys, k_beg);
    const int s1 = min((int)blockIdx.y * split_keys + split_keys, k_end);
    __syncthreads();

    float m[DEC_MAX_VECS], l[DEC_MAX_VECS], o[DEC_MAX_VECS][DL];
#pragma unroll
    for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
        m[vi] = NEG_INF;
        l[vi] = 0.0f;
#pragma unroll
        for (int i = 0; i < DL; i++) o[vi][i] = 0.0f;
    }

    for (int kb = s0 + w * WARP; kb < s1; kb += DEC_WARPS * WARP) {
        const int key = kb + lane;
        float s[DEC_MAX_VECS];
#pragma unroll
        for (int vi = 0; vi < DEC_MAX_VECS; vi++) s[vi] = 0.0f;
        if (key < s1) {
            const KV* kr = k + kv_row(blocks, block_shift, key) * kv_w + (u64)g * D;
            for (int d0 = 0; d0 < D; d0 += KS) {
                float kf[KS];
                load_kv<KS>(kr + d0, kf);
#pragma unroll
                for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
                    if (vi < nv) {
                        const float* qv = qs + vi * D + d0;
#pragma unroll
                        for (int i = 0; i < KS; i++) s[vi] += qv[i] * kf[i];
                    }
                }
            }
        }
        float p[DEC_MAX_VECS];
#pragma unroll
        for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
            p[vi] = 0.0f;
            if (vi >= nv) continue;
            const float sc = key < s1 && key >= lo[vi] && key < hi[vi] ? s[vi] * scale : NEG_INF;
            const float mn = fmaxf(m[vi], warp_max(sc));
            if (mn == NEG_INF) continue;  // warp-uniform: nothing seen yet
            const float c = expf(m[vi] - mn);  // 0 when nothing was seen before
            p[vi] = sc == NEG_INF ? 0.0f : expf(sc - mn);
            l[vi] = l[vi] * c + warp_sum(p[vi]);
            m[vi] = mn;
#pragma unroll
            for (int i = 0; i < DL; i++) o[vi][i] *= c;
        }
        const int nk = min(WARP, s1 - kb);
        for (int j = 0; j < nk; j++) {
            float vf[DL];
            load_kv<DL>(v + kv_row(blocks, block_shift, kb + j) * kv_w + (u64)g * D + lane * DL, vf);
#pragma unroll
            for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
                if (vi < nv) {
                    const float pj = __shfl_sync(0xffffffffu, p[vi], j);
#pragma unroll
                    for (int i = 0; i < DL; i++) o[vi][i] += pj * vf[i];
                }
            }
        }
    }

    // merge the warps: e^(m_w - M) weights each warp's sums
#pragma unroll
    for (int vi = 0; vi < DEC_MAX_VECS; vi++) {
        if (vi < nv) {
            if (lane == 0) {
                wm[w * DEC_MAX_VECS + vi] = m[vi];
                wl[w * DEC_MAX_VECS + vi] = l[vi];
            }
#pragma unroll
            for (int i = 0; i < DL; i++) wo[(w * DEC_MAX_VECS + vi) * D + lane * DL + i] = o[vi][i];
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nv * D; idx += blockDim.x) {
        const int vi = idx / D, d = idx % D;
        float M = NEG_INF;
        for (int x = 0; x < DEC_WARPS; x++) M = fmaxf(M, wm[x * DEC_MAX_VECS + vi]);
        float L = 0.0f, O = 0.0f;
        if (M != NEG_INF) {
            for (int x = 0; x < DEC_WARPS; x++) {
                const float mw = wm[x * DEC_MAX_VECS + vi];
                if (mw != NEG_INF) {
                    const float e = expf(mw - M);
                    L += wl[x * DEC_MAX_VECS + vi] * e;
                    O += wo[(x * DEC_MAX_VECS + vi) * D + d] * e;
                }
            }
        }
        const int row = vi / group, h = g * group + vi % group;
        if (part_o) {
            const u64 slot = ((u64)blockIdx.y * n_q + row) * n_heads + h;
            part_o[slot * D + d] = O;
            if (d == 0) {
                part_ml[2 * slot] = M;
                part_ml[2 * slot + 1] = L;
            }
        } else {
            out[(u64)row * q_w + (u64)h * D + d] = attn_finish(O, M, L, sinks, h);
        }
    }
}

#define DEC_ARGS                                                                          \
    const float *q, const KVT *k, const KVT *v, float *out, float *part_o, float *part_ml, \
        int n_q, int n_keys, int n_heads, int n_kv, float scale, int mask, int offset,     \
        int split_keys, const unsigned *blocks, int block_shift, int window, const float *sinks
#define DEC_CALL                                                                             \
    q, k, v, out, part_o, part_ml, n_q, n_keys, n_heads, n_kv, scale, mask, offset, split_keys, \
        blocks, block_shift, window, sinks

#define DEC_KERNEL(SUFFIX, DL)                                                                  \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) attn_decode_##SUFFIX(DEC_ARGS) { \
        attn_decode_impl<KVT, DL>(DEC_CALL);                                                    \
    }

#define KVT u16
DEC_KERNEL(f16kv_d64, 2)
DEC_KERNEL(f16kv_d128, 4)
DEC_KERNEL(f16kv_d256, 8)
#undef KVT
#define KVT float
DEC_KERNEL(f32kv_d64, 2)
DEC_KERNEL(f32kv_d128, 4)
DEC_KERNEL(f32kv_d256, 8)
#undef KVT
