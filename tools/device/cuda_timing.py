"""One way to time a GPU call from Python for the device scripts (decode_sdpa.py, flex_compare.py,
sdpa_dv.py): CUDA events around each run, after warm-up runs, and the median, so a figure from one
script compares with another's in the same call."""
import statistics

import torch


def median_ms(fn, iters=30, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
