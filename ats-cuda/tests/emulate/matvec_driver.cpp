// Host driver for matvec.cu under the emulator (appended after the kernel
// source by tests/kernel_emulation.rs). Reads one case from argv[1]: a
// header, the weight rows, the activations and the biases; runs the kernel
// the header names with the backend's launch geometry and writes y to argv[2].

#include <cstdio>

struct Header {
    int wide;   // 0: matvec_* (chunked), 1: matvec_wide_*
    int dtype;  // GGML type id: 12 Q4_K, 14 Q6_K
    int rows, cols, n_tok, row_bytes, has_bias;
    int grid, threads;
};

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    const size_t wn = (size_t)h.rows * h.row_bytes, xn = (size_t)h.n_tok * h.cols;
    // 16-byte aligned like device allocations
    std::vector<uint4> wbuf(wn / 16 + 2);
    std::vector<float> x(xn), bias(h.rows), y((size_t)h.n_tok * h.rows, NAN);
    if (fread(wbuf.data(), 1, wn, f) != wn || fread(x.data(), 4, xn, f) != xn) return 4;
    if (h.has_bias && fread(bias.data(), 4, h.rows, f) != (size_t)h.rows) return 4;
    fclose(f);
    const u8* w = (const u8*)wbuf.data();
    const float* b = h.has_bias ? bias.data() : nullptr;
    const u64 rb = h.row_bytes;
    emu::launch({(unsigned)h.grid, 1, 1}, {(unsigned)h.threads, 1, 1}, [&] {
#define MV(NAME) NAME(w, rb, h.rows, h.cols, x.data(), h.n_tok, y.data(), b)
        if (h.wide && h.dtype == DT_Q4_K) MV(matvec_wide_q4_k);
        else if (h.wide && h.dtype == DT_Q6_K) MV(matvec_wide_q6_k);
        else if (h.dtype == DT_Q4_K) MV(matvec_q4_k);
        else if (h.dtype == DT_Q6_K) MV(matvec_q6_k);
        else std::abort();
#undef MV
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(y.data(), 4, y.size(), o) != y.size()) return 5;
    fclose(o);
    return 0;
}
