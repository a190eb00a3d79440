#!/usr/bin/env bash
# Builds llama.cpp's CUDA binaries for the lent GPU (an H200, sm_90) on a
# machine without a GPU, and packs them for the device call next to what
# scripts/gpu-prebuild.sh puts in .gpu; scripts/gpu-check.sh unpacks and
# runs them alongside ATS (issue 17). Nothing of llama.cpp enters the
# repository: the sources, NVIDIA's compiler and the build stay outside it,
# and only the stripped, compressed binaries go into DIR (default
# .gpu/llama, ignored like the rest of .gpu).
#
#   bash scripts/gpu-prebuild.sh          # ATS: .gpu (run first: it empties .gpu)
#   bash scripts/gpu-prebuild-llama.sh    # llama.cpp: .gpu/llama/llama-cuda.tar.xz
#
# What it does:
#   1. NVIDIA's CUDA 13.0 compiler, runtime, cuBLAS and CCCL from PyPI
#      (nvidia-cuda-nvcc, -runtime, -crt, nvidia-nvvm, nvidia-cublas,
#      nvidia-cuda-cccl; 13.0 because the lent machine's driver is 580,
#      CUDA 13.0) into a venv outside the repository (CUDA_VENV). The wheels
#      have no libcuda.so to link against, so a stub with the driver API's
#      names (generated from cuda.h, soname libcuda.so.1) is linked instead;
#      on the GPU machine the driver's own libcuda.so.1 is loaded.
#   2. llama.cpp (LLAMA_SRC: the same sources as the CPU comparisons,
#      llama_cpp_python 0.3.36's vendor/llama.cpp, commit 0c1e570) configured
#      in LLAMA_BUILD with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real
#      (sm_90 machine code only, no PTX: the H200 needs nothing else),
#      -DGGML_NATIVE=OFF, Release, shared libraries with the backends loaded
#      at run time (GGML_BACKEND_DL) and every x86 CPU variant
#      (GGML_CPU_ALL_VARIANTS), as llama.cpp's own releases do: the GPU
#      machine's CPU is unknown here and llama.cpp picks the best variant
#      for it at start-up, so its CPU share of a partial offload is not
#      handicapped by a build for a lesser CPU. Shared rather than static:
#      the CUDA backend (the bulk) is then carried once, not once per tool.
#      CUDA graphs on (llama.cpp's default), no OpenSSL/curl, no server.
#   3. Only the targets llama-bench, llama-batched-bench, llama-mtmd-cli and
#      llama-completion (llama-cli needs the server library: not built),
#      ggml-cuda and the CPU variants, with `nice` and JOBS (default 2) jobs.
#      On the 2-core development machine this takes well over an hour.
#   4. Copies the binaries and every shared library they load (by soname)
#      into one folder with RUNPATH $ORIGIN, adds libcudart.so.13 (0.7 MB,
#      from the wheel), GCC's libgomp and, as a fallback in gcc/, its
#      libstdc++ and libgcc_s (the GPU machine may lack or have older ones),
#      strips everything and packs it as DIR/llama-cuda.tar.xz. cuBLAS is NOT
#      carried (libcublasLt.so.13 alone is 515 MB): the binaries need
#      libcublas.so.13 / libcublasLt.so.13, which the GPU machine has (CUDA
#      13 libraries; gpu-check.sh finds them and puts them on the loader
#      path), and libcuda.so.1 from its driver.
#
# Size: the archive (reported at the end) and what gpu-prebuild.sh puts in
# .gpu (about 50 MiB of fixtures alone) do not fit one call's 64 MiB
# together. So the comparison is its own call, carrying only what it needs,
# with GPU_CHECK_COMPARE=1 (no tests; timeout_s 600):
#   carry: [".gpu/bin/ats-cli.gz", ".gpu/cache", ".gpu/llama"]
#   gunzip -f .gpu/bin/ats-cli.gz && chmod +x .gpu/bin/ats-cli && GPU_CHECK_COMPARE=1 XDG_CACHE_HOME=$PWD/.gpu/cache ATS_PREBUILT=$PWD/.gpu/bin bash scripts/gpu-check.sh
# and the tests' call carries [".gpu/bin", ".gpu/cache", ".gpu/shared"].
#
# By hand on the GPU machine (gpu-check.sh does this when .gpu/llama exists):
#   python3 -c 'import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
#       .gpu/llama/llama-cuda.tar.xz /tmp/llama-cuda
#   LD_LIBRARY_PATH=<dir of libcublas.so.13> /tmp/llama-cuda/llama-bench ...
set -euo pipefail

