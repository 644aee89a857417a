"""Times flashcheck's wgmma_f16 against torch SDPA (cuDNN, and FA2 where it accepts the shape) on a
shape with Dv != Dqk, which compare_sdpa.py cannot express: bf16, non-causal and causal.

usage: sdpa_dv.py LABEL=FLASHCHECK[,LABEL=FLASHCHECK...] B H S DQK DV
FLOPs as flashcheck counts them: 2·pairs·(Dqk+Dv) per head.
"""
import re
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms  # beside this script

builds = [b.split("=", 1) for b in sys.argv[1].split(",")]
b, h, s, dqk, dv = (int(x) for x in sys.argv[2:7])


torch.manual_seed(0)
q = torch.randn(b, h, s, dqk, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, h, s, dqk, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, h, s, dv, device="cuda", dtype=torch.bfloat16)
print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  bf16  B={b} H={h} S={s} Dqk={dqk} Dv={dv}")
for causal in (False, True):
    pairs = s * (s + 1) // 2 if causal else s * s
    flops = 2.0 * pairs * (dqk + dv) * b * h
    tf = lambda ms: flops / (ms * 1e-3) / 1e12
    row = []
    for label, fc in builds:
        shape = f"b={b} h={h} s={s} dqk={dqk} dv={dv} causal={'bottom_right' if causal else 'none'} dtype=bf16"
        out = subprocess.run([fc, "bench", "--kernel", "wgmma_f16", "--shape", shape, "--iters", "30"],
                             capture_output=True, text=True)
        lines = out.stdout.strip().splitlines()
        m = re.search(r"^\S+\s+.*?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", lines[-1]) if lines else None
        row.append(f"{label} {tf(float(m.group(1))) if m and out.returncode == 0 else float('nan'):7.1f}")
    for name, backend in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            row.append(f"{name} {tf(ms):7.1f}")
        except RuntimeError as e:
            row.append(f"{name} n/a ({str(e).splitlines()[0][:40]})")
    print(f"{'causal' if causal else 'none  '}  TFLOPS: " + "  ".join(row))
