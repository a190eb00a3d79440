// Element-wise ops and row moves. The arithmetic matches the CPU reference
// (ats-cpu/src/ops/elementwise.rs) operation for operation.

#define GRID_STRIDE(i, n)                                                        \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);           \
         i += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void add_f32(const float* a, const float* b, float* out, u64 n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

extern "C" __global__ void mul_f32(const float* a, const float* b, float* out, u64 n) {
    GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

extern "C" __global__ void swiglu_f32(const float* gate, const float* up, float* out, u64 n) {
    GRID_STRIDE(i, n) out[i] = silu(gate[i]) * up[i];
}

// gpt-oss's clamped SwiGLU, as the CPU reference: gate clamped above, up
// both ways, then gate * sigmoid(alpha gate) * (up + 1). NaN passes through.
extern "C" __global__ void swiglu_oai_f32(const float* gate, const float* up, float* out, u64 n,
                                          float alpha, float limit) {
    GRID_STRIDE(i, n) {
        float g = gate[i], u = up[i];
        if (g > limit) g = limit;
        if (u > limit) u = limit;
        else if (u < -limit) u = -limit;
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

// erf in f64 from the same Chebyshev fit as the CPU reference (relative error
// below 1.2e-7), so both sides round alike.
__device__ __forceinline__ float erf_ref(float xf) {
    const double z = fabs((double)xf);
    const double t = 1.0 / (1.0 + 0.5 * z);
    const double r =
        t * exp(-z * z - 1.26551223 +
                t * (1.00002368 +
                     t * (0.37409196 +
                          t * (0.09678418 +
                               t * (-0.18628806 +
                                    t * (0.27886807 +
                                         t * (-1.13520398 +
                                              t * (1.48851587 +
                                                   t * (-0.82215223 + t * 0.17087277)))))))));
    const double v = 1.0 - r;
    return (float)(xf >= 0.0f ? v : -v);
}

extern "C" __global__ void gelu_erf_f32(const float* x, float* out, u64 n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        out[i] = 0.5f * v * (1.0f + erf_ref(v / 1.41421356237309504880f));
    }
}

extern "C" __global__ void gelu_tanh_f32(const float* x, float* out, u64 n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        const float c = 0.7978846f;
        out[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

extern "C" __global__ void relu_sqr_f32(const float* x, float* out, u64 n) {
    GRID_STRIDE(i, n) {
        const float r = fmaxf(x[i], 0.0f);
        out[i] = r * r;
    }
}

extern "C" __global__ void gelu_quick_f32(const float* x, float* out, u64 n) {
    GRID_STRIDE(i, n) {
        const float v = x[i];
        out[i] = v / (1.0f + expf(-1.702f * v));
    }
}

// out[r, c] += bias[c] for rows of `cols`.
extern "C" __global__ void bias_add_f32(float* out, const float* bias, u64 cols, u64 n) {
    GRID_STRIDE(i, n) out[i] += bias[i % cols];
}

// out row i = x row rows[i] (rows of `cols` floats).
extern "C" __global__ void gather_rows_f32(const float* x, const int* rows, float* out, u64 cols,
                                           u64 n) {
    GRID_STRIDE(i, n) out[i] = x[(u64)rows[i / cols] * cols + i % cols];
}

// out[r, b * len + j] = x[r, offset + b * stride + j] for rows of `in_cols`
// and `out_cols` = blocks * len floats (one temporal frame of Conv3d patch rows).
extern "C" __global__ void gather_cols_f32(const float* x, float* out, u64 in_cols, u64 out_cols,
                                           u64 offset, u64 len, u64 stride, u64 n) {
    GRID_STRIDE(i, n) {
        const u64 r = i / out_cols, c = i % out_cols;
        out[i] = x[r * in_cols + offset + (c / len) * stride + c % len];
    }
}
