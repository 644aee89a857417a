#!/usr/bin/env python3
"""Time torch's CPU fp64 scaled_dot_product_attention on given shapes with all cores.

The yardstick for flashcheck's fp64 oracle (issue 11): same shapes, same FLOP count (4·Sq·Skv·D
per head, causal counts the visible query-key pairs only), same cores. Inputs are random normals
(never zeros); the time is the median of --runs runs after --warmup runs.

    python3 bench/torch_cpu_sdpa.py --shapes "1,4,4096,128;1,4,4096,128,causal" [--threads N] [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse_shapes(spec):
    out = []
    for one in filter(None, spec.split(";")):
        f = one.split(",")
        if len(f) not in (4, 5) or (len(f) == 5 and f[4] != "causal"):
            sys.exit(f"bad shape '{one}': expected B,H,S,D[,causal]")
        out.append((int(f[0]), int(f[1]), int(f[2]), int(f[3]), len(f) == 5))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1,4,4096,128")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", help="also write the results as JSON to this path")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.cpu.get_cpu_capability()} kernels")
    results = []
    gen = torch.Generator().manual_seed(1)
    for b, h, s, d, causal in parse_shapes(a.shapes):
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.float64, generator=gen) for _ in range(3))
        pairs = s * (s + 1) // 2 if causal else s * s
        flops = 4.0 * b * h * pairs * d
        times = []
        for i in range(a.warmup + a.runs):
            t0 = time.perf_counter()
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(t)
        assert torch.isfinite(o).all(), "non-finite SDPA output"
        med = statistics.median(times)
        r = {"shape": f"{b},{h},{s},{d}" + (",causal" if causal else ""), "threads": a.threads,
             "median_s": med, "min_s": min(times), "gflops": flops / med * 1e-9}
        results.append(r)
        print(f"torch_sdpa_f64 {r['shape']:>22}  median {med * 1e3:9.2f} ms  {r['gflops']:8.1f} GFLOPS")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
