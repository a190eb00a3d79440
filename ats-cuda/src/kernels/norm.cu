// RMSNorm over groups of columns and LayerNorm over rows; one block per group
// (or row). Sums of squares accumulate in f64 as the CPU reference does.

#define NORM_THREADS 256

// x, out: n_groups groups of `group` floats; w: `group` weights.
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    rms_norm_f32(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out,
                 int group, float eps) {
    __shared__ double scratch[32];
    const u64 base = (u64)blockIdx.x * group;
    double ss = 0.0;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        const double v = x[base + i];
        ss += v * v;
    }
    ss = block_sum_d(ss, scratch);
    // same rounding steps as the reference: mean in f64, then f32
    const float mean = (float)(ss / (double)group);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x) out[base + i] = x[base + i] * scale * w[i];
}

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    layer_norm_f32(const float* __restrict__ x, const float* __restrict__ w,
                   const float* __restrict__ b, float* __restrict__ out, int cols, float eps) {
    __shared__ double scratch[32];
    const u64 base = (u64)blockIdx.x * cols;
    double s = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += (double)x[base + i];
    const double mean = block_sum_d(s, scratch) / (double)cols;
    double var = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const double d = (double)x[base + i] - mean;
        var += d * d;
    }
    var = block_sum_d(var, scratch) / (double)cols;
    const float inv = 1.0f / sqrtf((float)var + eps);
    const float m = (float)mean;
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        out[base + i] = (x[base + i] - m) * inv * w[i] + b[i];
}
