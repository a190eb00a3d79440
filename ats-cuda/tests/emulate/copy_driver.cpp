// Host driver for copy.cu's copy_routed_experts under the emulator (appended
// after the kernel source by tests/kernel_emulation.rs). Reads one case from
// argv[1]: a header, the stacked experts (the source), the routing rows and
// the destination's prior bytes; runs the kernel with the backend's launch
// geometry and writes the destination to argv[2].

#include <cstdio>
#include <new>

struct Header {
    unsigned long long per_expert;
    int n_expert, rows, top_k, offset;  // offset: the source and destination start this many bytes into their buffers
    int grid, threads;
};

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    const size_t n = (size_t)h.per_expert * h.n_expert;
    // exactly the bytes the kernel may touch past `offset`, so AddressSanitizer
    // catches a copy outside them
    auto aligned = [](size_t bytes) {
        return std::unique_ptr<u8, void (*)(u8*)>(
            (u8*)::operator new(bytes, std::align_val_t(16)),
            [](u8* p) { ::operator delete(p, std::align_val_t(16)); });
    };
    auto src = aligned(h.offset + n), dst = aligned(h.offset + n);
    if (fread(src.get() + h.offset, 1, n, f) != n) return 4;
    std::vector<float> routing = emu::read<float>(f, (size_t)h.rows * 2 * h.top_k);
    if (fread(dst.get() + h.offset, 1, n, f) != n) return 4;
    fclose(f);
    emu::launch({(unsigned)h.grid, (unsigned)h.n_expert, 1}, {(unsigned)h.threads, 1, 1}, [&] {
        copy_routed_experts(src.get() + h.offset, dst.get() + h.offset, h.per_expert,
                            routing.data(), h.rows, h.top_k);
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(dst.get() + h.offset, 1, n, o) != n) return 5;
    fclose(o);
    return 0;
}
