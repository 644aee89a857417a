"""PyTorch SDPA (flash = FlashAttention-2, cuDNN) on issue 22's decode shapes, for comparison with
bench/decode_bench (decode_paged_f16). torch has no paged KV cache: K and V are dense BHSD tensors
here, so these numbers are of the dense layout, and decode_bench's "dense" rows are the like-for-like
ones. One query per sequence sees the whole cache, so is_causal=False is FlashAttention's
bottom-right decode (SDPA's is_causal is top-left: with Sq = 1 it would see key 0 alone).

GQA: enable_gqa=True where the backend takes it; otherwise K and V are expanded to Hq heads
(repeat_interleave, outside the timing), which makes the backend read group× the bytes: such rows
say "expanded". TB/s always counts the un-expanded KV bytes (B·Hkv·S·2·D·2), as decode_bench does.

usage: decode_sdpa.py [--iters 30]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms  # beside this script

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=30)
args = ap.parse_args()

SHAPES = [  # name, B, Hq, Hkv, Sq, S, D
    ("B16 cache8192", 16, 32, 8, 1, 8192, 128),
    ("B16 cache8192 sq4", 16, 32, 8, 4, 8192, 128),
    ("B1 cache131072", 1, 32, 8, 1, 131072, 128),
]


print(f"device: {torch.cuda.get_device_name()} torch {torch.__version__}")
print(f"{'shape':<22} {'backend':<8} {'gqa':<9} {'median_ms':>9} {'TB/s':>7}")
for name, b, hq, hkv, sq, s, d in SHAPES:
    torch.manual_seed(0)
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16)
    kv_bytes = b * hkv * s * 2 * d * 2
    # Sq > 1 (speculative queries): bottom-right causal needs an explicit mask in SDPA, which the
    # flash backend refuses; those rows are timed without a mask (the same bytes read).
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        done = False
        for gqa in ("native", "expanded"):
            try:
                if gqa == "native":
                    kk, vv, kw = k, v, {"enable_gqa": True}
                else:
                    kk, vv, kw = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1), {}
                with sdpa_kernel(backend):
                    ms = median_ms(lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=False, **kw), args.iters)
                print(f"{name:<22} {label:<8} {gqa:<9} {ms:9.4f} {kv_bytes / ms * 1e-9:7.3f}", flush=True)
                done = True
                break
            except Exception as e:  # a backend that refuses the shape or the GQA form
                err = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
                torch.cuda.synchronize()
        if not done:
            print(f"{name:<22} {label:<8} {'-':<9} refused: {err}", flush=True)
    del q, k, v
    torch.cuda.empty_cache()
