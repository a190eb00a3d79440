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
# and writes a markdown results table to $OUT/gpu-check.md (also printed).
# Every step is timed and has a time limit; a failing step is reported and
# the next one still runs. The full log is $OUT/gpu-check.log.
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

if [ -n "${ATS_PREBUILT:-}" ]; then
    CLI="$ATS_PREBUILT/ats-cli"
    echo "using prebuilt binaries from $ATS_PREBUILT" >>"$LOG"
else
    step "release build" 300 cargo build --release -p ats-cli -p ats-cuda -p ats-tests --tests --bins
    CLI="${CARGO_TARGET_DIR:-$ROOT/target}/release/ats-cli"
fi

step "ats-cli devices" 30 "$CLI" devices
DEVICES="$(timeout 30 "$CLI" devices 2>&1 | head -8)"
if [ -n "${ATS_PREBUILT:-}" ]; then
    step "ats-cuda tests" 90 "$ATS_PREBUILT/test-ats-cuda" --test-threads=1
    step "GPU tests (text and vision fixtures, placements, ledger, 1440p)" 150 "$ATS_PREBUILT/test-gpu" --nocapture --test-threads=1
else
    step "ats-cuda tests" 90 cargo test --release -p ats-cuda -- --test-threads=1
    step "GPU tests (text and vision fixtures, placements, ledger, 1440p)" 150 cargo test --release -p ats-tests --test gpu -- --nocapture --test-threads=1
fi
# the planner needs this machine's speeds: a quick profile of CPU and GPU
step "ats-cli profile --quick" 60 "$CLI" profile --quick

# synthetic models
for preset in llama-8b qwen3-30b-a3b; do
    if [ ! -s "$WORK/$preset.gguf" ]; then
        step "synth $preset" 90 "$CLI" synth --preset "$preset" -o "$WORK/$preset.gguf"
    fi
done

# the plans the benchmarks run (per tier: chosen plan and the estimates of all three)
for preset in llama-8b qwen3-30b-a3b; do
    [ -s "$WORK/$preset.gguf" ] && step "plan $preset 2G" 30 "$CLI" plan -m "$WORK/$preset.gguf" --vram 2G -c 2176
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
# the papers' headline case (dense, 2G) first, so a short lease still gets it
for vram in 2G 4G 8G; do
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
            if [ ! -s "$WORK/$preset.gguf" ]; then
                BENCH+=("| $preset | $vram | $policy | - | - | - | - | - | - | no model |")
                continue
            fi
            # static runs its prompt on the CPU (minutes at 2048 tokens): decode only
            prompt=2048
            # GPU_CHECK_DEPTH=N: each test after N tokens of context (bench -d)
            depth="${GPU_CHECK_DEPTH:-0}"
            [ "$policy" = static ] && prompt=0 && depth=0
            step "$name" 60 sh -c "\"$CLI\" bench -m \"$WORK/$preset.gguf\" -p $prompt -n 128 -d $depth -r 1 --vram $vram --policy $policy --json > \"$f\""
            rc=$?
            status=$([ $rc -eq 0 ] && echo ok || ([ $rc -eq 124 ] && echo "timed out" || echo "failed ($rc)"))
            BENCH+=("| $preset | $vram | $policy | $(bench_field "$f" pp) | $(bench_extra "$f") | $(bench_field "$f" tg) | $(bench_decode "$f") | $(bench_devices "$f") | $status |")
            BREAKDOWN+=("$(bench_breakdown "$f" "$preset $vram $policy")")
        done
    done
done

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
    echo "| model | VRAM | policy | prompt t/s | TTFT ms | GPU peak MiB | gen t/s | decode plan (audition ms/round) | devices | run |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- |"
    printf '%s\n' "${BENCH[@]}"
    echo
    echo "Where a decode token's time went (ms per token over the timed rounds; GPU ops timed by events around each node on its stream, so a kernel the host launched late counts its wait; CPU ops host-timed; copies overlap compute):"
    echo
    printf '%s\n' "${BREAKDOWN[@]}" | grep -v '^$' || echo "(none)"
    echo
    echo "Total ${SECONDS}s. Log: $LOG; the benchmarks' JSON: $OUT/bench-json.tar.gz"
} >"$REPORT"
tar czf "$OUT/bench-json.tar.gz" -C "$WORK" $(cd "$WORK" && ls bench-*.json 2>/dev/null) 2>/dev/null
cat "$REPORT"
