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
