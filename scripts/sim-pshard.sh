#!/usr/bin/env bash
# The NVIDIA pipelined-sharding paper's two sensitivity studies in virtual
# time: `ats` against the `layers` baseline (llama.cpp's layer offload) on
# its desktop (`pcie-gen5-desktop`: a 16-core host and an RTX 5090) as the
# host threads vary (4, 8, 16) and as the link's generation does (PCIe
# 3.0, 4.0, 5.0 x16), for the synthetic llama-8b and qwen3-30b-a3b at one
# budget; prompt and decode rates and their ratios.
#
#   bash scripts/sim-pshard.sh [VRAM] [P] [N]     # default: 4G -p 512 -n 128
set -euo pipefail
source "$(dirname "$0")/sim-models.sh"
vram=${1:-4G}
p=${2:-512}
n=${3:-128}
run() { # model gen threads policy -> "prompt gen plan"
    sim_rates "pcie-gen5-desktop,pcie=gen$2x16" "$1" "$vram" "$4" -t "$3"
}
printf '| model | threads | PCIe | layers prompt / gen t/s | ats prompt / gen t/s (decode plan) | ats / layers prompt | gen |\n'
printf '| --- | ---: | --- | --- | --- | ---: | ---: |\n'
for m in llama-8b qwen3-30b-a3b; do
    for t in 4 8 16; do
        for g in 3 4 5; do
            read -r lp lg _ < <(run "$m" "$g" "$t" layers)
            read -r ap ag plan < <(run "$m" "$g" "$t" ats)
            ratio_row "$m" "$t" "gen$g" "$lp" "$lg" "$ap" "$ag" "$plan"
        done
    done
done
