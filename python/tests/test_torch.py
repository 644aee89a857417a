"""The torch side (skipped, saying so, where torch is not installed): tensors in bf16, f16 and f32 go
to the judge as their own bits, and fuzz hands a torch kernel tensors on the asked device."""
import numpy as np
import pytest

import flashcheck
import kernels
from conftest import seed_for

try:
    import torch
except ImportError:
    torch = None

# Each test is collected and reported skipped (never passed) without torch; ctest reads the reason.
pytestmark = pytest.mark.skipif(torch is None, reason="torch is not installed (optional; apt-get install python3-torch)")


def attention(q, k, v, p, alignment=None):
    """softmax(q k^T scale) v computed in float64 torch, rounded to the inputs' dtype at the end."""
    g = p.heads_q // p.heads_kv
    Q, K, V = q.double(), k.double().repeat_interleave(g, dim=1), v.double().repeat_interleave(g, dim=1)
    mask = torch.from_numpy(kernels.visible(p, alignment or p.causal)).to(q.device)
    s = (Q @ K.transpose(-1, -2) * p.scale).masked_fill(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(dim=-1, keepdim=True)
    seen = l > 0
    o = torch.where(seen, (e @ V) / torch.where(seen, l, torch.ones_like(l)), torch.zeros_like(e @ V))
    lse = torch.where(seen[..., 0], (torch.log(torch.where(seen, l, torch.ones_like(l))) + m)[..., 0],
                      torch.full_like(l[..., 0], float("-inf")))
    return o.to(q.dtype), lse.float()


@pytest.mark.parametrize("name", ["bf16", "f16", "f32"])
def test_check_takes_torch_tensors(name):
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]
    gen = torch.Generator().manual_seed(seed_for(1) % 2**63)
    q = torch.randn(2, 4, 37, 64, generator=gen).to(dtype)
    k = torch.randn(2, 2, 45, 64, generator=gen).to(dtype)
    v = torch.randn(2, 2, 45, 64, generator=gen).to(dtype)
    p = flashcheck.Problem(2, 4, 2, 37, 45, 64, 64, causal="bottom_right", dtype=name)
    o, lse = attention(q, k, v, p)
    r = flashcheck.check(q, k, v, o, lse, causal="bottom_right")
    assert r, str(r)
    assert not flashcheck.check(q, k, v, o, lse, causal="top_left")
    if dtype == torch.bfloat16:
        # The bits the judge saw are the tensor's own: the same verdict from numpy uint16 bits.
        bits = [t.view(torch.int16).numpy().view(np.uint16) for t in (q, k, v, o)]
        assert str(flashcheck.check(*bits, lse.numpy(), causal="bottom_right")) == str(r)


def test_torch_dtypes_are_never_converted():
    q = torch.randn(1, 1, 4, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="torch.float64"):
        flashcheck.check(q, q, q, q)
    x = torch.randn(1, 1, 4, 16).to(torch.bfloat16)
    with pytest.raises(TypeError, match="LSE must be float32"):
        flashcheck.check(x, x, x, x, torch.zeros(1, 1, 4, dtype=torch.float64))


def test_make_inputs_as_tensors_are_the_numpy_bits():
    p = flashcheck.Problem.parse("b=1 hq=2 hkv=1 sq=7 skv=9 dqk=16 dv=16 dtype=bf16")
    tq, tk, tv = flashcheck.make_inputs(p, "normal", seed_for(2), backend="torch", device="cpu")
    nq, nk, nv = flashcheck.make_inputs(p, "normal", seed_for(2))
    assert tq.dtype == torch.bfloat16 and tq.shape == (1, 2, 7, 16)
    assert np.array_equal(tk.view(torch.int16).numpy().view(np.uint16), nk)


def test_fuzz_a_torch_kernel():
    r = flashcheck.fuzz(attention, cases=20, seed=seed_for(3), max_seq=48, backend="torch", device="cpu",
                        verbose=False)
    assert r and r.passed == 20, str(r)
    bad = flashcheck.fuzz(lambda q, k, v, p: attention(q, k, v, p, alignment="top_left"), cases=20,
                          seed=seed_for(4), max_seq=48, backend="torch", device="cpu", causal="bottom_right",
                          verbose=False)
    assert not bad
    p = bad.failures[0].problem
    assert p.seq_q != p.seq_kv and p.seq_q + p.seq_kv <= 4, p
    assert "backend='torch'" in bad.failures[0].repro


def test_bshd_layout_in_fuzz():
    def bshd_kernel(q, k, v, p):  # receives [B, S, H, D], returns o in the same layout
        o, lse = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), p)
        return o.transpose(1, 2), lse

    r = flashcheck.fuzz(bshd_kernel, cases=10, seed=seed_for(5), max_seq=40, backend="torch", device="cpu",
                        layout="bshd", verbose=False)
    assert r, str(r)
