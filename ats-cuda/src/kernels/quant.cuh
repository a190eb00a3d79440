// Dequantisation of 32 consecutive elements ("a chunk") of a weight row, for
// every element type, bit-exact with ats-core's reference: products and sums
// use the _rn intrinsics so the compiler cannot contract them into FMAs
// (which would round differently from the reference).
//
// Type ids are GGML's. Chunk `c` of a row holds elements 32c..32c+32; for the
// 256-element K-quant super-blocks a chunk is one eighth of a block.

#define DT_F32 0
#define DT_F16 1
#define DT_Q4_0 2
#define DT_Q4_1 3
#define DT_Q5_0 6
#define DT_Q5_1 7
#define DT_Q8_0 8
#define DT_Q2_K 10
#define DT_Q3_K 11
#define DT_Q4_K 12
#define DT_Q5_K 13
#define DT_Q6_K 14
#define DT_IQ4_NL 20
#define DT_IQ4_XS 23
#define DT_BF16 30
#define DT_MXFP4 39

// The 16-level tables of the 4-bit table formats, one signed byte per
// index, packed into two words (indices 0..8, 8..16) so that a lookup is a
// shift in registers: no constant-memory table to declare for NVRTC and the
// host emulator alike. IQ4_NL / IQ4_XS: ggml's kvalues_iq4nl; MXFP4: the
// E2M1 values doubled (kvalues_mxfp4), whose scale is halved to match.
#define IQ4NL_LO 0xf6eaddcfbfad9881ull
#define IQ4NL_HI 0x7159453526190d01ull
#define MXFP4_LO 0x0c08060403020100ull
#define MXFP4_HI 0xf4f8fafcfdfeff00ull

// Level of 4-bit index q (0..15) in the table packed as (lo, hi).
__device__ __forceinline__ float kv_level(u64 lo, u64 hi, int q) {
    const u64 w = q < 8 ? lo : hi;
    return (float)(i8)(u8)(w >> (8 * (q & 7)));
}

// Half the value of an E8M0 exponent, 2^(e - 128), bit for bit as ggml
// builds it (the two smallest are subnormal).
__device__ __forceinline__ float e8m0_half(int e) {
    return __uint_as_float(e < 2 ? (0x00200000u << e) : ((u32)(e - 1) << 23));
}

// The 6-bit scale of IQ4_XS sub-block j: low nibble from scales_l (byte
// 4 + j / 2), high 2 bits from the u16 scales_h (bytes 2..4).
__device__ __forceinline__ int iq4xs_scale(const u8* b, int j) {
    const int lo = (b[4 + j / 2] >> (4 * (j & 1))) & 0x0f;
    const int hi = ((b[2 + j / 4] >> (2 * (j & 3))) & 3);
    return lo | (hi << 4);
}

