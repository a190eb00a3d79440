#!/usr/bin/env bash
# The GPU check: on a machine with one NVIDIA GPU, in under 8 minutes,
#   1. what the machine has (driver, GPU, CUDA libraries),
#   2. a release build,
#   3. the GPU tests (ats-cuda's own, and tests/tests/gpu.rs: fixtures on the
#      GPU and on mixed placements, quantised fixtures, ledger vs driver,
#      the vision towers against Hugging Face, a 1440p image at 1 GB),
#   4. benchmarks of synthetic Llama-3-8B and Qwen3-30B-A3B models at 2, 4
#      and 8 GiB budgets, prompt 2048 and 128 generated tokens, --policy
#      layers against --policy ats (GPU_CHECK_DEPTH=N runs each test with N
#      tokens already in the context),
#   5. when llama.cpp's CUDA build is here (.gpu/llama/llama-cuda.tar.xz from
#      scripts/gpu-prebuild-llama.sh, or LLAMA_CUDA_DIR=an unpacked one):
#      llama.cpp's llama-bench alternating with `ats-cli bench --policy ats`
#      on the same synthetic files (made here with llama.cpp's Llama 3 and
#      Qwen2 tokenizers, `synth --vocab-from`, so llama.cpp loads them):
#      prompt 2048, 128 generated, at 2G, 4G, 8G and unlimited, both engines
#      on all cores, and at 2G with 4 threads (the consumer regime: a host
#      that reads slower than PCIe). GPU_CHECK_COMPARE=1 runs only this
#      (no tests, no layers/ats/static runs) so it fits one call; the
#      runs are listed in GPU_CHECK_COMPARE_RUNS (see below), most wanted
#      first, so a short lease still gets the headline,
# and writes a markdown results table to $OUT/gpu-check.md (also printed).
# Every step is timed and has a time limit; a failing step is reported and
# the next one still runs. The full log is $OUT/gpu-check.log; the quick
# profile the planner used is kept as $OUT/profile-*.json.
#
# A machine without NVRTC can use kernels compiled elsewhere: run the NVRTC
# test with ATS_KERNEL_CACHE_OUT=target/kernel-cache/ats/kernels there and
# bring that folder along; it is used when present.
#
# A machine without Rust can run binaries built elsewhere: ATS_PREBUILT=DIR
# holding ats-cli, test-ats-cuda (ats-cuda's unit tests) and test-gpu
# (tests/tests/gpu.rs), all from `cargo test --release --no-run` and
# `cargo build --release` (scripts/gpu-prebuild.sh makes that folder).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
OUT="${OUT:-$ROOT/target/gpu-check}"
WORK="${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/ats-gpu-check}"
BUDGET_SECS="${GPU_CHECK_SECONDS:-470}"
COMPARE="${GPU_CHECK_COMPARE:-0}"
mkdir -p "$OUT" "$WORK"
REPORT="$OUT/gpu-check.md"
LOG="$OUT/gpu-check.log"
: >"$LOG"
DEADLINE=$((SECONDS + BUDGET_SECS))
STEPS=()
BENCH=()
BREAKDOWN=()

if [ -d "$ROOT/target/kernel-cache/ats/kernels" ]; then
    export XDG_CACHE_HOME="$ROOT/target/kernel-cache"
fi
export CARGO_TERM_COLOR=never

# step NAME LIMIT_SECS COMMAND...: runs COMMAND with output in the log,
# records status and seconds; returns the command's status.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    if ((left < 10)); then
        STEPS+=("| $name | skipped: out of time | 0 |")
        return 124
    fi
    ((limit > left)) && limit=$left
    echo "=== $name (limit ${limit}s): $*" >>"$LOG"
    local t0=$SECONDS rc
    timeout "$limit" "$@" >>"$LOG" 2>&1
    rc=$?
    local took=$((SECONDS - t0)) status
    case $rc in
        0) status="ok" ;;
        124) status="TIMED OUT after ${limit}s" ;;
        *) status="FAILED (exit $rc)" ;;
    esac
    STEPS+=("| $name | $status | $took |")
    echo "=== $name: $status in ${took}s" >>"$LOG"
    return $rc
}

