#!/usr/bin/env bash
# CPU side by side with llama.cpp on the same machine, model and threads,
# alternating the two engines so drifting machine load hits both alike.
#   LLAMA_BENCH=/path/to/llama-bench bash scripts/bench-vs-llamacpp.sh [ROUNDS]
# Models: SmolLM2-135M Q4_1 (../shared/scripts/fetch-smollm2.sh) and a
# synthetic 1B llama in Q4_K_M (`ats-cli synth --preset llama-1b`), which
# does not fit in cache (ATS alone: synthetic files carry no tokenizer, which
# llama.cpp's loader requires). Prints each run's markdown rows; the memory read
# bandwidth for the roofline comes from ats-cpu's membw example.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
LB="${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary}"
T="${THREADS:-2}"
cargo build --release -q -p ats-cli
cargo build --release -q -p ats-cpu --example membw
ATS=target/release/ats-cli
SMOL="$(bash ../shared/scripts/fetch-smollm2.sh)"
ONEB="${TMPDIR:-/tmp}/ats-llama-1b.gguf"
[ -s "$ONEB" ] || "$ATS" synth --preset llama-1b -o "$ONEB" >&2
echo "## $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads"
target/release/examples/membw "$T" 1024
for r in $(seq "$ROUNDS"); do
    echo "### round $r"
    "$LB" -m "$SMOL" -p 512 -n 128 -t "$T" -r 5 -o md 2>/dev/null | grep -E "^\| [a-z]"
    "$ATS" -q bench -m "$SMOL" -p 512 -n 128 -t "$T" -r 5 | grep -E "^\| [A-Za-z]" | grep -v "^| model"
    "$ATS" -q bench -m "$ONEB" -p 64 -n 32 -t "$T" -r 3 | grep -E "^\| [A-Za-z]" | grep -v "^| model"
done
