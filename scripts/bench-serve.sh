#!/usr/bin/env bash
# Servers side by side: `ats-cli serve --parallel N` and llama.cpp's
# `llama-server -np N` on the same model, threads and context, alternating
# (ATS, then llama.cpp, ROUNDS times) so drifting machine load hits both
# alike. Each run: streamed greedy chats of TOKENS tokens from 1, 4, 8 and 16
# clients (scripts/bench-serve.py), without and with a shared 500-token
# system prompt, then a two-turn conversation (a second turn's TTFT against
# its first). Prints one JSON line per measurement.
#   LLAMA_SERVER=/path/to/llama-server bash scripts/bench-serve.sh [ROUNDS]
# Environment: MODEL (default SmolLM2-135M Q4_1), THREADS (2), CLIENTS
# (1,4,8,16), TOKENS (32), PER_CLIENT (3), CTX (16384).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
LS="${LLAMA_SERVER:?set LLAMA_SERVER to the llama-server binary}"
T="${THREADS:-2}"
CLIENTS="${CLIENTS:-1,4,8,16}"
TOKENS="${TOKENS:-32}"
PER="${PER_CLIENT:-3}"
CTX="${CTX:-16384}"
NP=16
cargo build --release -q -p ats-cli
ATS=target/release/ats-cli
MODEL="${MODEL:-$(bash ../shared/scripts/fetch-smollm2.sh)}"
PORT_A=18431
PORT_L=18432
echo "# $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads, $(basename "$MODEL")" >&2

wait_up() {
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server on port $1 did not come up" >&2
    return 1
}

run_one() { # NAME PORT
    local url="http://127.0.0.1:$2"
    python3 scripts/bench-serve.py "$url" --clients "$CLIENTS" --per-client "$PER" --tokens "$TOKENS" --label "$1" --seed "$RANDOM"
    python3 scripts/bench-serve.py "$url" --clients "$CLIENTS" --per-client "$PER" --tokens "$TOKENS" --system 500 --label "$1" --seed "$RANDOM"
    python3 scripts/bench-serve.py "$url" --turns --system 500 --tokens "$TOKENS" --label "$1" --seed "$RANDOM"
}

for r in $(seq "$ROUNDS"); do
    "$ATS" -q serve -m "$MODEL" --parallel "$NP" --queue 64 -c "$CTX" -t "$T" --port "$PORT_A" 2>/dev/null &
    pid=$!
    wait_up "$PORT_A"
    run_one ats "$PORT_A"
    kill "$pid"; wait "$pid" 2>/dev/null || true

    "$LS" -m "$MODEL" -np "$NP" -kvu -c "$CTX" -t "$T" --port "$PORT_L" >/dev/null 2>&1 &
    pid=$!
    wait_up "$PORT_L"
    run_one llama.cpp "$PORT_L"
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
