"""Problem model 2 written out once more in numpy, independently of flashcheck's C++ oracle: the
tests compare flashcheck.reference with it and build kernels' outputs (right and deliberately
wrong) from it. Straight from the README's statement: per sequence, s = scale*q.k (fp8: x*descale
first) -> softcap -> window/causal mask -> + ALiBi -> softmax with the sink logit in the
denominator; a row that sees no key has O = 0 and LSE = -inf."""
import numpy as np

import flashcheck


def fp8_values(bits, kind):
    """The exact values of fp8 bit patterns (OCP e4m3 "fn": no infinities, 0x7f/0xff NaN; e5m2:
    IEEE-like), decoded field by field."""
    b = np.asarray(bits).view(np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    mbits, bias = (3, 7) if kind == "e4m3" else (2, 15)
    e = (b & 0x7F) >> mbits
    m = (b & ((1 << mbits) - 1)).astype(np.float64) / (1 << mbits)
    x = np.where(e == 0, m * 2.0 ** (1 - bias), (1 + m) * np.exp2(e.astype(np.float64) - bias))
    if kind == "e4m3":
        x = np.where((b & 0x7F) == 0x7F, np.nan, x)
    else:
        x = np.where(e == 31, np.where(m == 0, np.inf, np.nan), x)
    return sign * x


def values(x, kind):
    """A tensor's exact values in float64, from flashcheck's numpy representation of `kind`."""
    if kind == "bf16":
        return flashcheck.bf16_to_float32(x).astype(np.float64)
    if kind in ("e4m3", "e5m2"):
        return fp8_values(x, kind)
    return np.asarray(x, dtype=np.float64)


def visible(sq, skv, causal, window):
    """[Sq, Skv]: key j visible to query i (window inclusive, -1 unbounded; causal caps right at 0)."""
    d = 0 if causal == "top_left" else skv - sq
    left, right = window
    if causal != "none":
        right = 0 if right == -1 else min(right, 0)
    i = np.arange(sq)[:, None] + d
    j = np.arange(skv)[None, :]
    seen = np.ones((sq, skv), dtype=bool)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    return seen, d


def sequence(Q, K, V, *, scale, causal="none", window=(-1, -1), softcap=0.0, alibi="none", slopes=None, sinks=None):
    """One sequence: Q [Hq, Sq, Dqk], K [Hkv, Skv, Dqk], V [Hkv, Skv, Dv] in float64 (dequantized).
    Returns O [Hq, Sq, Dv], LSE [Hq, Sq]."""
    hq, sq = Q.shape[:2]
    skv = K.shape[1]
    g = hq // K.shape[0]
    K, V = np.repeat(K, g, axis=0), np.repeat(V, g, axis=0)
    s = scale * (Q @ K.transpose(0, 2, 1))
    if softcap:
        s = softcap * np.tanh(s / softcap)
    seen, d = visible(sq, skv, causal, window)
    s = np.where(seen, s, -np.inf)
    if alibi != "none":
        i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
        dist = -np.abs(i + d - j) if alibi == "symmetric" else (j - i)
        s = s + np.asarray(slopes, dtype=np.float64)[:, None, None] * dist
    sink = np.full((hq, 1, 1), -np.inf) if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
    m = np.maximum(s.max(axis=-1, keepdims=True, initial=-np.inf), sink)
    m = np.where(m == -np.inf, 0.0, m)  # a row that sees nothing: exp(-inf - 0) = 0 (NaN, +inf stay: the row is NaN)
    e = np.exp(s - m)
    denom = e.sum(axis=-1, keepdims=True) + np.exp(sink - m)
    empty = ~seen.any(axis=-1)[None, :, None]
    o = np.where(empty, 0.0, (e @ V) / np.where(empty, 1.0, denom))
    lse = np.where(empty[..., 0], -np.inf, (m + np.log(np.where(empty, 1.0, denom)))[..., 0])
    return o, lse


def attention(q, k, v, *, kind, causal="none", scale=None, window=None, softcap=0.0, alibi="symmetric",
              alibi_slopes=None, sinks=None, layout="bhsd", cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
              block_table=None, cache_seqlens=None, descale_q=None, descale_k=None, descale_v=None):
    """What flashcheck.reference should return for these keyword arguments (numpy inputs only)."""
    Q, K, V = values(q, kind), values(k, kind), values(v, kind)
    dqk = Q.shape[-1]
    scale = 1.0 / np.sqrt(dqk) if scale is None else scale
    window = (-1, -1) if window is None else tuple(window)
    thd, paged = layout == "thd", block_table is not None
    # Per sequence: ([H, S, D] views of q, k, v), and where its O and LSE go.
    if thd:
        cu_q = np.asarray(cu_seqlens_q)
        batch = len(cu_q) - 1
        qs = [Q[cu_q[b]:cu_q[b + 1]].transpose(1, 0, 2) for b in range(batch)]
    else:
        batch = Q.shape[0]
        qs = [Q[b] if layout == "bhsd" else Q[b].transpose(1, 0, 2) for b in range(batch)]
    if paged:
        table, lens = np.asarray(block_table), np.asarray(cache_seqlens)
        ps = K.shape[1]

        def gather(C, b):  # [pages, ps, H, D] -> [H, lens[b], D]
            rows = [C[table[b][j // ps], j % ps] for j in range(lens[b])]
            return np.stack(rows, axis=1) if rows else np.zeros((C.shape[2], 0, C.shape[3]))
        ks = [gather(K, b) for b in range(batch)]
        vs = [gather(V, b) for b in range(batch)]
    elif thd:
        cu_k = np.asarray(cu_seqlens_k)
        ks = [K[cu_k[b]:cu_k[b + 1]].transpose(1, 0, 2) for b in range(batch)]
        vs = [V[cu_k[b]:cu_k[b + 1]].transpose(1, 0, 2) for b in range(batch)]
    else:
        ks = [K[b] if layout == "bhsd" else K[b].transpose(1, 0, 2) for b in range(batch)]
        vs = [V[b] if layout == "bhsd" else V[b].transpose(1, 0, 2) for b in range(batch)]
    if seqused_k is not None:
        ks = [x[:, :n] for x, n in zip(ks, seqused_k)]
        vs = [x[:, :n] for x, n in zip(vs, seqused_k)]
    hq, hkv = qs[0].shape[0], ks[0].shape[0]

    def descaled(x, d, b, per_q):
        if d is None:
            return x
        d = np.asarray(d, np.float64).reshape(-1)
        if d.size == 1:
            return x * d[0]
        d = np.asarray(d).reshape(batch, hkv)[b]
        heads = np.arange(x.shape[0]) // (hq // hkv) if per_q else np.arange(x.shape[0])
        return x * d[heads][:, None, None]

    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float64)
    one_scale = all(d is None or np.asarray(d).size == 1 for d in (descale_q, descale_k, descale_v))
    if not thd and not paged and seqused_k is None and one_scale and (slopes is None or slopes.ndim == 1):
        # A dense batch whose sequences share every side tensor: one sequence of B*H heads (b major,
        # so query head b*Hq + h still reads KV head b*Hkv + h // g), not a Python loop over B (wide
        # cases have thousands of batch entries).
        def merged(xs):
            return np.concatenate(xs, axis=0)
        tile = (lambda x: None if x is None else np.tile(np.asarray(x, np.float64), batch))
        ob, lb = sequence(descaled(merged(qs), descale_q, 0, True), descaled(merged(ks), descale_k, 0, False),
                          descaled(merged(vs), descale_v, 0, False), scale=scale, causal=causal, window=window,
                          softcap=softcap, alibi="none" if slopes is None else alibi, slopes=tile(slopes),
                          sinks=tile(sinks))
        o, lse = ob.reshape(batch, hq, *ob.shape[1:]), lb.reshape(batch, hq, -1)
        return (o if layout == "bhsd" else o.transpose(0, 2, 1, 3)), lse
    outs = []
    for b in range(batch):
        sl = None if slopes is None else (slopes[b] if slopes.ndim == 2 else slopes)
        outs.append(sequence(descaled(qs[b], descale_q, b, True), descaled(ks[b], descale_k, b, False),
                             descaled(vs[b], descale_v, b, False), scale=scale, causal=causal, window=window,
                             softcap=softcap, alibi="none" if slopes is None else alibi, slopes=sl, sinks=sinks))
    dv = V.shape[-1]
    if thd:
        o = np.full((Q.shape[0], hq, dv), np.nan)
        lse = np.full((hq, Q.shape[0]), np.nan)
        for b, (ob, lb) in enumerate(outs):
            o[cu_q[b]:cu_q[b + 1]] = ob.transpose(1, 0, 2)
            lse[:, cu_q[b]:cu_q[b + 1]] = lb
        return o, lse
    o = np.stack([ob for ob, _ in outs])
    lse = np.stack([lb for _, lb in outs])
    return (o if layout == "bhsd" else o.transpose(0, 2, 1, 3)), lse


def narrow(o, kind):
    """float64 O rounded to a kernel's output dtype (bf16 as uint16 bits)."""
    if kind == "bf16":
        return flashcheck.float32_to_bf16(o.astype(np.float32))
    return o.astype(np.float32 if kind == "f32" else np.float16)
