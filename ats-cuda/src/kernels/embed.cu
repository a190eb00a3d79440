// Token embedding lookup from a table of any type: one thread dequantises one
// 32-column chunk of one token's row. Token ids were checked on the host.

#define EMBED_KERNEL(NAME, DT)                                                                 \
    extern "C" __global__ void embed_##NAME(const u8* table, u64 row_bytes, int cols,          \
                                            const u32* tokens, int n_tok, float* out) {        \
        const int per_row = cols / 32;                                                         \
        const u64 g = (u64)blockIdx.x * blockDim.x + threadIdx.x;                              \
        if (g >= (u64)per_row * n_tok) return;                                                 \
        const u64 t = g / per_row;                                                             \
        const int c = (int)(g % per_row);                                                      \
        float v[32];                                                                           \
        deq32<DT>(table + (u64)tokens[t] * row_bytes, c, v);                                   \
        float* o = out + t * cols + 32 * c;                                                    \
        for (int i = 0; i < 32; i++) o[i] = v[i];                                              \
    }

FOR_EACH_DTYPE(EMBED_KERNEL)
