"""flashcheck.fuzz over torch SDPA's backends (issue #12): which pass, and which causal alignment each
uses when Sq != Skv. torch's is_causal masks top-left (key j visible to query i iff j <= i), so
each backend is fuzzed declaring top_left, and once declaring bottom_right to show the difference.

usage: PYTHONPATH=python FLASHCHECK_LIB=.../libflashcheck.so python3 gpu/scripts/fuzz_sdpa.py [CASES]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcheck

cases = int(sys.argv[1]) if len(sys.argv) > 1 else 60
backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def kernel_for(backend):
    def run(q, k, v, p):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=p.causal != "none", scale=p.scale,
                                                  enable_gqa=p.heads_q != p.heads_kv)
    return run


rows = []
for name, be in backends.items():
    for declared in ("top_left", "bottom_right"):
        try:
            r = flashcheck.fuzz(kernel_for(be), cases=cases, seed=7, backend="torch", dtypes=["bf16", "f16"],
                                head_dims=[64, 128], causal=["none", declared], max_seq=300, lse_base=None,
                                dv_ne_dqk=False, name=f"sdpa_{name}_{declared}")
            first = str(r).strip().splitlines()[0] if r.failed else ""
            rows.append((name, declared, f"{r.cases} cases: {r.passed} passed, {r.failed} failed, {r.skipped} skipped {first[:160]}"))
        except Exception as e:  # a backend that refuses a shape raises: say so, keep going
            rows.append((name, declared, f"error: {type(e).__name__}: {str(e)[:200]}"))
print(f"\n{torch.cuda.get_device_name()} torch {torch.__version__}")
for row in rows:
    print("%-10s declared causal=%-13s %s" % row)