// Q4_K / Q5_K packed 6-bit scale and min of sub-block j.
__device__ __forceinline__ void scale_min_k4(int j, const u8* s, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

template <int DT>
__device__ __forceinline__ void deq32(const u8* __restrict__ row, int c, float* v) {
    if constexpr (DT == DT_F32) {
        const float* p = (const float*)row + 32 * c;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = p[i];
    } else if constexpr (DT == DT_F16) {
        const u16* p = (const u16*)row + 32 * c;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = h2f(p[i]);
    } else if constexpr (DT == DT_BF16) {
        const u16* p = (const u16*)row + 32 * c;
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = bf2f(p[i]);
    } else if constexpr (DT == DT_Q8_0) {
        const u8* b = row + 34 * c;
        const float d = ld_f16(b);
#pragma unroll
        for (int i = 0; i < 32; i++) v[i] = __fmul_rn((float)(i8)b[2 + i], d);
    } else if constexpr (DT == DT_Q4_0) {
        const u8* b = row + 18 * c;
        const float d = ld_f16(b);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[2 + j];
            v[j] = __fmul_rn((float)((q & 0x0f) - 8), d);
            v[j + 16] = __fmul_rn((float)((q >> 4) - 8), d);
        }
    } else if constexpr (DT == DT_Q4_1) {
        const u8* b = row + 20 * c;
        const float d = ld_f16(b), m = ld_f16(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[4 + j];
            v[j] = __fadd_rn(__fmul_rn((float)(q & 0x0f), d), m);
            v[j + 16] = __fadd_rn(__fmul_rn((float)(q >> 4), d), m);
        }
    } else if constexpr (DT == DT_Q5_0) {
        const u8* b = row + 22 * c;
        const float d = ld_f16(b);
        const u32 qh = ld_u32(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[6 + j];
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            v[j] = __fmul_rn((float)(((q & 0x0f) | (h0 << 4)) - 16), d);
            v[j + 16] = __fmul_rn((float)(((q >> 4) | (h1 << 4)) - 16), d);
        }
    } else if constexpr (DT == DT_Q5_1) {
        const u8* b = row + 24 * c;
        const float d = ld_f16(b), m = ld_f16(b + 2);
        const u32 qh = ld_u32(b + 4);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = b[8 + j];
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            v[j] = __fadd_rn(__fmul_rn((float)((q & 0x0f) | (h0 << 4)), d), m);
            v[j + 16] = __fadd_rn(__fmul_rn((float)((q >> 4) | (h1 << 4)), d), m);
        }
    } else if constexpr (DT == DT_Q4_K || DT == DT_Q5_K) {
        const int bs = DT == DT_Q4_K ? 144 : 176;
        const u8* b = row + bs * (c >> 3);
        const int sub = c & 7;
        const float d = ld_f16(b), dmin = ld_f16(b + 2);
        int sc, mn;
        scale_min_k4(sub, b + 4, &sc, &mn);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
        const u8* qs = b + (DT == DT_Q4_K ? 16 : 48) + 32 * (sub >> 1);
        const int shift = 4 * (sub & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            int q = (qs[l] >> shift) & 0x0f;
            if constexpr (DT == DT_Q5_K) q |= ((b[16 + l] >> sub) & 1) << 4;
            v[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
    } else if constexpr (DT == DT_IQ4_NL || DT == DT_MXFP4) {
        constexpr bool NL = DT == DT_IQ4_NL;
        const u8* b = row + (NL ? 18 : 17) * c;
        const float d = NL ? ld_f16(b) : e8m0_half(b[0]);
        const u8* qs = b + (NL ? 2 : 1);
        const u64 lo = NL ? IQ4NL_LO : MXFP4_LO, hi = NL ? IQ4NL_HI : MXFP4_HI;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = qs[j];
            v[j] = __fmul_rn(d, kv_level(lo, hi, q & 0x0f));
            v[j + 16] = __fmul_rn(d, kv_level(lo, hi, q >> 4));
        }
    } else if constexpr (DT == DT_IQ4_XS) {
        const u8* b = row + 136 * (c >> 3);
        const int sub = c & 7;
        const float dl = __fmul_rn(ld_f16(b), (float)(iq4xs_scale(b, sub) - 32));
        const u8* qs = b + 8 + 16 * sub;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int q = qs[j];
            v[j] = __fmul_rn(dl, kv_level(IQ4NL_LO, IQ4NL_HI, q & 0x0f));
            v[j + 16] = __fmul_rn(dl, kv_level(IQ4NL_LO, IQ4NL_HI, q >> 4));
        }
    } else if constexpr (DT == DT_Q6_K) {
        const u8* b = row + 210 * (c >> 3);
        const int sub = c & 7, h = sub >> 2, s = sub & 3;
        const float d = ld_f16(b + 208);
        const u8* ql = b + 64 * h + 32 * (s & 1);
        const u8* qh = b + 128 + 32 * h;
        const int lshift = 4 * (s >> 1);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const float ds = __fmul_rn(d, (float)(i8)b[192 + 8 * h + l / 16 + 2 * s]);
            const int q = ((ql[l] >> lshift) & 0x0f) | (((qh[l] >> (2 * s)) & 3) << 4);
            v[l] = __fmul_rn(ds, (float)(q - 32));
        }
    } else if constexpr (DT == DT_Q2_K) {
        const u8* b = row + 84 * (c >> 3);
        const int sub = c & 7;
        const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
        const u8* qs = b + 16 + 32 * (sub >> 2);
        const int shift = 2 * (sub & 3);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int sc = b[2 * sub + l / 16];
            const float dl = __fmul_rn(d, (float)(sc & 0x0f));
            const float ml = __fmul_rn(dmin, (float)(sc >> 4));
            v[l] = __fsub_rn(__fmul_rn(dl, (float)((qs[l] >> shift) & 3)), ml);
        }
    } else if constexpr (DT == DT_Q3_K) {
        const u8* b = row + 110 * (c >> 3);
        const int sub = c & 7, h = sub >> 2, s = sub & 3;
        const float d = ld_f16(b + 108);
        const u8* sc = b + 96;
        const u8* qs = b + 32 + 32 * h;
        const int bit = 4 * h + s;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int j = 2 * sub + l / 16;
            const int lo = j < 8 ? (sc[j] & 0x0f) : (sc[j - 8] >> 4);
            const int hi = (sc[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            const float dl = __fmul_rn(d, (float)((lo | (hi << 4)) - 32));
            const int low = (qs[l] >> (2 * s)) & 3;
            const int off = ((b[l] >> bit) & 1) ? 0 : 4;
            v[l] = __fmul_rn(dl, (float)(low - off));
        }
    }
}

