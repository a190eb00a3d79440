#!/usr/bin/env bash
# Installs NVRTC for CUDA 12 from PyPI (nvidia-cuda-nvrtc-cu12: libnvrtc.so.12
# and libnvrtc-builtins, no toolkit needed) if this Python does not have it
# yet, and prints the folder holding libnvrtc.so.12 on stdout.
#
# The kernel compile test (ats-cuda/tests/nvrtc_compile.rs) finds that folder
# by itself; exporting it in LD_LIBRARY_PATH works too:
#   export LD_LIBRARY_PATH="$(bash scripts/install-nvrtc.sh):${LD_LIBRARY_PATH:-}"
set -euo pipefail

PY="${PYTHON:-python3}"
SPEC="nvidia-cuda-nvrtc-cu12>=12.4,<13"

libdir() {
    "$PY" - <<'PYEOF'
import os, sys
try:
    import nvidia.cuda_nvrtc as m
except ImportError:
    sys.exit(1)
for p in m.__path__:
    lib = os.path.join(p, "lib")
    if os.path.isfile(os.path.join(lib, "libnvrtc.so.12")):
        print(lib)
        sys.exit(0)
sys.exit(1)
PYEOF
}

if ! command -v "$PY" >/dev/null; then
    echo "install-nvrtc: $PY not found" >&2
    exit 1
fi
if ! dir="$(libdir)"; then
    echo "install-nvrtc: installing $SPEC" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check "$SPEC" >&2
    dir="$(libdir)" || { echo "install-nvrtc: libnvrtc.so.12 not found after installing" >&2; exit 1; }
fi
echo "$dir"
