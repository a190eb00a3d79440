// Host driver for matvec.cu under the emulator (appended after the kernel
// source by tests/kernel_emulation.rs). Reads one case from argv[1]: a
// header, the weight rows, the activations and the biases; runs the kernel
// the header names with the backend's launch geometry and writes y to argv[2].

#include <cstdio>
#include <new>

struct Header {
    int wide;   // 0: matvec_* (chunked), 1: matvec_wide_*, 2: matvec_wide_moe_*
    int dtype;  // GGML type id: 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K, 20 IQ4_NL,
                // 23 IQ4_XS, 39 MXFP4
    int rows, cols, n_tok, row_bytes, has_bias;
    int grid, threads;
    // routed experts (wide 2): n_tok is the x rows; the weights hold n_expert
    // matrices; a routing row of 2 top_k floats per token follows the biases
    int n_expert, top_k, x_div, slots;
};

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    const int mats = h.wide == 2 ? h.n_expert : 1;
    const int y_rows = h.wide == 2 ? h.slots : h.n_tok;
    const size_t wn = (size_t)mats * h.rows * h.row_bytes, xn = (size_t)h.n_tok * h.cols;
    // exactly the weights' bytes, 16-byte aligned like a device allocation:
    // under AddressSanitizer a read past the last block is an error
    std::unique_ptr<u8, void (*)(u8*)> wbuf(
        (u8*)::operator new(wn, std::align_val_t(16)),
        [](u8* p) { ::operator delete(p, std::align_val_t(16)); });
    std::vector<float> x(xn), bias(h.rows), y((size_t)y_rows * h.rows, NAN);
    if (fread(wbuf.get(), 1, wn, f) != wn || fread(x.data(), 4, xn, f) != xn) return 4;
    if (h.has_bias && fread(bias.data(), 4, h.rows, f) != (size_t)h.rows) return 4;
    std::vector<float> routing;
    if (h.wide == 2) routing = emu::read<float>(f, (size_t)h.slots / h.top_k * 2 * h.top_k);
    fclose(f);
    const u8* w = wbuf.get();
    const float* b = h.has_bias ? bias.data() : nullptr;
    const u64 rb = h.row_bytes;
    const u64 eb = (u64)h.rows * rb;
    const unsigned grid_y = h.wide == 2 ? h.slots : 1;
    emu::launch({(unsigned)h.grid, grid_y, 1}, {(unsigned)h.threads, 1, 1}, [&] {
#define MOE(NAME) NAME(w, rb, eb, h.rows, h.cols, x.data(), h.x_div, y.data(), routing.data(), h.top_k, h.n_expert)
#define MV(NAME) NAME(w, rb, h.rows, h.cols, x.data(), h.n_tok, y.data(), b)
#define BY_TYPE(M, PREFIX)                              \
    switch (h.dtype) {                                  \
        case DT_Q4_K: M(PREFIX##q4_k); break;           \
        case DT_Q5_K: M(PREFIX##q5_k); break;           \
        case DT_Q6_K: M(PREFIX##q6_k); break;           \
        case DT_Q8_0: M(PREFIX##q8_0); break;           \
        case DT_IQ4_NL: M(PREFIX##iq4_nl); break;       \
        case DT_IQ4_XS: M(PREFIX##iq4_xs); break;       \
        case DT_MXFP4: M(PREFIX##mxfp4); break;         \
        default: std::abort();                          \
    }
        if (h.wide == 2) BY_TYPE(MOE, matvec_wide_moe_)
        else if (h.wide && h.n_tok == 1) BY_TYPE(MV, matvec_wide1_)
        else if (h.wide) BY_TYPE(MV, matvec_wide_)
        else BY_TYPE(MV, matvec_)
#undef BY_TYPE
#undef MOE
#undef MV
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(y.data(), 4, y.size(), o) != y.size()) return 5;
    fclose(o);
    return 0;
}
