// Host driver for copy.cu's kv_append_rows_f32 under the emulator (appended
// after the kernel source by tests/kernel_emulation.rs). Reads one case from
// argv[1]: a header, the new rows, the block table and the cache's prior
// contents; appends the rows after `past` tokens through the table with the
// backend's launch geometry and writes the cache to argv[2].

#include <cstdio>

struct Header {
    unsigned long long past, width, n, cache_rows;
    int n_blocks, block_shift, grid, threads;
};

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    std::vector<float> x = emu::read<float>(f, h.n);
    std::vector<unsigned> table = emu::read<unsigned>(f, h.n_blocks);
    std::vector<float> cache = emu::read<float>(f, h.cache_rows * h.width);
    fclose(f);
    emu::launch({(unsigned)h.grid, 1, 1}, {(unsigned)h.threads, 1, 1}, [&] {
        kv_append_rows_f32(x.data(), cache.data(), h.n_blocks ? table.data() : nullptr,
                           h.block_shift, h.past, h.width, h.n);
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(cache.data(), 4, cache.size(), o) != cache.size()) return 5;
    fclose(o);
    return 0;
}
