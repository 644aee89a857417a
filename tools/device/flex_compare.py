#!/usr/bin/env python3
"""The anchors of issue 22's speed goals, timed on this GPU: torch's flex_attention (compiled) and
SDPA's flash and cuDNN backends on the variant shapes `flashcheck bench` times for our kernels, so
the ratios come from one call on one card. Prints one row per (shape, backend): median ms over
--iters runs after --warmup, and TFLOPS counted on the visible (query, key) pairs only, as
`flashcheck bench` counts them.

    flex_compare.py [--iters 50] [--warmup 10] [--json PATH]

Shapes (bf16, D = 128, H = 16, bottom-right causal where causal; flashcheck's conventions):
causal, window (1024, 0) (key j visible iff i - 1024 <= j <= i), softcap 30 (30 tanh(s / 30) after
the scale), symmetric ALiBi (-slope_h |i - j|, slopes 2^(-8(h+1)/H)), dense, at S = 4096; causal and
window at S = 16384; 16 packed documents of lengths drawn as variants_device.sh draws them
(random.Random(22), 128..4096), causal within each, and the equal-length batch of the same total.
"""
import argparse
import json
import random
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cuda_timing import median_ms  # beside this script

# Each shape, mask and score_mod is its own compiled graph: more than dynamo's default limit of 8
# recompiles, past which it silently falls back to the unfused eager path (48 ms instead of ~1 ms).
for knob in ("recompile_limit", "cache_size_limit"):
    if hasattr(torch._dynamo.config, knob):
        setattr(torch._dynamo.config, knob, 64)
flex = torch.compile(flex_attention, dynamic=False)
H, D, DT = 16, 128, torch.bfloat16


def causal_pairs(s):
    return s * (s + 1) // 2


def window_pairs(s, left):
    return sum(min(i + 1, left + 1) for i in range(s))


def qkv(b, s, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, H, s, D, device="cuda", dtype=DT, generator=g) for _ in range(3)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []

    def row(shape, backend, pairs, fn):
        try:
            ms = median_ms(fn, a.iters, a.warmup)
            tf = 4.0 * D * H * pairs / (ms * 1e-3) * 1e-12
            rows.append(dict(shape=shape, backend=backend, ms=ms, tflops=tf))
            print(f"{shape:28s} {backend:8s} {ms:9.3f} ms {tf:8.1f} TFLOPS", flush=True)
        except Exception as e:  # a backend that declines the shape is a row that says so
            rows.append(dict(shape=shape, backend=backend, error=str(e)[:200]))
            print(f"{shape:28s} {backend:8s} declined: {str(e)[:120]}", flush=True)

    def causal_mask(b, h, q, kv):
        return q >= kv

    def window_mask(b, h, q, kv):
        return (q >= kv) & (q - kv <= 1024)

    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)], device="cuda")

    def alibi(score, b, h, q, kv):
        return score - slopes[h] * (q - kv).abs()

    def softcap(score, b, h, q, kv):
        return 30.0 * torch.tanh(score / 30.0)

    for s in (4096, 16384):
        q, k, v = qkv(1, s, s)
        cm = create_block_mask(causal_mask, None, None, s, s)
        wm = create_block_mask(window_mask, None, None, s, s)
        row(f"causal S={s}", "flex", causal_pairs(s), lambda: flex(q, k, v, block_mask=cm))
        row(f"window(1024,0) S={s}", "flex", window_pairs(s, 1024), lambda: flex(q, k, v, block_mask=wm))
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def sdpa(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            row(f"causal S={s}", name, causal_pairs(s), sdpa)
        if s == 4096:
            row(f"causal+softcap30 S={s}", "flex", causal_pairs(s), lambda: flex(q, k, v, score_mod=softcap, block_mask=cm))
            row(f"causal+alibi S={s}", "flex", causal_pairs(s), lambda: flex(q, k, v, score_mod=alibi, block_mask=cm))
            row(f"dense S={s}", "flex", s * s, lambda: flex(q, k, v))

    r = random.Random(22)
    lens = [r.randint(128, 4096) for _ in range(16)]
    total = sum(lens)
    doc = torch.cat([torch.full((n,), i, device="cuda", dtype=torch.int32) for i, n in enumerate(lens)])

    def doc_causal(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    q, k, v = qkv(1, total, 7)
    dm = create_block_mask(doc_causal, None, None, total, total)
    row(f"16 docs (total {total})", "flex", sum(causal_pairs(n) for n in lens), lambda: flex(q, k, v, block_mask=dm))
    eq = (total + 8) // 16
    qe, ke, ve = qkv(16, eq, 8)
    em = create_block_mask(causal_mask, None, None, eq, eq)
    row(f"equal batch 16x{eq}", "flex", 16 * causal_pairs(eq), lambda: flex(qe, ke, ve, block_mask=em))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, lens=lens, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
