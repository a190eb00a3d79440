// Flash attention: online softmax over tiles of keys, so no score matrix of
// more than one tile ever exists. A block takes one KV head and a chunk of
// query rows (Q-chunking); the query heads that share the KV head (GQA) are
// processed together, so each key/value tile is loaded once for all of them.
// Masks: causal (with the cache offset), full, and segments (windows: keys
// of the query's own segment only). Long key ranges with few queries
// (decode) are split across blocks and merged by attn_combine.
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
                                           const int* bounds, int n_bounds, int* lo, int* hi) {
    if (mask == MASK_CAUSAL) {
        *lo = 0;
        *hi = min(offset + qi + 1, n_keys);
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

template <typename KV>
__device__ void attn_impl(const float* __restrict__ q, const KV* __restrict__ k,
                          const KV* __restrict__ v, float* __restrict__ out,
                          float* __restrict__ part_o, float* __restrict__ part_ml, int n_q,
                          int n_keys, int n_heads, int n_kv, int D, float scale, int mask,
                          int offset, const int* __restrict__ bounds, int n_bounds, int R,
                          int BK, int split_keys) {
    extern __shared__ __align__(16) float smem[];
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
        if (r < nv) key_bounds(mask, row0 + r / group, offset, n_keys, bounds, n_bounds, &a, &b);
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
            const u64 src = (u64)(kb + j) * kv_w + (u64)g * D + d;
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
                    const float l = ml_l[r];
                    out[(u64)row * q_w + (u64)h * D + d] = l > 0.0f ? acc[a] / l : 0.0f;
                }
            }
        }
    }
}

#define ATTN_ARGS                                                                                 \
    const float *q, const KVT *k, const KVT *v, float *out, float *part_o, float *part_ml,         \
        int n_q, int n_keys, int n_heads, int n_kv, int D, float scale, int mask, int offset,     \
        const int *bounds, int n_bounds, int R, int BK, int split_keys
#define ATTN_CALL \
    q, k, v, out, part_o, part_ml, n_q, n_keys, n_heads, n_kv, D, scale, mask, offset, bounds, \
        n_bounds, R, BK, split_keys

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

// Merges the key splits: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M).
// One block per (query row, head), threads over the head's columns.
extern "C" __global__ void attn_combine(const float* __restrict__ part_o,
                                        const float* __restrict__ part_ml, float* __restrict__ out,
                                        int n_q, int n_heads, int D, int n_split) {
    const u64 slot = blockIdx.x;  // row * n_heads + h
    float M = NEG_INF;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, part_ml[2 * ((u64)s * n_q * n_heads + slot)]);
    float L = 0.0f;
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
