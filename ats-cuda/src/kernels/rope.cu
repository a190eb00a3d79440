// Rotary position embeddings, out of place: out = rope(x). The host fills the
// per-pair table (inverse frequency computed exactly as the CPU reference
// does, YaRN included, and which position component each pair rotates by),
// so the kernel only looks up, divides by the optional frequency factor, and
// rotates.

#define ROPE_MAX_PAIRS 128
#define ROPE_NORMAL 0
#define ROPE_NEOX 1

struct RopeTable {
    float inv_freq[ROPE_MAX_PAIRS];
    // position component of the pair, and the index of its frequency factor
    int component[ROPE_MAX_PAIRS];
    int factor_index[ROPE_MAX_PAIRS];
    // scale of cos and sin (YaRN's magnitude correction; 1 without it)
    float mscale;
};

// x, out: rows of n_heads * head_dim; positions: `components` ints per row.
// Pair i of a head rotates (2i, 2i+1) (normal) or (i, i + n_pairs) (NeoX
// layouts: NeoX, M-RoPE, 2D vision).
extern "C" __global__ void rope_f32(const float* __restrict__ x, float* __restrict__ out,
                                    const int* __restrict__ positions, int components, int rows,
                                    int n_heads, int head_dim, int n_pairs, int mode,
                                    const float* __restrict__ factors, RopeTable table) {
    const u64 width = (u64)n_heads * head_dim;
    const u64 n = width * rows;
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (u64)gridDim.x * blockDim.x) {
        const u64 r = e / width;
        const int d = (int)(e % width % head_dim);
        int pair, first;
        if (mode == ROPE_NORMAL) {
            pair = d / 2;
            first = (d & 1) == 0;
        } else {
            pair = d < n_pairs ? d : d - n_pairs;
            first = d < n_pairs;
        }
        if (d >= 2 * n_pairs) {
            out[e] = x[e];
            continue;
        }
        float inv = table.inv_freq[pair];
        if (factors) inv = inv / factors[table.factor_index[pair]];
        const float angle = (float)positions[r * components + table.component[pair]] * inv;
        const float c = cosf(angle) * table.mscale, s = sinf(angle) * table.mscale;
        const int step = mode == ROPE_NORMAL ? 1 : n_pairs;
        if (first) {
            const float a = x[e], b = x[e + step];
            out[e] = a * c - b * s;
        } else {
            const float a = x[e - step], b = x[e];
            out[e] = a * s + b * c;
        }
    }
}
