#!/usr/bin/env bash
# Prepares everything scripts/gpu-check.sh needs on a GPU machine that has
# no Rust toolchain, no NVRTC and no ../shared: release binaries (gzipped),
# the kernel cache compiled here with NVRTC from PyPI, and the text fixtures
# the GPU tests read. Writes DIR (default .gpu, which .gitignore names, so
# the device tool's call must carry it: `carry: [".gpu"]`, or, once
# scripts/gpu-prebuild-llama.sh has added .gpu/llama, which would take the
# whole over the 64 MiB a call carries, `[".gpu/bin", ".gpu/cache",
# ".gpu/shared"]`; that script's header has the comparison's call); on the
# GPU machine:
#   mkdir -p /work/main/tests && ln -sfn "$PWD/.gpu/shared" /work/shared
#   gunzip -f .gpu/bin/*.gz && chmod +x .gpu/bin/*
#   XDG_CACHE_HOME=$PWD/.gpu/cache ATS_PREBUILT=$PWD/.gpu/bin bash scripts/gpu-check.sh
# (the test binaries find fixtures at <workspace>/../shared as built here).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.gpu}"
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/cache/ats/kernels" "$DIR/shared/fixtures"

exe() { # cargo args... -> path of the one test executable they build
    cargo test --release --no-run --message-format=json "$@" 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except Exception: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["profile"]["test"]: print(m["executable"])' | tail -1
}
cargo build --release -p ats-cli
cp "${CARGO_TARGET_DIR:-target}/release/ats-cli" "$DIR/bin/ats-cli"
cp "$(exe -p ats-cuda --lib)" "$DIR/bin/test-ats-cuda"
cp "$(exe -p ats-tests --test gpu)" "$DIR/bin/test-gpu"
NVRTC_TEST="$(exe -p ats-cuda --test nvrtc_compile)"

# kernels for every supported architecture, compiled here
NVRTC_DIR="$(bash scripts/install-nvrtc.sh)"
LD_LIBRARY_PATH="$NVRTC_DIR:${LD_LIBRARY_PATH:-}" ATS_REQUIRE_NVRTC=1 \
    ATS_KERNEL_CACHE_OUT="$DIR/cache/ats/kernels" "$NVRTC_TEST" --nocapture

# the device tool carries 64 MiB: keep the target's cubins only (GPU_ARCH,
# default sm_90 for the lent H200; GPU_ARCH=all keeps every architecture)
ARCH="${GPU_ARCH:-sm_90}"
if [ "$ARCH" != all ]; then
    find "$DIR/cache/ats/kernels" -name '*.cubin' ! -name "*-$ARCH.cubin" -delete
fi

for d in llama qwen2 qwen3 qwen3_moe llama_quant; do
    mkdir -p "$DIR/shared/fixtures/$d"
    cp ../shared/fixtures/$d/*.gguf ../shared/fixtures/$d/reference.safetensors "$DIR/shared/fixtures/$d/"
done
# vision: the towers and their references only (the device tool carries 64 MiB)
for d in qwen2_vl qwen2_5_vl; do
    mkdir -p "$DIR/shared/fixtures/$d"
    cp ../shared/fixtures/$d/mmproj-*.gguf ../shared/fixtures/$d/reference.safetensors "$DIR/shared/fixtures/$d/"
done
mkdir -p "$DIR/shared/fixtures/vl_images"
cp ../shared/fixtures/vl_images/*.png "$DIR/shared/fixtures/vl_images/"
strip "$DIR"/bin/*
gzip -9 "$DIR"/bin/*
du -sh "$DIR"/*
