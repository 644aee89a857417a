"""torch SDPA's backward passes (flash, cuDNN, efficient) timed on issue 23's shapes, bf16, for the
same call as bench/kernel_backward_bench: the backward alone (o.backward(dO) on a graph kept for
repeats), CUDA-event median, TFLOPS counted as 2.5x the forward's FLOPs over the visible pairs (the
convention of the issue's anchors). Shapes: B,H,S,D[,causal] separated by ';' (Sq = Skv, causal is
bottom-right = top-left there).

    python3 tools/device/sdpa_backward.py [SHAPES]
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_timing import median_ms  # noqa: E402

SHAPES = "1,16,4096,128;1,16,4096,128,causal;4,16,8192,128;4,16,8192,128,causal;1,16,4096,64;1,16,4096,64,causal"


def flops(b, h, s, d, causal):
    pairs = s * (s + 1) / 2 if causal else s * s
    return 2.0 * pairs * 2 * d * h * b


def main():
    shapes = sys.argv[1] if len(sys.argv) > 1 else SHAPES
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    print("%-26s " % "shape (bf16)" + " ".join("%16s" % n for n, _ in backends) + "   (bwd ms / TFLOPS)")
    for item in shapes.split(";"):
        f = item.split(",")
        b, h, s, d = (int(x) for x in f[:4])
        causal = len(f) > 4 and f[4] == "causal"
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
        cells = []
        for name, be in backends:
            try:
                with sdpa_kernel([be]):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    def step():
                        q.grad = k.grad = v.grad = None
                        o.backward(do, retain_graph=True)
                    ms = median_ms(step, iters=20, warmup=5)
                cells.append("%7.3f / %6.1f" % (ms, 2.5 * flops(b, h, s, d, causal) / ms / 1e9))
            except Exception as e:  # a backend that refuses the shape
                cells.append("%16s" % ("n/a: " + type(e).__name__)[:16])
            torch.cuda.empty_cache()
        print("%-26s " % item + " ".join(cells))


if __name__ == "__main__":
    main()
