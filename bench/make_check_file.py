#!/usr/bin/env python3
"""Write a large attention output file for timing `flashcheck check` end to end (numpy only).

q, k, v are random normals rounded to the dtype; o is a correct fp32 attention rounded to the
dtype, computed one (batch, head) at a time in row blocks so memory stays small. The file follows
the format `flashcheck check` reads (README: "Checking any kernel's output").

    python3 bench/make_check_file.py OUT.safetensors --shape 1,8,4096,128 --dtype bf16 --causal none
"""
import argparse
import json
import struct

import numpy as np


def round_bf16_bits(x):
    """fp32 -> bf16 bits, round to nearest even (inputs here are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def to_dtype(x, dtype):
    """(stored array, the fp32 values it holds)."""
    if dtype == "f32":
        x = x.astype(np.float32)
        return x, x
    if dtype == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    b = round_bf16_bits(x)
    return b, (b.astype(np.uint32) << 16).view(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="1,8,4096,128", help="B,H,S,D (Hq = Hkv, Sq = Skv, Dqk = Dv)")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--causal", choices=["none", "top_left"], default="none")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    B, H, S, D = (int(x) for x in a.shape.split(","))
    rng = np.random.default_rng(a.seed)
    scale = 1.0 / np.sqrt(D)
    st = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[a.dtype]
    tensors = {}
    vals = {}
    for name in ("q", "k", "v"):
        stored, f32 = to_dtype(rng.standard_normal((B, H, S, D), dtype=np.float32), a.dtype)
        tensors[name], vals[name] = stored, f32
    o = np.empty((B, H, S, D), dtype=np.float32)
    rb = 512
    for b in range(B):
        for h in range(H):
            q, k, v = vals["q"][b, h], vals["k"][b, h], vals["v"][b, h]
            for r0 in range(0, S, rb):
                s = (q[r0:r0 + rb] @ k.T) * np.float32(scale)
                if a.causal == "top_left":
                    rows = np.arange(r0, min(r0 + rb, S))[:, None]
                    s = np.where(np.arange(S)[None, :] <= rows, s, -np.inf)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                o[b, h, r0:r0 + rb] = (s / s.sum(axis=1, keepdims=True)) @ v
    tensors["o"], _ = to_dtype(o, a.dtype)

    header, off, blobs = {"__metadata__": {"causal": a.causal}}, 0, []
    for name in ("q", "k", "v", "o"):
        raw = np.ascontiguousarray(tensors[name]).tobytes()
        header[name] = {"dtype": st, "shape": [B, H, S, D], "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)
    print(f"wrote {a.out}: ({B},{H},{S},{D}) {a.dtype} causal={a.causal}")


if __name__ == "__main__":
    main()
