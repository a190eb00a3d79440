#!/usr/bin/env bash
# Batched decoding side by side: `ats-cli bench --parallel` against
# llama.cpp's `llama-batched-bench` (same sources as the other comparisons)
# on the same model and threads, alternating, ROUNDS times. Both report
# S_PP (prompt tokens of all sequences / time) and S_TG (tokens generated
# by all sequences / time) for N sequences of P prompt tokens generating G.
#   LLAMA_BATCHED_BENCH=/path/to/llama-batched-bench bash scripts/bench-parallel-vs-llamacpp.sh [ROUNDS]
# Models: SmolLM2-135M Q4_1 and a synthetic 1B llama in Q4_K_M carrying
# SmolLM2's tokenizer (`ats-cli synth --preset llama-1b --vocab-from`), so
# llama.cpp loads it. Environment: THREADS (2), NPL (1,4,8,16), GEN_1B (64:
# the 1B's tokens generated a sequence; at 16, about a second of rounds at 8
# sequences, the noise of a shared host swamped the rates).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
LBB="${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to the llama-batched-bench binary}"
T="${THREADS:-2}"
NPL="${NPL:-1,4,8,16}"
GEN_1B="${GEN_1B:-64}"
cargo build --release -q -p ats-cli
ATS=target/release/ats-cli
SMOL="$(bash ../shared/scripts/fetch-smollm2.sh)"
ONEB="${TMPDIR:-/tmp}/ats-llama-1b-vocab.gguf"
[ -s "$ONEB" ] || "$ATS" -q synth --preset llama-1b --vocab-from "$SMOL" -o "$ONEB" >&2
echo "## $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads"
run() { # MODEL P G
    # a first batch of one warms llama.cpp up (page-in, first-touch); dropped
    "$LBB" -m "$1" -c 16384 -b 2048 -ub 512 -npp "$2" -ntg "$3" -npl "1,$NPL" -t "$T" 2>/dev/null |
        grep -E "^\|\s+[0-9]" | tail -n +2 | awk -F'|' -v m="$(basename "$1")" '{gsub(/ /,""); print "llama.cpp", m, "N=" $4, "S_PP", $7, "S_TG", $9}'
    "$ATS" -q bench -m "$1" -p "$2" -n "$3" -t "$T" -r 1 --parallel "$NPL" --json |
        python3 -c 'import json,sys
d=json.load(sys.stdin)
for t in d["tests"]:
    print("ats", sys.argv[1], "N=%d" % t["parallel"], "S_PP", round(t["pp_ts"], 2), "S_TG", round(t["tg_ts"], 2), t["tg_plan"])' "$(basename "$1")"
}
for r in $(seq "$ROUNDS"); do
    echo "### round $r"
    run "$SMOL" 128 32
    run "$ONEB" 32 "$GEN_1B"
done
