"""Backward kernels in numpy for flashcheck.fuzz(backward=True): fn(q, k, v, do, problem) returning
the gradients (bf16 as uint16 bits, rounded by the kernel itself). One correct (the fp64 oracle's
gradients rounded) and one per bug class real backward kernels ship; each broken one is correct
except for one gradient, so a verdict that names another gradient is wrong too."""
import numpy as np

import flashcheck


def narrow(x, kind):
    if kind == "bf16":
        return flashcheck.float32_to_bf16(np.asarray(x).astype(np.float32))
    return np.asarray(x).astype(np.float32 if kind == "f32" else np.float16)


def grad_kind(p):
    return p.out_dtype if p.dtype in ("e4m3", "e5m2") else p.dtype


def oracle(q, k, v, do, p, **wrong):
    """The fp64 gradients (dq, dk, dv[, dsinks]) of the problem, with keywords overridden by `wrong`."""
    kw = p.keywords()
    kw.update(wrong)
    return flashcheck.reference_backward(q, k, v, do, **kw)


def rounded(p, dq, dk, dv):
    return tuple(narrow(g, grad_kind(p)) for g in (dq, dk, dv))


def correct(q, k, v, do, p):
    return rounded(p, *oracle(q, k, v, do, p)[:3])


def correct_with_forward(q, k, v, do, p):
    """(o, lse, dq, dk, dv): the forward output beside the gradients, both the oracle's, rounded."""
    o, lse = flashcheck.reference(q, k, v, **p.keywords())
    return (narrow(o, p.out_dtype), lse.astype(np.float32)) + correct(q, k, v, do, p)


def wrong_forward(q, k, v, do, p):
    """Correct gradients beside an o that is half what it should be: the forward fails alone."""
    o, lse = flashcheck.reference(q, k, v, **p.keywords())
    return (narrow(o * 0.5, p.out_dtype), lse.astype(np.float32)) + correct(q, k, v, do, p)


def dk_without_scale(q, k, v, do, p):
    """dK = dSᵀ·Q without the softmax scale that dS·K's chain rule carries (scores are scale·q·k)."""
    dq, dk, dv = oracle(q, k, v, do, p)[:3]
    return rounded(p, dq, dk / p.scale, dv)


def dv_of_interleaved_heads(q, k, v, do, p):
    """dV summed over the wrong query heads under GQA: query head h counted for KV head h % Hkv (an
    interleaved mapping) instead of h // (Hq / Hkv). Right for MHA and for one KV head."""
    dq, dk, _ = oracle(q, k, v, do, p)[:3]
    g = p.heads_q // p.heads_kv
    # Each query head's own dV: the oracle on KV heads repeated to one per query head (plain bhsd).
    per_head = oracle(q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1), do, p)[2]
    dv = np.zeros(v.shape)
    for h in range(p.heads_q):
        dv[:, h % p.heads_kv] += per_head[:, h]
    return rounded(p, dq, dk, dv)


def dq_ignores_causal(q, k, v, do, p):
    """dQ from scores with no causal mask (dK, dV right): a backward that drops the mask in its dQ loop."""
    _, dk, dv = oracle(q, k, v, do, p)[:3]
    return rounded(p, oracle(q, k, v, do, p, causal="none")[0], dk, dv)
