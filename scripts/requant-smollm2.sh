#!/usr/bin/env bash
# SmolLM2-135M-Instruct requantised by llama.cpp's own llama-quantize to the
# table formats, next to the Q4_1 original (the tests look there):
#   LLAMA_QUANTIZE=/path/to/llama-quantize bash scripts/requant-smollm2.sh
# The only SmolLM2 we fetch is Q4_1, so this is --allow-requantize: each Q4_1
# weight is dequantised to f32 and quantised again (the source is Q4_1's
# values, not the original bf16 ones). No importance matrix.
#   IQ4_NL, IQ4_XS: llama-quantize's normal mixtures for those types (IQ4_XS
#     rows need 256 columns: SmolLM2's 576-column matrices fall back to IQ4_NL;
#     the tied embedding/output takes Q8_0).
#   MXFP4: llama-quantize offers MXFP4_MOE, which on a dense model makes every
#     matrix Q8_0 (it only puts 3-D expert tensors in MXFP4); with --pure it
#     makes every 2-D weight MXFP4 instead, embedding and output included.
set -euo pipefail
LQ="${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to the llama-quantize binary}"
SMOL="$(bash "$(dirname "$0")/../../shared/scripts/fetch-smollm2.sh")"
DIR="$(dirname "$SMOL")"
for spec in "IQ4_NL IQ4_NL" "IQ4_XS IQ4_XS" "MXFP4 MXFP4_MOE --pure"; do
    set -- $spec
    out="$DIR/SmolLM2-135M-Instruct.$1.gguf"
    "$LQ" --allow-requantize ${3:-} "$SMOL" "$out" "$2" >/dev/null 2>&1
    echo "$out"
done
