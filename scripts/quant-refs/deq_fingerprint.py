# gguf-py's dequantisation of every IQ4_NL / IQ4_XS / MXFP4 tensor of the requantised SmolLM2
# files, fingerprinted: h = sum_i bits(y_i) * (2i + 1) mod 2^64 over the f32 values in row-major
# order (any single changed value changes h: the multiplier is odd).
import json, sys
import numpy as np
sys.path.insert(0, "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")
import gguf
from gguf.quants import dequantize
out = {}
for v in ["IQ4_NL", "IQ4_XS", "MXFP4"]:
    r = gguf.GGUFReader(f"/root/.cache/ats/models/SmolLM2-135M-Instruct.{v}.gguf")
    d = {}
    for t in r.tensors:
        if t.tensor_type.name not in ("IQ4_NL", "IQ4_XS", "MXFP4"):
            continue
        y = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        bits = y.view(np.uint32).astype(np.uint64)
        idx = np.arange(y.size, dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = int((bits * (np.uint64(2) * idx + np.uint64(1))).sum(dtype=np.uint64))
        d[t.name] = f"{h:016x}"
    out[v] = d
    print(v, len(d))
json.dump(out, open("smollm2_requant_deq.json", "w"), indent=0, sort_keys=True)