# cudarc looks for unversioned or CUDA-12 names; a machine with only
# CUDA 13's cuBLAS/NVRTC gets links to them under the names it looks for
CULINKS="$WORK/culibs"
mkdir -p "$CULINKS"
for lib in libcublas libcublasLt libnvrtc libnvrtc-builtins; do
    found=$( (ldconfig -p 2>/dev/null | awk -v l="$lib.so." '$1 ~ "^"l {print $NF}'; \
        ls /usr/local/cuda/lib64/$lib.so.1[23]* /usr/local/cuda/targets/*/lib/$lib.so.1[23]* \
           /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib/$lib.so.1[23]* \
           /usr/local/lib/python3*/dist-packages/nvidia/*/lib/$lib.so.1[23]* 2>/dev/null) | head -1)
    if [ -n "$found" ]; then
        ln -sfn "$found" "$CULINKS/$lib.so"
        export LD_LIBRARY_PATH="$(dirname "$found"):${LD_LIBRARY_PATH:-}"
    fi
done
export LD_LIBRARY_PATH="$CULINKS:${LD_LIBRARY_PATH:-}"

# what the machine has
{
    echo "## machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1 || echo "nvidia-smi: not available"
    echo "CUDA libraries the loader knows:"
    (ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc\.so|libcublas\.so' || true)
    echo "CUDA_HOME=${CUDA_HOME:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} XDG_CACHE_HOME=${XDG_CACHE_HOME:-}"
} >>"$LOG" 2>&1

# llama.cpp's CUDA build, for the side-by-side runs (issue 17): unpacked
# from the archive scripts/gpu-prebuild-llama.sh makes, or LLAMA_CUDA_DIR
LLAMA_TAR="${LLAMA_CUDA_TAR:-$ROOT/.gpu/llama/llama-cuda.tar.xz}"
LLAMA_DIR="${LLAMA_CUDA_DIR:-}"
LLAMA_LD=""
HELPERS="$WORK/llama_helpers.py"
cat >"$HELPERS" <<'PY'
"""gpu-check.sh's helpers for the llama.cpp runs (python3 only, no packages)."""
import json, os, re, struct, sys

def gguf(path):
    """(metadata, arrays as their lengths; [(tensor, offset)]; data start; file size)"""
    f = open(path, "rb")
    rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
    def s():
        return f.read(rd("Q")).decode("utf-8", "replace")
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def val(t):
        if t == 8:
            return s()
        if t == 9:
            et, n = rd("I"), rd("Q")
            if et in size:
                f.seek(size[et] * n, 1)
            else:
                for _ in range(n):
                    val(et)
            return n
        return rd(fmt[t])
    assert f.read(4) == b"GGUF", "not a GGUF file"
    rd("I")
    nt, nkv = rd("Q"), rd("Q")
    meta = {}
    for _ in range(nkv):
        k = s()
        meta[k] = val(rd("I"))
    tensors = []
    for _ in range(nt):
        name = s()
        f.seek(8 * rd("I"), 1)
        rd("I")
        tensors.append((name, rd("Q")))
    align = meta.get("general.alignment", 32)
    return meta, tensors, (f.tell() + align - 1) // align * align, os.path.getsize(path)

def place(path, budget_mib, n_ctx, reserve_mib):
    """llama.cpp's placement for a budget, from the file's tensor sizes (each
    tensor's bytes = the distance to the next tensor's offset): the whole
    model if it fits; for an MoE every layer on the GPU and the experts of
    the fewest leading layers on the CPU (--n-cpu-moe); else the most
    trailing layers (-ngl, the output layer and the token embedding on the
    CPU), counting per layer its weights and its f16 KV cache for n_ctx
    tokens, and reserve_mib for llama.cpp's compute buffers. Prints the
    flags, a tab, and the MiB of weights + KV cache that puts on the GPU."""
    meta, tensors, start, fsize = gguf(path)
    offs = sorted(o for _, o in tensors) + [fsize - start]
    nxt = {o: offs[i + 1] for i, o in enumerate(offs[:-1])}
    a = meta["general.architecture"]
    L = meta[f"{a}.block_count"]
    nh = meta[f"{a}.attention.head_count"]
    kvh = meta.get(f"{a}.attention.head_count_kv", nh)
    hd = meta.get(f"{a}.attention.key_length", meta[f"{a}.embedding_length"] // nh)
    kv = n_ctx * kvh * hd * 2 * 2
    lay, exp, out = [0] * L, [0] * L, 0
    for n, o in tensors:
        b = nxt[o] - o
        m = re.match(r"blk\.(\d+)\.", n)
        if m:
            (exp if "_exps" in n else lay)[int(m.group(1))] += b
        elif not n.startswith("token_embd"):
            out += b
    avail = (budget_mib - reserve_mib) * 2**20
    res = lambda flags, gpu: f"{flags}\t{gpu / 2**20:.0f}"
    full = out + sum(lay) + sum(exp) + L * kv
    if full <= avail:
        return res("-ngl 99", full)
    if any(exp):
        base = out + sum(lay) + L * kv
        for n_cpu in range(L + 1):
            if base + sum(exp[n_cpu:]) <= avail:
                return res(f"-ngl 99 -ncmoe {n_cpu}", base + sum(exp[n_cpu:]))
    n, gpu = 0, 0
    while n < L and gpu + lay[L - 1 - n] + kv <= avail:
        gpu += lay[L - 1 - n] + kv
        n += 1
    return res(f"-ngl {n}" + (f" -ncmoe {L}" if any(exp) else ""), gpu)

def llama_row(path, depth):
    """llama-bench -o json -> 'prompt t/s<tab>TTFT ms<tab>gen t/s'"""
    try:
        j = json.load(open(path))
        at = lambda t: t.get("n_depth", 0) == depth
        pp = [t for t in j if t["n_prompt"] > 0 and t["n_gen"] == 0 and at(t)]
        tg = [t for t in j if t["n_gen"] > 0 and t["n_prompt"] == 0 and at(t)]
        ts = lambda x: f'{x[0]["avg_ts"]:.1f}' if x else "-"
        ttft = f'{1000 * pp[0]["n_prompt"] / pp[0]["avg_ts"]:.0f}' if pp else "-"
        return f"{ts(pp)}\t{ttft}\t{ts(tg)}"
    except Exception:
        return "-\t-\t-"

def llama_log(path):
    """a -v log -> 'MiB of llama.cpp's CUDA0 buffers<tab>layers offloaded': the
    largest model, KV, compute and output buffer each (llama-bench makes a
    context per test, the prompt test's the largest; the model is loaded
    once, or once per test under --fit-target)"""
    try:
        t = open(path, errors="replace").read()
        mib = sum(max([float(x) for x in re.findall(
            rf"CUDA0\s+{kind} buffer size =\s*([0-9.]+) MiB", t)] or [0.0])
            for kind in ("model", "KV", "compute", "output"))
        off = re.findall(r"offloaded (\d+/\d+) layers to GPU", t)
        return f'{f"{mib:.0f}" if mib else "-"}\t{off[-1] if off else "?"}'
    except Exception:
        return "-\t?"

if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "place":
        print(place(a[0], int(a[1]), int(a[2]), int(a[3])))
    elif cmd == "row":
        print(llama_row(a[0], int(a[1])))
    elif cmd == "log":
        print(llama_log(a[0]))
    elif cmd == "peak":  # nvidia-smi samples, idle MiB -> peak above idle
        v = [int(x) for x in open(a[0]).read().split() if x.isdigit()]
        print(max(v) - int(a[1]) if v else "-")
    elif cmd == "free":  # llama-bench --list-devices -> CUDA0's free MiB
        m = re.search(r"CUDA0:.*\((\d+) MiB, (\d+) MiB free\)", open(a[0], errors="replace").read())
        print(m.group(2) if m else "")
PY
if [ -z "$LLAMA_DIR" ] && [ -s "$LLAMA_TAR" ]; then
    rm -rf "$WORK/llama-cuda"
    step "unpack llama.cpp" 60 python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$LLAMA_TAR" "$WORK" && LLAMA_DIR="$WORK/llama-cuda"
fi
if [ -n "$LLAMA_DIR" ] && [ -x "$LLAMA_DIR/llama-bench" ]; then
    # llama.cpp's CUDA backend needs cuBLAS 13 (the wheels it was built
    # against); the driver brings libcuda.so.1
    find_so13() {
        { ldconfig -p 2>/dev/null | awk -v l="$1.so.13" '$1 == l {print $NF}'
          ls /usr/local/cuda*/lib64/$1.so.13 /usr/local/cuda*/targets/*/lib/$1.so.13 \
             /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/$1.so.13 \
             /usr/local/lib/python3*/dist-packages/nvidia/*/lib/$1.so.13 \
             /usr/lib/x86_64-linux-gnu/$1.so.13 2>/dev/null
          timeout 20 find /usr /opt -name "$1.so.13" 2>/dev/null; } | head -1
    }
    for lib in libcublasLt libcublas; do
        found="$(find_so13 $lib)"
        [ -n "$found" ] && LLAMA_LD="$(dirname "$found"):$LLAMA_LD"
        echo "llama.cpp: $lib.so.13 = ${found:-not found}" >>"$LOG"
    done
    LLAMA_LD="$LLAMA_DIR:$LLAMA_LD${LD_LIBRARY_PATH:-}"
    {
        echo "llama.cpp: $(cat "$LLAMA_DIR/BUILD-INFO" 2>/dev/null)"
        LD_LIBRARY_PATH="$LLAMA_LD" ldd "$LLAMA_DIR/libggml-cuda.so" | grep -E 'not found|cuda|cublas'
    } >>"$LOG" 2>&1
    llama_devices() {
        step "llama.cpp devices" 30 sh -c "LD_LIBRARY_PATH=\"$LLAMA_LD\" \"$LLAMA_DIR/llama-bench\" --list-devices > \"$WORK/llama-devices.txt\" 2>&1; rc=\$?; cat \"$WORK/llama-devices.txt\"; exit \$rc"
    }
    llama_devices
    # a libstdc++ older than GCC 12's: the build machine's, carried in gcc/
    if grep -qE "GLIBCXX|CXXABI" "$WORK/llama-devices.txt" && [ -d "$LLAMA_DIR/gcc" ]; then
        LLAMA_LD="$LLAMA_DIR/gcc:$LLAMA_LD"
        llama_devices
    fi
    LLAMA_FREE_MIB="$(python3 "$HELPERS" free "$WORK/llama-devices.txt" 2>/dev/null)"
    [ -n "$LLAMA_FREE_MIB" ] || LLAMA_DIR=""
else
    LLAMA_DIR=""
fi

if [ -n "${ATS_PREBUILT:-}" ]; then
    CLI="$ATS_PREBUILT/ats-cli"
    echo "using prebuilt binaries from $ATS_PREBUILT" >>"$LOG"
else
    step "release build" 300 cargo build --release -p ats-cli -p ats-cuda -p ats-tests --tests --bins
    CLI="${CARGO_TARGET_DIR:-$ROOT/target}/release/ats-cli"
fi

step "ats-cli devices" 30 "$CLI" devices
DEVICES="$(timeout 30 "$CLI" devices 2>&1 | head -8)"
if [ "$COMPARE" = 1 ]; then
    echo "GPU_CHECK_COMPARE=1: no tests, only the side-by-side runs" >>"$LOG"
elif [ -n "${ATS_PREBUILT:-}" ]; then
    step "ats-cuda tests" 90 "$ATS_PREBUILT/test-ats-cuda" --test-threads=1
    step "GPU tests (text and vision fixtures, placements, ledger, 1440p)" 150 "$ATS_PREBUILT/test-gpu" --nocapture --test-threads=1
else
    step "ats-cuda tests" 90 cargo test --release -p ats-cuda -- --test-threads=1
    step "GPU tests (text and vision fixtures, placements, ledger, 1440p)" 150 cargo test --release -p ats-tests --test gpu -- --nocapture --test-threads=1
fi
# the planner needs this machine's speeds: a quick profile of CPU and GPU,
# kept beside the results too (docs/scheduling.md compares the machine
# model's h200-host preset with it, sample by sample)
step "ats-cli profile --quick" 60 "$CLI" profile --quick
cp "${XDG_CACHE_HOME:-$HOME/.cache}"/ats/profile-*.json "$OUT/" 2>/dev/null ||
    echo "no profile-*.json in the cache directory to keep" >>"$LOG"

# synthetic models; with llama.cpp here, with real tokenizers (Llama 3's for
# llama-8b, Qwen2's for qwen3-30b-a3b: the presets' own vocabulary sizes,
# so the shapes are the same) so that llama.cpp loads the same files
declare -A MODEL DONOR=([llama-8b]=llama-bpe [qwen3-30b-a3b]=qwen2)
for preset in llama-8b qwen3-30b-a3b; do
    MODEL[$preset]="$WORK/$preset.gguf"
    donor="$LLAMA_DIR/vocab/${DONOR[$preset]}.gguf"
    if [ -n "$LLAMA_DIR" ] && [ -s "$donor" ]; then
        MODEL[$preset]="$WORK/$preset-vocab.gguf"
        [ -s "${MODEL[$preset]}" ] ||
            step "synth $preset (tokenizer ${DONOR[$preset]})" 90 "$CLI" synth --preset "$preset" --vocab-from "$donor" -o "${MODEL[$preset]}"
    elif [ ! -s "$WORK/$preset.gguf" ]; then
        step "synth $preset" 90 "$CLI" synth --preset "$preset" -o "$WORK/$preset.gguf"
    fi
done

# the plans the benchmarks run (per tier: chosen plan and the estimates of all three)
for preset in llama-8b qwen3-30b-a3b; do
    [ -s "${MODEL[$preset]}" ] && step "plan $preset 2G" 30 "$CLI" plan -m "${MODEL[$preset]}" --vram 2G -c 2176
done

# benchmarks: each run limited so the whole check stays inside its budget
bench_field() { # FILE TEST -> "avg" or "-"
    python3 - "$1" "$2" <<'PY' 2>/dev/null || echo "-"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    t = [x for x in j["tests"] if x["test"].startswith(sys.argv[2])]
    print(f'{t[0]["avg_ts"]:.1f}' if t else "-")
except Exception:
    print("-")
PY
}
bench_extra() { # FILE -> "TTFT ms | GPU peak MiB" (TTFT: the timed prefill of the whole prompt)
    python3 - "$1" <<'PY' 2>/dev/null || echo "- | -"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    pp = [x for x in j["tests"] if x["test"].startswith("pp")]
    ttft = f'{1000 * pp[0]["n_tokens"] / pp[0]["avg_ts"]:.0f}' if pp else "-"
    gpu = [m for m in j["memory"][1:]]
    peak = f'{gpu[0]["peak_bytes"] / 2**20:.0f}' if gpu else "-"
    print(f"{ttft} | {peak}")
except Exception:
    print("- | -")
PY
}
bench_decode() { # FILE -> "decode plan (audition: shape ms, ...)" or "-"
    python3 - "$1" <<'PY' 2>/dev/null || echo "-"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    a = j.get("audition")
    runs = ", ".join(f'{"=".join(e["kinds"])} {1000 * e["measured_secs"]:.1f}' for e in a["entries"]) if a else "no audition"
    print(f'{j.get("decode_plan") or "-"} ({runs}; {j.get("relayouts", 0)} moves)')
except Exception:
    print("-")
PY
}
bench_breakdown() { # FILE -> "- preset vram policy: where a decode token's time went" or nothing
    python3 - "$1" "$2" <<'PY' 2>/dev/null || true
import json, sys
try:
    b = json.load(open(sys.argv[1]))["decode_breakdown"]
    devs = "; ".join(
        f'{d["device"]} {d["ms"]:.2f} ms (' + ", ".join(f'{o["op"]} {o["ms"]:.2f}' for o in d["ops"][:5]) + ")"
        for d in b["devices"])
    print(f'- {sys.argv[2]}: wall {b["wall_ms"]:.2f} ms; {devs}; copies {b["copy_mb"]:.0f} MB in {b["copy_ms"]:.2f} ms; {b["switches"]:.0f} switches')
except Exception:
    pass
PY
}
bench_devices() {
    python3 - "$1" <<'PY' 2>/dev/null || echo "?"
import json, sys
try:
    print("+".join(json.load(open(sys.argv[1]))["devices"]))
except Exception:
    print("?")
PY
}
# nvidia-smi's device memory in use, sampled every 100 ms during a run: its
# peak above the idle level (the CUDA context, cuBLAS and pools included:
# the same measure for both engines, beside each engine's own count)
SMI_IDLE="$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1 | tr -dc 0-9)"
smi_step() { # SAMPLES NAME LIMIT COMMAND...: step, with nvidia-smi sampling into SAMPLES
    local samples=$1 pid="" rc
    shift
    if [ -n "$SMI_IDLE" ]; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 >"$samples" 2>/dev/null &
        pid=$!
    fi
    step "$@"
    rc=$?
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
    return $rc
}
smi_peak() { # SAMPLES -> MiB above idle, or -
    [ -n "$SMI_IDLE" ] && [ -s "$1" ] && python3 "$HELPERS" peak "$1" "$SMI_IDLE" 2>/dev/null || echo "-"
}
run_status() { case $1 in 0) echo ok ;; 124) echo "timed out" ;; *) echo "failed ($1)" ;; esac; }

# the papers' headline case (dense, 2G) first, so a short lease still gets it
for vram in 2G 4G 8G; do
    [ "$COMPARE" = 1 ] && break
    for preset in llama-8b qwen3-30b-a3b; do
        policies="layers ats"
        # the dense model at 2G also without streaming, for the decode comparison
        [ "$preset-$vram" = llama-8b-2G ] && policies="layers ats static"
        for policy in $policies; do
            # GPU_CHECK_BENCHES="llama-8b:2G:ats ...": only these (a short lease)
            case " ${GPU_CHECK_BENCHES:-$preset:$vram:$policy} " in
                *" $preset:$vram:$policy "*) ;;
                *) continue ;;
            esac
            f="$WORK/bench-$preset-$vram-$policy.json"
            name="bench $preset $vram $policy"
            if [ ! -s "${MODEL[$preset]}" ]; then
                BENCH+=("| $preset | $vram | $policy | - | - | - | - | - | - | - | no model |")
                continue
            fi
            # static runs its prompt on the CPU (minutes at 2048 tokens): decode only
            prompt=2048
            # GPU_CHECK_DEPTH=N: each test after N tokens of context (bench -d)
            depth="${GPU_CHECK_DEPTH:-0}"
            [ "$policy" = static ] && prompt=0 && depth=0
            smi_step "$WORK/smi-$preset-$vram-$policy.txt" "$name" 60 sh -c "\"$CLI\" bench -m \"${MODEL[$preset]}\" -p $prompt -n 128 -d $depth -r 1 --vram $vram --policy $policy --json > \"$f\""
            rc=$?
            BENCH+=("| $preset | $vram | $policy | $(bench_field "$f" pp) | $(bench_extra "$f") | $(smi_peak "$WORK/smi-$preset-$vram-$policy.txt") | $(bench_field "$f" tg) | $(bench_decode "$f") | $(bench_devices "$f") | $(run_status $rc) |")
            BREAKDOWN+=("$(bench_breakdown "$f" "$preset $vram $policy")")
        done
    done
done

# llama.cpp's CUDA build beside ATS, alternating, on the same files (issue
# 17). Each entry of GPU_CHECK_COMPARE_RUNS is PRESET:VRAM:THREADS[:fit]
# (VRAM max = unlimited: ATS --vram 120G, llama.cpp -ngl 99; THREADS all =
# every core, given to both engines with -t); most wanted first.
# llama.cpp at a budget: the placement the file's tensor sizes allow (the
# helper's `place`: the whole model if it fits; for the MoE every layer on
# the GPU with the experts of the fewest leading layers on the CPU,
# --n-cpu-moe; else the most trailing layers, -ngl), counting weights,
# the f16 KV cache for prompt + generated + depth tokens, and
# LLAMA_RESERVE_MIB (default 512) for its compute buffers; a :fit entry
# instead lets llama.cpp fit itself (--fit-target = CUDA0's free MiB less
# the budget). ATS's budgets are its own: 2G = 2,000,000,000 bytes = 1907
# MiB, the same bytes llama.cpp is given. Both engines' device memory is
# reported: each one's own count (ATS's ledger peak; llama.cpp's CUDA0
# model + KV + compute buffers from its -v log) and nvidia-smi's.
COMPARE_RUNS="${GPU_CHECK_COMPARE_RUNS:-llama-8b:2G:all qwen3-30b-a3b:2G:all llama-8b:2G:4 llama-8b:max:all qwen3-30b-a3b:max:all llama-8b:4G:all qwen3-30b-a3b:4G:all llama-8b:8G:all qwen3-30b-a3b:8G:all qwen3-30b-a3b:2G:4 llama-8b:2G:all:fit qwen3-30b-a3b:2G:all:fit}"
RESERVE_MIB="${LLAMA_RESERVE_MIB:-512}"
PLACEMENTS=()
if [ -n "$LLAMA_DIR" ] || [ "$COMPARE" = 1 ]; then
    depth="${GPU_CHECK_DEPTH:-0}"
    ctx=$((2048 + 128 + depth))
    for run in $COMPARE_RUNS; do
        IFS=: read -r preset vram thr fit <<<"$run"
        threads=$thr
        [ "$thr" = all ] && threads=$(nproc)
        model="${MODEL[$preset]:-}"
        label=$vram ats_vram=$vram budget_mib=""
        if [ "$vram" = max ]; then
            label=unlimited ats_vram=120G
        else
            budget_mib=$(( ${vram%G} * 1000000000 / 1048576 ))
        fi
        tag="$preset-$label-t$threads${fit:+-fit}-d$depth"
        limit=60
        case $preset in qwen3*) limit=90 ;; esac
        [ "$threads" -le 4 ] && limit=$((limit * 3 / 2))
        if [ ! -s "$model" ]; then
            BENCH+=("| $preset | $label | $threads threads | - | - | - | - | - | - | - | no model |")
            continue
        fi
        if [ -z "$fit" ]; then
            f="$WORK/bench-$tag-ats.json"
            smi_step "$WORK/smi-$tag-ats.txt" "bench $preset $label ats, $threads threads" $limit \
                sh -c "\"$CLI\" bench -m \"$model\" -p 2048 -n 128 -d $depth -r 1 -t $threads --vram $ats_vram --policy ats --json > \"$f\""
            rc=$?
            BENCH+=("| $preset | $label | ats, $threads threads | $(bench_field "$f" pp) | $(bench_extra "$f") | $(smi_peak "$WORK/smi-$tag-ats.txt") | $(bench_field "$f" tg) | $(bench_decode "$f") | $(bench_devices "$f") | $(run_status $rc) |")
            BREAKDOWN+=("$(bench_breakdown "$f" "$preset $label ats $threads threads")")
        fi
        [ -n "$LLAMA_DIR" ] || continue
        if [ -n "$fit" ]; then
            [ -n "$budget_mib" ] || continue
            margin=$((LLAMA_FREE_MIB - budget_mib))
            flags="-fitt $margin -fitc $ctx"
            how="--fit-target $margin"
        elif [ -z "$budget_mib" ]; then
            flags="-ngl 99" how="-ngl 99"
        else
            p="$(python3 "$HELPERS" place "$model" "$budget_mib" "$ctx" "$RESERVE_MIB" 2>>"$LOG")"
            flags="${p%%$'\t'*}" how="${p%%$'\t'*}"
            PLACEMENTS+=("- $preset $label: \`$flags\`: ${p##*$'\t'} MiB of weights and KV cache on the GPU (+ $RESERVE_MIB MiB reserved for compute buffers)")
        fi
        [ -n "$flags" ] || flags="-ngl 0"
        f="$WORK/bench-$tag-llama.json" e="$WORK/bench-$tag-llama.log"
        smi_step "$WORK/smi-$tag-llama.txt" "llama-bench $preset $label $how, $threads threads" $limit \
            sh -c "LD_LIBRARY_PATH=\"$LLAMA_LD\" \"$LLAMA_DIR/llama-bench\" -m \"$model\" -p 2048 -n 128 -d $depth -r 1 -t $threads $flags -o json -v > \"$f\" 2> \"$e\""
        rc=$?
        grep -E 'buffer size|offloaded|llama_params_fit|common_fit|error|fail' "$e" 2>/dev/null | head -40 >>"$LOG"
        IFS=$'\t' read -r own offl <<<"$(python3 "$HELPERS" log "$e")"
        IFS=$'\t' read -r pp ttft tg <<<"$(python3 "$HELPERS" row "$f" "$depth")"
        BENCH+=("| $preset | $label | llama.cpp $how, $threads threads | $pp | $ttft | $own | $(smi_peak "$WORK/smi-$tag-llama.txt") | $tg | $offl layers on the GPU | llama.cpp CUDA | $(run_status $rc) |")
    done
fi

{
    echo "# ATS GPU check"
    echo
    echo '```'
    echo "$DEVICES"
    echo '```'
    echo
    echo "| step | result | seconds |"
    echo "| --- | --- | ---: |"
    printf '%s\n' "${STEPS[@]}"
    echo
    echo "Prompt 2048 tokens, 128 generated, one repetition (tokens/s):"
    echo
    echo "| model | VRAM | policy | prompt t/s | TTFT ms | GPU peak MiB | nvidia-smi MiB | gen t/s | decode plan (audition ms/round) | devices | run |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"
    printf '%s\n' "${BENCH[@]}"
    echo
    echo "GPU peak MiB: the engine's own count (ATS's ledger; llama.cpp's CUDA0 model + KV + compute buffers). nvidia-smi MiB: the device's peak above its idle level during the run, CUDA context included. Depth ${GPU_CHECK_DEPTH:-0}."
    if [ -n "$LLAMA_DIR" ]; then
        echo
        echo "llama.cpp: $(cat "$LLAMA_DIR/BUILD-INFO" 2>/dev/null); CUDA0 free at the start: ${LLAMA_FREE_MIB:-?} MiB; placements from the files' tensor sizes:"
        echo
        printf '%s\n' "${PLACEMENTS[@]}"
    fi
    echo
    echo "Where a decode token's time went (ms per token over the timed rounds; GPU ops timed by events around each node on its stream, so a kernel the host launched late counts its wait; CPU ops host-timed; copies overlap compute):"
    echo
    printf '%s\n' "${BREAKDOWN[@]}" | grep -v '^$' || echo "(none)"
    echo
    echo "Total ${SECONDS}s. Log: $LOG; the benchmarks' JSON: $OUT/bench-json.tar.gz"
} >"$REPORT"
tar czf "$OUT/bench-json.tar.gz" -C "$WORK" $(cd "$WORK" && ls bench-*.json bench-*-llama.log 2>/dev/null) 2>/dev/null
cat "$REPORT"
