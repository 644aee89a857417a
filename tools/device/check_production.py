"""Writes a production-size attention output (torch SDPA on the GPU) and times `flashcheck check`
on it end to end, every row (issue #11: (4,64,8192,128) bf16, causal and not, in < 10 s).

usage: check_production.py FLASHCHECK_BINARY B,H,S,D[,causal][,f32|f16] ... [--oracle gpu] [--dir /tmp] [--backward]
Each file is written with safetensors (q, k, v, o in bf16 unless f32 or f16 is named; causal metadata bottom_right, which is
top-left as well when Sq = Skv), then `check --max-rows S --oracle ORACLE --timings` runs under `time` (seconds per phase printed).
--backward: the file also carries do (standard normal) and SDPA's dq, dk, dv, and the check judges
them too (issue 23: every row of (4,16,8192,128) checked in < 30 s end to end).
"""
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

fc = sys.argv[1]
args = [a for a in sys.argv[2:] if not a.startswith("--")]
oracle = "gpu"
if "--oracle" in sys.argv:
    oracle = sys.argv[sys.argv.index("--oracle") + 1]
    args = [a for a in args if a != oracle]
folder = sys.argv[sys.argv.index("--dir") + 1] if "--dir" in sys.argv else "/tmp"
args = [a for a in args if a != folder]
backward = "--backward" in sys.argv
for spec in args:
    parts = spec.split(",")
    b, h, s, d = map(int, parts[:4])
    causal = "causal" in parts[4:]
    dtype = {"f32": torch.float32, "f16": torch.float16}.get(next((x for x in parts[4:] if x != "causal"), ""), torch.bfloat16)
    torch.manual_seed(1)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=backward) for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    tensors = {"q": q.detach().cpu(), "k": k.detach().cpu(), "v": v.detach().cpu(), "o": o.detach().contiguous().cpu()}
    if backward:
        do = torch.randn_like(o)
        o.backward(do)
        tensors.update(do=do.cpu(), dq=q.grad.cpu(), dk=k.grad.cpu(), dv=v.grad.cpu())
    path = os.path.join(folder, f"prod_{b}_{h}_{s}_{d}_{'causal' if causal else 'full'}_{str(dtype)[6:]}.safetensors")
    t0 = time.time()
    save_file(tensors, path, metadata={"causal": "bottom_right" if causal else "none"})
    written = time.time() - t0
    del q, k, v, o, tensors
    torch.cuda.empty_cache()
    t0 = time.time()
    limit = float(os.environ.get("CHECK_TIMEOUT", "1800"))
    try:
        r = subprocess.run([fc, "check", path, "--max-rows", str(s), "--oracle", oracle, "--timings"], capture_output=True,
                           text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"{spec}: check --oracle {oracle} every row: still running after {limit:.0f} s (CHECK_TIMEOUT), stopped")
        os.remove(path)
        continue
    took = time.time() - t0
    print(f"{spec}: file {os.path.getsize(path) / 1e9:.2f} GB written in {written:.1f} s; "
          f"check --oracle {oracle} every row: rc={r.returncode} in {took:.1f} s")
    print("\n".join(r.stdout.splitlines()[:14 if not backward else 40]))
    print("\n".join(line for line in r.stderr.splitlines() if line.startswith("timing:")))
    if r.returncode not in (0, 1):
        print(r.stderr[-2000:])
    os.remove(path)
