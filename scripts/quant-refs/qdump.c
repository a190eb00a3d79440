// Quantise a raw f32 file (rows x cols) with ggml_quantize_chunk to a type id; write raw bytes.
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
int main(int argc, char** argv) {
    if (argc != 6) { fprintf(stderr, "usage: in.f32 rows cols type out.bin\n"); return 2; }
    long rows = atol(argv[2]), cols = atol(argv[3]); int type = atoi(argv[4]);
    float* x = malloc(rows * cols * 4);
    FILE* f = fopen(argv[1], "rb"); if (fread(x, 4, rows * cols, f) != (size_t)(rows * cols)) return 3; fclose(f);
    size_t rb = ggml_row_size(type, cols);
    void* q = malloc(rb * rows);
    size_t n = ggml_quantize_chunk(type, x, q, 0, rows, cols, NULL);
    FILE* o = fopen(argv[5], "wb"); fwrite(q, 1, n, o); fclose(o);
    return 0;
}
