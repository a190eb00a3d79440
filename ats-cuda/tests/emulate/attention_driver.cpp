// Host driver for attention.cu under the emulator (appended after the kernel
// source by tests/kernel_emulation.rs). Reads one case from argv[1]: a
// header, the queries, keys and values; runs the kernel the header names
// with the launch the header gives (computed by ats-cuda's geometry, as the
// backend would launch it) and writes the output rows to argv[2]. A sliding
// window and per-head sink logits (after the block table) are optional.

#include <cstdio>

struct Header {
    int kernel;  // 0: attn_f*kv (general), 1: attn_decode_*
    int n_q, n_keys, n_heads, n_kv, d, mask, offset, f16;
    int splits, split_keys;
    int q_tiles, r, bk, shared_bytes;  // general kernel only
    float scale;
    // paged keys: n_blocks blocks of 1 << block_shift rows (0: keys in row order); the
    // block table follows the values
    int n_blocks, block_shift;
    // sliding window (0: none); whether n_heads sink logits follow the table
    int window, has_sinks;
};

template <class KV>
static void run(const Header& h, const float* q, const KV* k, const KV* v, float* out, float* po,
                float* pml, const unsigned* blocks, const float* sinks) {
    if (h.kernel == 1) {
        emu::launch({(unsigned)h.n_kv, (unsigned)h.splits, 1}, {128, 1, 1}, [&] {
#define DEC(NAME) NAME(q, k, v, out, po, pml, h.n_q, h.n_keys, h.n_heads, h.n_kv, h.scale, h.mask, h.offset, h.split_keys, blocks, h.block_shift, h.window, sinks)
            if constexpr (sizeof(KV) == 2) {
                if (h.d == 64) DEC(attn_decode_f16kv_d64);
                else if (h.d == 128) DEC(attn_decode_f16kv_d128);
                else DEC(attn_decode_f16kv_d256);
            } else {
                if (h.d == 64) DEC(attn_decode_f32kv_d64);
                else if (h.d == 128) DEC(attn_decode_f32kv_d128);
                else DEC(attn_decode_f32kv_d256);
            }
#undef DEC
        });
    } else {
        emu::launch({(unsigned)h.q_tiles, (unsigned)h.n_kv, (unsigned)h.splits}, {128, 1, 1}, [&] {
#define GEN(NAME) NAME(q, k, v, out, po, pml, h.n_q, h.n_keys, h.n_heads, h.n_kv, h.d, h.scale, h.mask, h.offset, nullptr, 0, h.r, h.bk, h.split_keys, blocks, h.block_shift, h.window, sinks)
            if constexpr (sizeof(KV) == 2) GEN(attn_f16kv);
            else GEN(attn_f32kv);
#undef GEN
        });
    }
    if (h.splits > 1)
        emu::launch({(unsigned)(h.n_q * h.n_heads), 1, 1}, {(unsigned)std::min(h.d, 256), 1, 1},
                    [&] { attn_combine(po, pml, out, h.n_q, h.n_heads, h.d, h.splits, sinks); });
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    const size_t qn = (size_t)h.n_q * h.n_heads * h.d;
    const size_t rows = h.n_blocks ? (size_t)h.n_blocks << h.block_shift : (size_t)h.n_keys;
    const size_t kvn = rows * h.n_kv * h.d;
    const size_t slots = (size_t)h.splits * h.n_q * h.n_heads;
    std::vector<float> q = emu::read<float>(f, qn);
    std::vector<float> out(qn, NAN), part_o(slots * h.d, NAN), part_ml(slots * 2, NAN);
    float* po = h.splits > 1 ? part_o.data() : nullptr;
    float* pml = h.splits > 1 ? part_ml.data() : nullptr;
    if (h.f16) {
        std::vector<unsigned short> k = emu::read<unsigned short>(f, kvn), v = emu::read<unsigned short>(f, kvn);
        std::vector<unsigned> table = emu::read<unsigned>(f, h.n_blocks);
        std::vector<float> sinks = emu::read<float>(f, h.has_sinks ? h.n_heads : 0);
        run(h, q.data(), k.data(), v.data(), out.data(), po, pml, h.n_blocks ? table.data() : nullptr,
            h.has_sinks ? sinks.data() : nullptr);
    } else {
        std::vector<float> k = emu::read<float>(f, kvn), v = emu::read<float>(f, kvn);
        std::vector<unsigned> table = emu::read<unsigned>(f, h.n_blocks);
        std::vector<float> sinks = emu::read<float>(f, h.has_sinks ? h.n_heads : 0);
        run(h, q.data(), k.data(), v.data(), out.data(), po, pml, h.n_blocks ? table.data() : nullptr,
            h.has_sinks ? sinks.data() : nullptr);
    }
    fclose(f);
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(out.data(), sizeof(float), qn, o) != qn) return 5;
    fclose(o);
    return 0;
}
