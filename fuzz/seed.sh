#!/bin/sh
# Seeds libFuzzer's corpora (fuzz/corpus/<target>) and writes its
# dictionaries (fuzz/dict/<target>.dict), both gitignored, from the fixtures,
# reproducibly:
#  - each target's seeds, exactly those of the stable smoke run
#    (ats_tests::fuzz::targets::*::seeds: the fixture GGUFs' metadata,
#    a complete 1-layer model, the fixture PNGs re-encoded as JPEG, WebP,
#    GIF and BMP, the tokenizer cases, hostile templates, schemas, server
#    request bodies with images as data URLs, tools and schemas ...),
#    written by the example `fuzz_seeds` of ats-tests;
#  - the raw fixture files small enough to mutate: the quantised llama
#    fixtures (whole models under 1 MiB run a forward pass), dequant.gguf,
#    the PNGs and the chat template.
# Usage: fuzz/seed.sh   (from anywhere; needs ../shared/fixtures)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
fixtures=${ATS_FIXTURES:-$root/../shared/fixtures}
corpus=$root/fuzz/corpus
mkdir -p "$corpus"
cd "$root"
nice -n 15 cargo run -q -p ats-tests --example fuzz_seeds -- "$corpus"
for f in "$fixtures"/llama_quant/llama-Q4_0.gguf "$fixtures"/llama_quant/llama-Q4_K_M.gguf \
    "$fixtures"/dequant/dequant.gguf; do
    cp "$f" "$corpus/gguf/fixture-$(basename "$f")"
done
for f in "$fixtures"/vl_images/*.png; do
    cp "$f" "$corpus/image_preprocess/fixture-$(basename "$f")"
done
cp "$fixtures/tokenizer/chat_template.jinja" "$corpus/chat_template/fixture-chat_template.jinja"
for d in "$corpus"/*/; do
    echo "$(basename "$d"): $(ls "$d" | wc -l) files, $(du -sk "$d" | cut -f1) KiB"
done
