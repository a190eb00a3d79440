# Makes the IQ4_NL / IQ4_XS / MXFP4 reference vectors: ggml quantises (qdump, ggml_quantize_chunk,
# the code llama-quantize runs), gguf-py dequantises. Output: one small GGUF.
import json, struct, subprocess, sys
import numpy as np
sys.path.insert(0, "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py")
import gguf
from gguf.quants import dequantize, quantize

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(v["shape"])
    return out

src = read_st("/work/shared/fixtures/dequant/dequant.safetensors")["source"]
rng = np.random.default_rng(19)
r2 = rng.standard_normal(512).astype(np.float32)
r2[32:64] = 0.0                       # a silent block
r2[64:96] *= 1e-3                     # a quiet one
r2[100] = -9.0                        # a negative outlier
r2[300:332] = 1e-17                   # below ggml's GROUP_MAX_EPS
r3 = rng.uniform(0.2, 0.7, 512).astype(np.float32)
r3[256:512] = 0.0                     # a whole silent super-block
x = np.concatenate([src, r2[None], r3[None]]).astype(np.float32)
x.tofile("src.f32")
rows, cols = x.shape

w = gguf.GGUFWriter("iq4_mxfp4_ref.gguf", "dequant_test")
w.add_description("ggml_quantize_chunk (llama.cpp 0c1e570) quantised 'source'; '<TYPE>.deq' is gguf-py's dequantisation")
w.add_tensor("source", x)
for name, qt in [("IQ4_NL", gguf.GGMLQuantizationType.IQ4_NL), ("IQ4_XS", gguf.GGMLQuantizationType.IQ4_XS), ("MXFP4", gguf.GGMLQuantizationType.MXFP4)]:
    subprocess.run(["./qdump", "src.f32", str(rows), str(cols), str(int(qt)), f"{name}.bin"], check=True)
    q = np.fromfile(f"{name}.bin", dtype=np.uint8).reshape(rows, -1)
    deq = dequantize(q, qt).astype(np.float32)
    assert deq.shape == (rows, cols)
    if name == "MXFP4":
        assert (quantize(x, qt) == q).all(), "gguf-py MXFP4 bytes differ from ggml"
    print(name, q.shape, "rmse", float(np.sqrt(((deq - x) ** 2).mean())))
    w.add_tensor(name, q, raw_dtype=qt)
    w.add_tensor(name + ".deq", deq)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
