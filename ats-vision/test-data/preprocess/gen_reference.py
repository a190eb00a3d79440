"""Regenerate the preprocessing references in this folder (Pillow and, for hf_e2e, transformers).

    pip install pillow numpy safetensors transformers   # transformers only for hf_e2e.safetensors
    python gen_reference.py

Writes source images, Pillow BICUBIC resize outputs (`Image.resize`, the call transformers'
Qwen2VLImageProcessorPil makes), Pillow `convert("RGB")` decodes of other formats, and
manifest.json describing them. Deterministic for a given Pillow version (recorded in the manifest).
"""
import json
import os
import struct
import sys
import zlib

import numpy as np
import PIL
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))


def save(img, name, **kw):
    img.save(os.path.join(HERE, name), **kw)
    return name


def noise(w, h, seed):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), "RGB")


def structured(w, h):
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([(x * 255) // max(w - 1, 1), (y * 255) // max(h - 1, 1), ((x // 7 + y // 5) % 2) * 180 + 40], -1)
    img = Image.fromarray(arr.astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    d.ellipse((w // 5, h // 6, w // 2, h // 2), fill=(250, 20, 60), outline=(0, 0, 0))
    d.line((0, h - 1, w - 1, 0), fill=(255, 255, 255), width=3)
    d.rectangle((w * 3 // 5, h // 2, w * 4 // 5, h * 5 // 6), fill=(10, 200, 30))
    d.text((5, 5), "ATS 0123", fill=(0, 0, 0))
    return img


def pattern_2560x1440():
    """Also generated in Rust (tests/preprocess_pil.rs `pattern`): keep the two in sync."""
    w, h = 2560, 1440
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x // 160) * 37 % 256
    g = (y // 90) * 53 % 256
    b = ((x // 160 + y // 160) % 2) * 200 + 30
    line = ((x + 2 * y) % 401) < 3
    arr = np.stack([r, g, b], -1)
    arr[line] = 255
    return Image.fromarray(arr.astype(np.uint8), "RGB")


def png16(arr, color_type):
    """A 16-bit PNG written by hand (Pillow cannot save 16-bit RGB)."""
    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def main():
    manifest = {"pillow": PIL.__version__, "resize": [], "decode": []}

    sources = {
        "a": save(noise(61, 45, 0), "src_a.png"),
        "b": save(structured(300, 200), "src_b.png"),
        "c": save(noise(17, 23, 1), "src_c.png"),
        "d": save(Image.new("RGB", (1, 1), (200, 100, 50)), "src_d.png"),
        "e": save(noise(3, 200, 2), "src_e.png"),
        "f": save(structured(90, 300), "src_f.png"),
    }
    targets = {
        # Pillow 13 runs the vertical pass first when the height shrinks by more than twice
        # as many pixels as the width: (60, 20), (290, 60) and all of "e" and "f" do.
        "a": [(56, 56), (140, 84), (28, 28), (61, 90), (122, 45), (33, 29), (60, 20)],
        "b": [(84, 56), (112, 84), (29, 17), (150, 100), (97, 61), (290, 60)],
        "c": [(56, 56), (5, 7)],
        "d": [(28, 28)],
        "e": [(28, 196), (1, 57)],
        "f": [(28, 140), (56, 168), (84, 280)],
    }
    for key, src in sources.items():
        img = Image.open(os.path.join(HERE, src))
        for w, h in targets[key]:
            out = img.resize((w, h), resample=Image.BICUBIC)
            name = save(out, f"pil_{key}_{w}x{h}.png")
            manifest["resize"].append({"src": src, "width": w, "height": h, "expected": name})

    # 2560x1440 -> smart_resize (default max_pixels) = 1316x728; the source is a formula, not stored.
    out = pattern_2560x1440().resize((1316, 728), resample=Image.BICUBIC)
    manifest["pattern_2560x1440"] = save(out, "pil_pattern_1316x728.png", optimize=True)

    # Decoding: the reference is Pillow's Image.open(...).convert("RGB"), what transformers does.
    base = structured(40, 30)
    rgba = base.copy()
    rgba.putalpha(Image.fromarray(np.random.default_rng(3).integers(0, 256, (30, 40), dtype=np.uint8)))
    cases = [
        ("rgba.png", lambda p: rgba.save(p)),
        ("la.png", lambda p: rgba.convert("LA").save(p)),
        ("gray.png", lambda p: base.convert("L").save(p)),
        ("bilevel.png", lambda p: base.convert("1").save(p)),
        ("palette_trns.png", lambda p: rgba.convert("RGB").quantize(16).save(p, transparency=3)),
        ("rgb16.png", lambda p: open(p, "wb").write(png16(
            np.random.default_rng(4).integers(0, 65536, (30, 40, 3), dtype=np.uint16), 2))),
        ("rgba16.png", lambda p: open(p, "wb").write(png16(
            np.random.default_rng(5).integers(0, 65536, (30, 40, 4), dtype=np.uint16), 6))),
        ("rgb.jpg", lambda p: base.save(p, quality=90)),
        ("rgb444.jpg", lambda p: base.save(p, quality=95, subsampling=0)),
        ("gray.jpg", lambda p: base.convert("L").save(p, quality=90)),
        ("lossless.webp", lambda p: base.save(p, lossless=True)),
        ("lossy.webp", lambda p: base.save(p, quality=80)),
        ("rgba_lossless.webp", lambda p: rgba.save(p, lossless=True)),
        ("palette.gif", lambda p: base.quantize(32).save(p)),
        ("palette_trns.gif", lambda p: base.quantize(32).save(p, transparency=5)),
        ("rgb.bmp", lambda p: base.save(p)),
    ]
    for name, write in cases:
        path = os.path.join(HERE, "dec_" + name)
        write(path)
        im = Image.open(path)
        mode = im.mode
        expected = save(im.convert("RGB"), "dec_" + name.replace(".", "_") + "_pil.png")
        manifest["decode"].append({"file": "dec_" + name, "pil_mode": mode, "expected": expected})

    # End to end through transformers' Qwen2VLImageProcessorPil (needs transformers; no torch).
    try:
        import types
        import transformers
        import transformers.image_processing_backends  # noqa: F401  (real import before the stubs)
        for n in ["torch", "torchvision", "torchvision.transforms", "torchvision.transforms.v2"]:
            sys.modules[n] = types.ModuleType(n)
        sys.modules["torch"].Tensor = object
        f = types.ModuleType("torchvision.transforms.v2.functional")
        sys.modules["torchvision.transforms.v2.functional"] = f
        sys.modules["torchvision.transforms.v2"].functional = f
        from safetensors.numpy import save_file
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        arrays = {}
        e2e = []
        cases = [
            ("a", {}),
            ("b", {"min_pixels": 784, "max_pixels": 3136}),
            ("f", {"min_pixels": 784, "max_pixels": 6272}),  # 90x300 -> 28x140, vertical pass first
        ]
        for key, kw in cases:
            proc = Qwen2VLImageProcessorPil(**kw)
            out = proc(Image.open(os.path.join(HERE, sources[key])), return_tensors="np")
            arrays[f"{key}.pixel_values"] = out["pixel_values"].astype(np.float32)
            arrays[f"{key}.image_grid_thw"] = out["image_grid_thw"].astype(np.int64)
            e2e.append({"src": sources[key], "key": key, **kw})
        save_file(arrays, os.path.join(HERE, "hf_e2e.safetensors"))
        manifest["hf_e2e"] = {"transformers": transformers.__version__, "cases": e2e}
    except ImportError as err:
        print("skipping hf_e2e:", err)

    with open(os.path.join(HERE, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


if __name__ == "__main__":
    main()
