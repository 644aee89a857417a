"""Attention kernels in numpy for the tests: one correct, and one per bug class that real kernels
ship. Each takes (q, k, v, problem) as flashcheck.fuzz hands them and returns (o, lse) in the
problem's dtype (bf16 as uint16 bits, rounded by the kernel itself)."""
import numpy as np

import flashcheck

TILE = 16  # KV tile of the blocked kernels


def widen(x, p):
    if p.dtype == "bf16":
        return flashcheck.bf16_to_float32(x).astype(np.float64)
    return np.asarray(x, dtype=np.float64)


def narrow(o, p):
    if p.dtype == "bf16":
        return flashcheck.float32_to_bf16(o.astype(np.float32))
    return o.astype(np.float32 if p.dtype == "f32" else np.float16)


def visible(p, alignment):
    """[Sq, Skv] mask: key j visible to query i."""
    i = np.arange(p.seq_q)[:, None]
    j = np.arange(p.seq_kv)[None, :]
    if alignment == "top_left":
        return j <= i
    if alignment == "bottom_right":
        return j <= i + p.seq_kv - p.seq_q
    return np.ones((p.seq_q, p.seq_kv), dtype=bool)


def _inputs(q, k, v, p):
    g = p.heads_q // p.heads_kv  # query head h reads KV head h // g
    return widen(q, p), np.repeat(widen(k, p), g, axis=1), np.repeat(widen(v, p), g, axis=1)


def _finish(acc, m, l, p, lse_scale=1.0):
    """O = acc / l and LSE = m + log l, with the empty-row convention (O = 0, LSE = -inf). A NaN sum
    (NaN or Inf in the inputs) is no empty row: it stays NaN, as the oracle's does."""
    seen = l != 0
    o = np.where(seen, acc / np.where(seen, l, 1.0), 0.0)
    lse = np.where(seen[..., 0], (m + np.log(np.where(seen, l, 1.0)))[..., 0], -np.inf)
    return narrow(o, p), (lse * lse_scale).astype(np.float32)


def reference(q, k, v, p, alignment=None):
    """softmax(q k^T scale) v in float64, all keys at once: the correct kernel."""
    Q, K, V = _inputs(q, k, v, p)
    s = np.where(visible(p, alignment or p.causal), Q @ K.transpose(0, 1, 3, 2) * p.scale, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(m == -np.inf, 0.0, m)  # rows with no visible key: keep exp(-inf - 0) = 0 (NaN and +inf stay)
    with np.errstate(invalid="ignore"):  # inf - inf: a row that sees an Inf input is NaN, as the oracle's
        e = np.exp(s - m)
    return _finish(e @ V, m, e.sum(axis=-1, keepdims=True), p)


def blocked(q, k, v, p, rescale=True, drop_tail=False):
    """FlashAttention's online softmax over KV tiles of TILE keys."""
    Q, K, V = _inputs(q, k, v, p)
    mask = visible(p, p.causal)
    shape = Q.shape[:3] + (1,)
    m = np.full(shape, -np.inf)
    l = np.zeros(shape)
    acc = np.zeros(Q.shape[:3] + (V.shape[3],))
    n_tiles = p.seq_kv // TILE if drop_tail else -(-p.seq_kv // TILE)
    for t in range(n_tiles):
        sl = slice(t * TILE, min((t + 1) * TILE, p.seq_kv))
        s = np.where(mask[:, sl], Q @ K[:, :, sl].transpose(0, 1, 3, 2) * p.scale, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        m_safe = np.where(m_new == -np.inf, 0.0, m_new)
        alpha = np.exp(m - m_safe)  # 0 while the row has seen nothing (m = -inf)
        e = np.exp(s - m_safe)
        l = alpha * l + e.sum(axis=-1, keepdims=True)
        acc = (alpha * acc if rescale else acc) + e @ V[:, :, sl]
        m = m_new
    if drop_tail:  # a kernel that never visits a tile divides 0 by 0, as its unguarded epilogue does
        with np.errstate(invalid="ignore", divide="ignore"):
            o = acc / l
            lse = (np.where(np.isfinite(m), m, 0.0) + np.log(l))[..., 0]
        return narrow(o, p), lse.astype(np.float32)
    return _finish(acc, np.where(m == -np.inf, 0.0, m), l, p)


def correct_blocked(q, k, v, p):
    return blocked(q, k, v, p)


def wrong_causal_alignment(q, k, v, p):
    """Masks top-left whatever the problem says: right only when Sq == Skv."""
    return reference(q, k, v, p, alignment="top_left" if p.causal == "bottom_right" else p.causal)


def dropped_tail_tile(q, k, v, p):
    """Loops over Skv // TILE tiles: the keys of a partial last tile never count."""
    return blocked(q, k, v, p, drop_tail=True)


def lse_base2(q, k, v, p):
    """Right O, LSE in log2 (an exp2 kernel keeps it so) without declaring it."""
    o, lse = reference(q, k, v, p)
    return o, (lse.astype(np.float64) / np.log(2.0)).astype(np.float32)


def missing_rescale(q, k, v, p):
    """Online softmax that rescales l but not the accumulator when the running max grows."""
    return blocked(q, k, v, p, rescale=False)


def variant_reference(q, k, v, p, **wrong):
    """Every variant of problem model 2, from the problem's fields and side tensors (p.keywords()),
    computed by the tests' own numpy statement of the semantics; `wrong` overrides keywords, to make
    a kernel that gets one of them wrong. Rows of no query (thd padding) are left 0; NaN elsewhere
    (NaN or Inf inputs) stays."""
    import variant_oracle

    kw = {n: x for n, x in p.keywords().items() if n not in ("dtype", "max_seqlen_q", "max_seqlen_k")}
    kw.update(wrong)
    o, lse = variant_oracle.attention(q, k, v, kind=p.dtype, **{n: x for n, x in kw.items() if x is not None})
    if p.layout == "thd":
        total = int(np.asarray(kw["cu_seqlens_q"])[-1])
        o[total:], lse[:, total:] = 0.0, 0.0
    return variant_oracle.narrow(o, p.out_dtype), lse.astype(np.float32)


def ignores_window(q, k, v, p):
    """Right but for the sliding window, which it never applies."""
    return variant_reference(q, k, v, p, window=None)


def ignores_sinks(q, k, v, p):
    return variant_reference(q, k, v, p, sinks=None)


def ignores_block_table(q, k, v, p):
    """Reads a paged cache's pages in storage order."""
    if p.block_table is None:
        return variant_reference(q, k, v, p)
    t = np.asarray(p.block_table)
    return variant_reference(q, k, v, p, block_table=np.arange(t.size).reshape(t.shape) % k.shape[0])
