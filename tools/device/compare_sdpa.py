"""Times flashcheck's kernels and PyTorch SDPA (flash = FlashAttention-2, cuDNN) on the same shapes
in one process's lifetime on one GPU, and prints TFLOPS and ratios.

usage: compare_sdpa.py FLASHCHECK_BINARY KERNEL DTYPE "B,H,S,D,causal" ...
FLASHCHECK_BINARY may be LABEL=PATH[,LABEL=PATH...] to time several builds of the kernel against
the same torch timings (one column per build).
FLOPs count visible (query, key) pairs exactly as flashcheck does: 2·pairs·(Dqk+Dv) per head.
"""
import re
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

fc_arg, kernel, dtype_name = sys.argv[1], sys.argv[2], sys.argv[3]
builds = [b.split("=", 1) if "=" in b else [kernel, b] for b in fc_arg.split(",")]
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
    ours_ms = []
    for _, fc in builds:
        out = subprocess.run([fc, "bench", "--kernel", kernel, "--shape", shape, "--iters", "30"],
                             capture_output=True, text=True)
        lines = out.stdout.strip().splitlines()
        m = re.search(r"^\S+\s+.*?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", lines[-1]) if lines else None
        ours_ms.append(float(m.group(1)) if m and out.returncode == 0 else float("nan"))
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    fa2 = time_torch(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
    try:
        cudnn = time_torch(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    except RuntimeError:
        cudnn = float("nan")
    f = flops(b, h, s, d, causal)
    tf = lambda ms: f / (ms * 1e-3) / 1e12
    rows.append((f"({b},{h},{s},{d}){' causal' if causal else ''}", [tf(t) for t in ours_ms], tf(fa2), tf(cudnn),
                 [fa2 / t for t in ours_ms]))
    del q, k, v

print(f"\n{torch.cuda.get_device_name()}  torch {torch.__version__}  dtype {dtype_name}")
labels = [label for label, _ in builds]
print(f"{'shape (B,H,S,D)':28} " + " ".join(f"{l + ' TF':>12}" for l in labels) + f" {'FA2 TF':>9} {'cuDNN TF':>9} "
      + " ".join(f"{l + '/FA2':>12}" for l in labels))
for name, ours, fa2, cudnn, ratios in rows:
    print(f"{name:28} " + " ".join(f"{t:12.1f}" for t in ours) + f" {fa2:9.1f} {cudnn:9.1f} "
          + " ".join(f"{r:12.3f}" for r in ratios))
