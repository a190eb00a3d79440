// Host driver for moe.cu's moe_topk under the emulator (appended after the
// kernel source by tests/kernel_emulation.rs). Reads one case from argv[1]:
// a header, the router logits and the selection bias; routes every token
// with the backend's launch geometry (`warps` warps a block, one a token)
// and writes the ids and weights to argv[2].

#include <cstdio>

struct Header {
    int n_tok, n_expert, top_k, norm, gating, warps;
    float scale;
};

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 3;
    Header h;
    if (fread(&h, sizeof h, 1, f) != 1) return 4;
    std::vector<float> logits = emu::read<float>(f, (size_t)h.n_tok * h.n_expert);
    std::vector<float> bias = emu::read<float>(f, h.n_expert);
    fclose(f);
    std::vector<float> out((size_t)h.n_tok * 2 * h.top_k, -7.0f);
    const unsigned grid = (h.n_tok + h.warps - 1) / h.warps;
    emu::launch({grid, 1, 1}, {(unsigned)(h.warps * 32), 1, 1}, [&] {
        moe_topk(logits.data(), out.data(), h.gating ? bias.data() : nullptr, h.n_tok,
                 h.n_expert, h.top_k, h.norm, h.gating, h.scale);
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(out.data(), 4, out.size(), o) != out.size()) return 5;
    fclose(o);
    return 0;
}
