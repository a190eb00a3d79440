// Mixture of experts on the device, with no host readback of expert ids (the
// copy pipeline must never wait on routing):
// - moe_topk: softmax or sigmoid scores of router logits, top-k (ties to the
//   lower id; sigmoid chooses by score plus a selection bias), optional
//   renormalisation and a scale; writes k ids (as floats) then k weights per token.
// - moe_index: groups the routed (token, slot) pairs by expert and lays out
//   the tiles the grouped matmul (matmul.cu, mm_moe_*) runs over.
// - moe_combine: out[t] = sum over slots, in increasing expert id, of
//   weight * expert output (the CPU reference's summation order).
// - moe_bias: adds each routed slot's expert bias to its product row.

// One warp per token; dynamic shared memory: (blockDim.x / 32) * n_expert floats.
// gating 0: softmax scores, chosen by score; 1: sigmoid scores, chosen by
// score + sel_bias (the weights are the scores alone). The chosen weights are
// renormalised when norm, then multiplied by scale.
extern "C" __global__ void moe_topk(const float* __restrict__ logits, float* __restrict__ out,
                                    const float* __restrict__ sel_bias, int n_tok, int n_expert,
                                    int top_k, int norm, int gating, float scale) {
    DYN_SHARED(float, probs);
    const int lane = threadIdx.x % WARP, wid = threadIdx.x / WARP;
    const int t = blockIdx.x * (blockDim.x / WARP) + wid;
    if (t >= n_tok) return;
    // the choice values: exp(logit - max) for softmax, score + bias for sigmoid
    float* e = probs + wid * n_expert;
    const float* row = logits + (u64)t * n_expert;
    float z = 1.0f;
    if (gating == 0) {
        float mx = NEG_INF;
        for (int j = lane; j < n_expert; j += WARP) mx = fmaxf(mx, row[j]);
        mx = warp_max(mx);
        for (int j = lane; j < n_expert; j += WARP) e[j] = expf(row[j] - mx);
        __syncwarp();
        // the sum in index order, like the reference
        z = 0.0f;
        if (lane == 0)
            for (int j = 0; j < n_expert; j++) z += e[j];
        z = __shfl_sync(0xffffffffu, z, 0);
    } else {
        for (int j = lane; j < n_expert; j += WARP)
            e[j] = 1.0f / (1.0f + expf(-row[j])) + sel_bias[j];
        __syncwarp();
    }
    float* o = out + (u64)t * 2 * top_k;
    float sum = 0.0f;
    for (int k = 0; k < top_k; k++) {
        float best = NEG_INF;
        int bi = n_expert;
        for (int j = lane; j < n_expert; j += WARP) {
            if (e[j] > best) {  // ascending j: ties keep the lower id
                best = e[j];
                bi = j;
            }
        }
#pragma unroll
        for (int s = WARP / 2; s > 0; s >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, s);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, s);
            if (ob > best || (ob == best && oi < bi)) {
                best = ob;
                bi = oi;
            }
        }
        if (lane == 0) {
            const int id = bi < n_expert ? bi : 0;
            o[k] = (float)id;
            const float p = gating == 0 ? e[id] / z : 1.0f / (1.0f + expf(-row[id]));
            o[top_k + k] = p;
            sum += p;
            e[id] = NEG_INF;  // taken
        }
        __syncwarp();
    }
    if (lane == 0)
        for (int k = 0; k < top_k; k++) {
            const float p = o[top_k + k];
            o[top_k + k] = (norm && sum > 0.0f ? p / sum : p) * scale;
        }
}

// One block. meta: offsets[E+1], tiles[E+1], list[n_tok * top_k] (see matmul.cu).
// Dynamic shared memory: 2 * n_expert ints.
extern "C" __global__ void moe_index(const float* __restrict__ routing, int* __restrict__ meta,
                                     int n_tok, int n_expert, int top_k, int tile) {
    DYN_SHARED(int, sh);
    int* count = sh;
    int* fill = sh + n_expert;
    int* offsets = meta;
    int* tiles = meta + n_expert + 1;
    int* list = meta + 2 * (n_expert + 1);
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
        count[e] = 0;
        fill[e] = 0;
    }
    __syncthreads();
    const int n = n_tok * top_k;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = i / top_k, k = i % top_k;
        const int e = expert_of(routing[(u64)t * 2 * top_k + k], n_expert);
        if (e < n_expert) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, til = 0;
        for (int e = 0; e < n_expert; e++) {
            offsets[e] = off;
            tiles[e] = til;
            off += count[e];
            til += (count[e] + tile - 1) / tile;
        }
        offsets[n_expert] = off;
        tiles[n_expert] = til;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int t = i / top_k, k = i % top_k;
        const int e = expert_of(routing[(u64)t * 2 * top_k + k], n_expert);
        if (e < n_expert) list[offsets[e] + atomicAdd(&fill[e], 1)] = i;
    }
}

#define MOE_MAX_TOPK 32

// out[t, d] = sum_k w[t, k] * y[t * top_k + k, d] over valid slots, in
// increasing expert id (ties: slot order).
extern "C" __global__ void moe_combine(const float* __restrict__ routing,
                                       const float* __restrict__ y, float* __restrict__ out,
                                       int n_tok, int n_expert, int top_k, int cols) {
    const u64 n = (u64)n_tok * cols;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 t = i / cols, d = i % cols;
        const float* r = routing + t * 2 * top_k;
        int done = 0;  // bit k: slot k added
        float acc = 0.0f;
        for (int step = 0; step < top_k; step++) {
            int best = -1, be = n_expert;
            for (int k = 0; k < top_k; k++) {
                if (done & (1 << k)) continue;
                const int e = expert_of(r[k], n_expert);
                if (best < 0 || e < be) {
                    best = k;
                    be = e;
                }
            }
            done |= 1 << best;
            if (be < n_expert)
                acc = __fadd_rn(acc, __fmul_rn(r[top_k + best], y[(t * top_k + best) * cols + d]));
        }
        out[i] = acc;
    }
}

// y[slot, c] += bias[e, c] for the expert e that slot (token slot / top_k,
// choice slot % top_k) was routed to; slots routed nowhere are left alone.
extern "C" __global__ void moe_bias(float* __restrict__ y, const float* __restrict__ bias,
                                    const float* __restrict__ routing, int slots, int cols,
                                    int n_expert, int top_k) {
    const u64 n = (u64)slots * cols;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const u64 s = i / cols, c = i % cols;
        const u64 t = s / top_k, k = s % top_k;
        const int e = expert_of(routing[t * 2 * top_k + k], n_expert);
        if (e < n_expert) y[i] = y[i] + bias[(u64)e * cols + c];
    }
}
