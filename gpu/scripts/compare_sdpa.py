"""Times flashcheck's kernels and PyTorch SDPA (flash = FlashAttention-2, cuDNN) on the same shapes
in one process's lifetime on one GPU, and prints TFLOPS and ratios.

usage: compare_sdpa.py FLASHCHECK_BINARY KERNEL DTYPE "B,H,S,D,causal" ...
FLOPs count visible (query, key) pairs exactly as flashcheck does: 2·pairs·(Dqk+Dv) per head.
"""
import re
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

fc, kernel, dtype_name = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = [s.split(",") for s in sys.argv[4:]]
dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]


def flops(b, h, s, d, causal):
    pairs = s * (s + 1) // 2 if causal else s * s
    return 2.0 * pairs * 2 * d * b * h


def time_torch(backend, q, k, v, causal, iters=30):
    with sdpa_kernel(backend):
        for _ in range(5):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            a, b_ = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            b_.record()
            b_.synchronize()
            times.append(a.elapsed_time(b_))
    times.sort()
    return times[len(times) // 2]


rows = []
for b, h, s, d, c in shapes:
    b, h, s, d, causal = int(b), int(h), int(s), int(d), c == "causal"
    shape = f"b={b} h={h} s={s} d={d} causal={'bottom_right' if causal else 'none'} dtype={dtype_name}"
    out = subprocess.run([fc, "bench", "--kernel", kernel, "--shape", shape, "--iters", "30"], capture_output=True, text=True)
    m = re.search(r"^\S+\s+.*?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out.stdout.strip().splitlines()[-1])
    ours_ms = float(m.group(1)) if m and out.returncode == 0 else float("nan")
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    fa2 = time_torch(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
    try:
        cudnn = time_torch(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    except RuntimeError:
        cudnn = float("nan")
    f = flops(b, h, s, d, causal)
    tf = lambda ms: f / (ms * 1e-3) / 1e12
    rows.append((f"({b},{h},{s},{d}){' causal' if causal else ''}", tf(ours_ms), tf(fa2), tf(cudnn), fa2 / ours_ms))
    del q, k, v

print(f"\n{torch.cuda.get_device_name()}  torch {torch.__version__}  dtype {dtype_name}")
print(f"{'shape (B,H,S,D)':28} {kernel + ' TF':>12} {'FA2 TF':>9} {'cuDNN TF':>9} {'ours/FA2':>9}")
for name, a, b_, c, r in rows:
    print(f"{name:28} {a:12.1f} {b_:9.1f} {c:9.1f} {r:9.3f}")