// The float types may have rows that are not whole chunks (a vision patch
// embedding of 1176 columns): this variant zero-fills past `cols`.
template <int DT>
__device__ __forceinline__ void deq32_tail(const u8* __restrict__ row, int c, int cols, float* v) {
#pragma unroll
    for (int i = 0; i < 32; i++) {
        const int e = 32 * c + i;
        float x = 0.0f;
        if (e < cols) {
            if constexpr (DT == DT_F32) x = ((const float*)row)[e];
            else if constexpr (DT == DT_F16) x = h2f(((const u16*)row)[e]);
            else x = bf2f(((const u16*)row)[e]);
        }
        v[i] = x;
    }
}

// Bytes of one row of `cols` elements.
__device__ __forceinline__ u64 row_bytes_of(int dt, u64 cols) {
    switch (dt) {
        case DT_F32: return cols * 4;
        case DT_F16: case DT_BF16: return cols * 2;
        case DT_Q8_0: return cols / 32 * 34;
        case DT_Q4_0: return cols / 32 * 18;
        case DT_Q4_1: return cols / 32 * 20;
        case DT_Q5_0: return cols / 32 * 22;
        case DT_Q5_1: return cols / 32 * 24;
        case DT_Q2_K: return cols / 256 * 84;
        case DT_Q3_K: return cols / 256 * 110;
        case DT_Q4_K: return cols / 256 * 144;
        case DT_Q5_K: return cols / 256 * 176;
        case DT_Q6_K: return cols / 256 * 210;
        case DT_IQ4_NL: return cols / 32 * 18;
        case DT_IQ4_XS: return cols / 256 * 136;
        case DT_MXFP4: return cols / 32 * 17;
    }
    return 0;
}

// Instantiates MACRO(name_suffix, type id) for every type.
#define FOR_EACH_DTYPE(MACRO) \
    MACRO(f32, DT_F32)        \
    MACRO(f16, DT_F16)        \
    MACRO(bf16, DT_BF16)      \
    MACRO(q8_0, DT_Q8_0)      \
    MACRO(q4_0, DT_Q4_0)      \
    MACRO(q4_1, DT_Q4_1)      \
    MACRO(q5_0, DT_Q5_0)      \
    MACRO(q5_1, DT_Q5_1)      \
    MACRO(q2_k, DT_Q2_K)      \
    MACRO(q3_k, DT_Q3_K)      \
    MACRO(q4_k, DT_Q4_K)      \
    MACRO(q5_k, DT_Q5_K)      \
    MACRO(q6_k, DT_Q6_K)      \
    MACRO(iq4_nl, DT_IQ4_NL)  \
    MACRO(iq4_xs, DT_IQ4_XS)  \
    MACRO(mxfp4, DT_MXFP4)

// The float types, whose rows may end inside a chunk.
#define FOR_EACH_FLOAT_DTYPE(MACRO) \
    MACRO(f32, DT_F32)              \
    MACRO(f16, DT_F16)              \
    MACRO(bf16, DT_BF16)
