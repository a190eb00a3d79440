#!/usr/bin/env bash
# Validation of the h200-host machine model against the H200 benchmarks in
# docs/gpu-results.md: the same benchmark (`bench -p 2048 -n 128 -r 1`) of
# the synthetic llama-8b and qwen3-30b-a3b at 2G/4G/8G, `ats` and `layers`,
# in virtual time (timing only: the models are all-zero sparse files).
#
#   bash scripts/sim-validate.sh [MACHINE-OVERRIDES]   # e.g. ",gemm_tflops=150"
set -euo pipefail
source "$(dirname "$0")/sim-models.sh"
extra=${1:-}
printf '| model | VRAM | policy | prompt t/s | gen t/s | decode plan: audition ms/round | re-plans |\n'
printf '| --- | --- | --- | ---: | ---: | --- | ---: |\n'
for p in llama-8b qwen3-30b-a3b; do
    for v in 2G 4G 8G; do
        for pol in layers ats; do
            j=$("$bin" bench -m "$dir/$p.gguf" --sim-machine "h200-host,compute=off$extra" \
                --vram "$v" -p 2048 -n 128 -r 1 --policy "$pol" --json 2>/dev/null)
            python3 - "$p" "$v" "$pol" "$j" <<'PY'
import json, sys
p, v, pol, j = sys.argv[1:5]
d = json.loads(j)
t = {x["test"]: x["avg_ts"] for x in d["tests"]}
a = d.get("audition")
aud = ", ".join(f"{'/'.join(e['kinds'])} {e['measured_secs']*1e3:.1f}" for e in a["entries"]) if a else d["decode_plan"]
print(f"| {p} | {v} | {pol} | {t['pp2048']:.1f} | {t['tg128']:.1f} | {aud} | {d['replans']} |")
PY
        done
    done
done