# the whole script is one function, so bash has read all of it before it
# runs (an edit during the hour-long build cannot derail it)
main() {
    cd "$(dirname "$0")/.."
    ROOT="$PWD"
    DIR="${1:-.gpu/llama}"
    case "$DIR" in /*) ;; *) DIR="$ROOT/$DIR" ;; esac
    LLAMA_SRC="${LLAMA_SRC:-/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp}"
    LLAMA_BUILD="${LLAMA_BUILD:-/work/llama/build-cuda}"
    CUDA_VENV="${CUDA_VENV:-/work/llama/cuda13-venv}"
    JOBS="${JOBS:-2}"
    TARGETS=(llama-bench llama-batched-bench llama-mtmd-cli llama-completion)

    for p in "$LLAMA_BUILD" "$CUDA_VENV"; do
        case "$(realpath -m "$p")/" in
            "$ROOT"/*) echo "refusing to build inside the repository: $p" >&2; exit 2 ;;
        esac
    done
    [ -f "$LLAMA_SRC/CMakeLists.txt" ] || { echo "no llama.cpp sources at $LLAMA_SRC" >&2; exit 2; }

    # 1. the CUDA 13.0 toolkit from PyPI (pinned together: pip would otherwise
    # pull the newest nvvm/crt under an older nvcc)
    if [ ! -x "$CUDA_VENV/bin/python" ]; then
        python3 -m venv "$CUDA_VENV"
    fi
    if ! "$CUDA_VENV/bin/python" -c 'import importlib.metadata as m; m.version("nvidia-cuda-nvcc"), m.version("nvidia-cublas")' 2>/dev/null; then
        nice "$CUDA_VENV/bin/pip" install --quiet \
            "nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88" \
            "nvidia-cuda-runtime==13.0.96" "nvidia-cublas==13.0.2.14" "nvidia-cuda-cccl==13.0.85"
    fi
    CU="$("$CUDA_VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
    [ -x "$CU/bin/nvcc" ] || { echo "no nvcc in $CU" >&2; exit 1; }
    # nvcc's profile links from lib64; the unversioned names CMake's
    # FindCUDAToolkit links by
    [ -e "$CU/lib64" ] || ln -sfn lib "$CU/lib64"
    for lib in libcudart libcublas libcublasLt; do
        ln -sfn "$lib.so.13" "$CU/lib/$lib.so"
    done
    # the driver API stub: every cu* function cuda.h declares (after its
    # _v2/_v3 renames), each a function that fails; soname libcuda.so.1
    mkdir -p "$CU/lib/stubs"
    if [ ! -s "$CU/lib/stubs/libcuda.so" ]; then
        echo '#include <cuda.h>' | gcc -E -P -I"$CU/include" - |
            grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | sed 's/[[:space:]]*($//' | sort -u |
            awk '{print "int " $1 "(void) { return 999; }"}' >"$CU/lib/stubs/cuda-stub.c"
        gcc -shared -fPIC -w -Wl,-soname,libcuda.so.1 -o "$CU/lib/stubs/libcuda.so" "$CU/lib/stubs/cuda-stub.c"
    fi
    export PATH="$CU/bin:$PATH"

    # 2. configure
    if ! command -v cmake >/dev/null; then python3 -m pip install --quiet cmake; fi
    GEN=()
    command -v ninja >/dev/null && GEN=(-G Ninja)
    if [ ! -f "$LLAMA_BUILD/CMakeCache.txt" ]; then
        nice cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" "${GEN[@]}" \
            -DCMAKE_BUILD_TYPE=Release \
            -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
            -DCMAKE_CUDA_COMPILER="$CU/bin/nvcc" -DCUDAToolkit_ROOT="$CU" \
            -DCUDA_cuda_driver_LIBRARY="$CU/lib/stubs/libcuda.so" \
            -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
            -DBUILD_SHARED_LIBS=ON -DGGML_CUDA_GRAPHS=ON -DGGML_CUDA_NCCL=OFF -DGGML_CCACHE=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
            -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN'
    fi

    # 3. build: the CUDA backend first (the long part), then the tools and the
    # CPU variants
    CPU_VARIANTS=($(cmake --build "$LLAMA_BUILD" --target help | grep -oE '\bggml-cpu-[a-z0-9_.]+' | sort -u))
    nice cmake --build "$LLAMA_BUILD" -j "$JOBS" --target ggml-cuda
    nice cmake --build "$LLAMA_BUILD" -j "$JOBS" --target "${TARGETS[@]}" "${CPU_VARIANTS[@]}"

    # 4. pack: binaries + the libraries they load, by soname, RUNPATH $ORIGIN
    STAGE="$LLAMA_BUILD/pack/llama-cuda"
    rm -rf "$LLAMA_BUILD/pack"
    mkdir -p "$STAGE"
    BIN="$LLAMA_BUILD/bin"
    for t in "${TARGETS[@]}"; do cp "$BIN/$t" "$STAGE/"; done
    for f in "$BIN"/lib*.so*; do
        [ -L "$f" ] && continue
        so="$(readelf -d "$f" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
        cp "$f" "$STAGE/${so:-$(basename "$f")}"
    done
    # tool libraries no packed tool needs (llama-perplexity-impl etc.)
    for f in "$STAGE"/lib*-impl.so; do
        base="$(basename "$f" .so)"; base="${base#lib}"; base="${base%-impl}"
        printf '%s\n' "${TARGETS[@]}" | grep -qx "$base" || rm -f "$f"
    done
    cp -L "$CU/lib/libcudart.so.13" "$STAGE/"
    # tokenizers for the synthetic models (ats-cli synth --vocab-from): llama.cpp's
    # vocabulary-only test files, Llama 3's (128,256 tokens, as the llama-8b
    # preset) and Qwen2's (151,936, as qwen3-30b-a3b; Qwen3 uses it too)
    mkdir -p "$STAGE/vocab"
    cp "$LLAMA_SRC/models/ggml-vocab-llama-bpe.gguf" "$STAGE/vocab/llama-bpe.gguf"
    cp "$LLAMA_SRC/models/ggml-vocab-qwen2.gguf" "$STAGE/vocab/qwen2.gguf"
    # GCC's OpenMP runtime (the GPU machine may have none); its libstdc++
    # and libgcc_s only in gcc/, a fallback gpu-check.sh puts on the loader
    # path when the machine's own are older than GCC 12's (GLIBCXX_3.4.30):
    # Debian 12's need glibc 2.36 where the binaries themselves need 2.34
    cp -L "$(gcc -print-file-name=libgomp.so.1)" "$STAGE/"
    mkdir -p "$STAGE/gcc"
    for lib in libstdc++.so.6 libgcc_s.so.1; do
        cp -L "$(gcc -print-file-name=$lib)" "$STAGE/gcc/"
    done
    strip --strip-unneeded "$STAGE"/llama-* "$STAGE"/lib*
    echo "$(cd "$LLAMA_SRC" && git rev-parse --short HEAD 2>/dev/null || echo 0c1e570) CUDA $("$CU/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') sm_90" >"$STAGE/BUILD-INFO"

    # what they need from the GPU machine: libcuda.so.1 and cuBLAS 13
    echo "== shared libraries the packed files need (not found here = from the GPU machine):"
    for f in "$STAGE"/llama-bench "$STAGE"/libggml-cuda.so; do
        echo "-- $(basename "$f")"
        LD_LIBRARY_PATH="$STAGE" ldd "$f" | grep -E 'not found|cuda|cublas|gomp|ggml|llama|stdc' || true
    done
    echo "== newest glibc / libstdc++ symbol versions they need: $(objdump -T "$STAGE"/llama-* "$STAGE"/lib* 2>/dev/null |
        grep -oE 'GLIBC_[0-9.]+' | sort -uV | tail -1) / $(objdump -T "$STAGE"/llama-* "$STAGE"/lib* 2>/dev/null |
        grep -oE 'GLIBCXX_[0-9.]+' | sort -uV | tail -1)"
    # start them here: the stub stands in for the driver, so the CUDA
    # backend loads and then finds no GPU
    mkdir -p "$LLAMA_BUILD/stub-run"
    ln -sfn "$CU/lib/stubs/libcuda.so" "$LLAMA_BUILD/stub-run/libcuda.so.1"
    echo "== llama-bench --list-devices and --help with the driver stub (no GPU here)"
    (LD_LIBRARY_PATH="$CU/lib:$LLAMA_BUILD/stub-run" timeout 60 "$STAGE/llama-bench" --list-devices 2>&1 | head -8) || true
    (LD_LIBRARY_PATH="$CU/lib:$LLAMA_BUILD/stub-run" timeout 60 "$STAGE/llama-bench" --help 2>&1 | head -3) || true

    mkdir -p "$DIR"
    rm -f "$DIR/llama-cuda.tar.xz"
    XZ_OPT=-9e nice tar -C "$LLAMA_BUILD/pack" -cJf "$DIR/llama-cuda.tar.xz" llama-cuda
    du -sh "$STAGE" "$DIR/llama-cuda.tar.xz"
    if [ -d "$ROOT/.gpu" ]; then
        echo "== .gpu in all (the device call carries at most 64 MiB):"
        du -sh "$ROOT/.gpu"
    fi
}

main "$@"; exit $?
