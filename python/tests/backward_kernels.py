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


def widen(x, kind):
    return flashcheck.bf16_to_float32(x).astype(np.float64) if kind == "bf16" else np.asarray(x, np.float64)


def tile_gemm(q, k, v, do, p):
    """A correct backward that multiplies every pair, as a tile GEMM does (FlashAttention-2's, cuDNN's):
    plain bhsd problems, masks applied to the scores only. Masked pairs still enter dS = P∘(dP − D),
    dQ = dS·K, dK = dSᵀ·Q and dV = Pᵀ·dO as 0 times a value, so a NaN or Inf input that a masked
    pair meets reaches a gradient the oracle keeps finite (0·Inf = NaN): its gradients agree with the
    oracle's wherever no masked pair meets a non-finite value, which is where a backward campaign
    places one. Rows that see no key get P = 0 (the kernels' guard)."""
    kind, g = p.dtype, p.heads_q // p.heads_kv
    Q, dO = widen(q, kind), widen(do, p.out_dtype)
    K, V = (np.repeat(widen(x, kind), g, axis=1) for x in (k, v))
    i, j = np.arange(p.seq_q)[:, None], np.arange(p.seq_kv)[None, :]
    offset = p.seq_kv - p.seq_q if p.causal == "bottom_right" else 0
    visible = j <= i + offset if p.causal != "none" else np.ones((p.seq_q, p.seq_kv), bool)
    with np.errstate(all="ignore"):
        s = np.where(visible, Q @ np.swapaxes(K, -1, -2) * p.scale, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - np.where(np.isneginf(m), 0.0, m))  # a masked score's weight: exp(-inf - m) = 0, NaN if m is
        total = e.sum(-1, keepdims=True)
        P = e / np.where(total == 0, 1.0, total)
        dP = dO @ np.swapaxes(V, -1, -2)
        dS = P * (dP - np.sum(dO * (P @ V), -1, keepdims=True))
        dq = dS @ K * p.scale
        dk = (np.swapaxes(dS, -1, -2) @ Q * p.scale).reshape(p.batch, p.heads_kv, g, p.seq_kv, -1).sum(2)
        dv = (np.swapaxes(P, -1, -2) @ dO).reshape(p.batch, p.heads_kv, g, p.seq_kv, -1).sum(2)
    return rounded(p, dq, dk, dv)
