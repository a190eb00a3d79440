#!/usr/bin/env bash
# The papers' headline comparison in virtual time: `ats` against the `layers`
# baseline (llama.cpp's layer offload) on the machines ATSInfer measured
# (an RTX 3060 laptop, an RTX 4090 desktop), the synthetic llama-8b and
# qwen3-30b-a3b, prompt and decode rates and their ratios.
#
#   bash scripts/sim-headline.sh [P] [N]     # default: -p 512 -n 128
set -euo pipefail
source "$(dirname "$0")/sim-models.sh"
p=${1:-512}
n=${2:-128}
printf '| machine | model | VRAM | layers prompt / gen t/s | ats prompt / gen t/s (decode plan) | ats / layers prompt | gen |\n'
printf '| --- | --- | --- | --- | --- | ---: | ---: |\n'
for mach in rtx3060-laptop:2G,4G rtx4090-desktop:4G,8G,16G; do
    name=${mach%%:*}
    for m in llama-8b qwen3-30b-a3b; do
        for v in $(echo "${mach#*:}" | tr , " "); do
            read -r lp lg _ < <(sim_rates "$name" "$m" "$v" layers)
            read -r ap ag plan < <(sim_rates "$name" "$m" "$v" ats)
            ratio_row "$name" "$m" "$v" "$lp" "$lg" "$ap" "$ag" "$plan"
        done
    done
done
