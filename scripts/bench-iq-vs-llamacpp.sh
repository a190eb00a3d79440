#!/usr/bin/env bash
# IQ4_NL, IQ4_XS and MXFP4 on the CPU beside llama.cpp: SmolLM2 requantised
# by llama-quantize (scripts/requant-smollm2.sh), the same file for both
# engines, alternating them per round so drifting load hits both alike.
#   LLAMA_BENCH=/path/to/llama-bench bash scripts/bench-iq-vs-llamacpp.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
LB="${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary}"
T="${THREADS:-2}"
R="${REPS:-5}"
cargo build --release -q -p ats-cli
ATS=target/release/ats-cli
DIR="$(dirname "$(bash ../shared/scripts/fetch-smollm2.sh)")"
echo "## $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads"
for r in $(seq "$ROUNDS"); do
    echo "### round $r"
    for v in IQ4_NL IQ4_XS MXFP4; do
        m="$DIR/SmolLM2-135M-Instruct.$v.gguf"
        echo "#### $v"
        "$LB" -m "$m" -p 512 -n 128 -t "$T" -r "$R" -o md 2>/dev/null | grep -E "^\| [a-z]"
        "$ATS" -q bench -m "$m" -p 512 -n 128 -t "$T" -r "$R" | grep -E "^\| [A-Za-z]" | grep -v "^| model"
    done
done
