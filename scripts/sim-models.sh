# Sourced by the sim-*.sh scripts: builds ats-cli (release) and writes the
# all-zero synthetic llama-8b and qwen3-30b-a3b once; sets `bin` and `dir`.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -p ats-cli >/dev/null 2>&1
bin=target/release/ats-cli
dir=${ATS_SIM_MODELS:-/tmp/ats-sim-models}
mkdir -p "$dir"
for m in llama-8b qwen3-30b-a3b; do
    [ -f "$dir/$m.gguf" ] || "$bin" synth --preset "$m" --zeros -o "$dir/$m.gguf" >/dev/null
done

# Benchmarks one cell in virtual time and prints "PROMPT_TS GEN_TS
# DECODE_PLAN": MACHINE (a --sim-machine spec, `compute=off` added), MODEL
# (written above), VRAM, POLICY, then any further `bench` arguments; the
# test sizes are the caller's $p and $n.
sim_rates() {
    "$bin" bench -m "$dir/$2.gguf" --sim-machine "$1,compute=off" --vram "$3" \
        -p "$p" -n "$n" -r 1 --policy "$4" "${@:5}" --json 2>/dev/null | bench_rates "$p" "$n"
}

# Reads `bench --json` on stdin and prints "PROMPT_TS GEN_TS DECODE_PLAN" for
# the test of a P-token prompt ($1) and N generated tokens ($2).
bench_rates() {
    python3 -c 'import json, sys
d = json.load(sys.stdin)
t = {x["test"]: x["avg_ts"] for x in d["tests"]}
print(t["pp" + sys.argv[1]], t["tg" + sys.argv[2]], d["decode_plan"])' "$1" "$2"
}

# Prints a table row: the label cells, then `layers` and `ats` rates and
# their ratios, from LABEL... LAYERS_PROMPT LAYERS_GEN ATS_PROMPT ATS_GEN PLAN.
ratio_row() {
    python3 - "$@" <<'PY'
import sys
a = sys.argv[1:]
labels, plan = a[:-5], a[-1]
lp, lg, ap, ag = (float(x) for x in a[-5:-1])
cells = " | ".join(labels)
print(f"| {cells} | {lp:.1f} / {lg:.1f} | {ap:.1f} / {ag:.1f} ({plan}) | {ap / lp:.2f}x | {ag / lg:.2f}x |")
PY
}
