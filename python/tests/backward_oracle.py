"""The backward pass written out in numpy, in closed form, independently of flashcheck's C++ oracle:
the tests compare flashcheck.reference_backward with it and build broken gradients from its pieces.
Per sequence, from the forward's statement (variant_oracle.sequence): t = mask(softcap(scale*q.k)) +
ALiBi, P = softmax(t) with the sink in the denominator, O = P V; for the loss sum(dO * O):
  dV = P^T dO,  dP = dO V^T,  D = rowsum(dO * O),  dS = P (dP - D) * softcap'(s),
  dQ = scale dS K,  dK = scale dS^T Q,  dsink_h = -sum_rows P_sink D,
with GQA's dK, dV summed over each KV head's query group, and rows that see no key adding nothing."""
import numpy as np

import variant_oracle as vo


def sequence(Q, K, V, dO, *, scale, causal="none", window=(-1, -1), softcap=0.0, alibi="none", slopes=None,
             sinks=None):
    """One sequence in float64: Q [Hq, Sq, Dqk], K [Hkv, Skv, Dqk], V [Hkv, Skv, Dv], dO [Hq, Sq, Dv].
    Returns (dQ, dK, dV, dsinks [Hq], dS [Hq, Sq, Skv])."""
    hq, sq = Q.shape[:2]
    hkv, skv = K.shape[:2]
    g = hq // hkv
    Kr, Vr = np.repeat(K, g, axis=0), np.repeat(V, g, axis=0)
    s = scale * (Q @ Kr.transpose(0, 2, 1))
    if softcap:
        th = np.tanh(s / softcap)
        t, dcap = softcap * th, 1.0 - th * th
    else:
        t, dcap = s, np.ones_like(s)
    seen, d = vo.visible(sq, skv, causal, window)
    t = np.where(seen, t, -np.inf)
    if alibi != "none":
        i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
        dist = -np.abs(i + d - j) if alibi == "symmetric" else (j - i)
        t = t + np.asarray(slopes, np.float64)[:, None, None] * dist
    sink = np.full((hq, 1, 1), -np.inf) if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
    empty = ~seen.any(axis=-1)[None, :, None]  # [1, Sq, 1]
    m = np.maximum(t.max(axis=-1, keepdims=True, initial=-np.inf), sink)
    m = np.where(m == -np.inf, 0.0, m)
    e = np.where(seen, np.exp(t - m), 0.0)
    z = e.sum(axis=-1, keepdims=True) + np.exp(sink - m)
    P = np.where(empty, 0.0, e / np.where(empty, 1.0, z))
    p_sink = np.where(empty, 0.0, np.exp(sink - m) / np.where(empty, 1.0, z))  # [Hq, Sq, 1]
    O = P @ Vr
    dP = dO @ Vr.transpose(0, 2, 1)
    D = (dO * O).sum(axis=-1, keepdims=True)
    dS = P * (dP - D) * dcap
    dQ = scale * (dS @ Kr)
    dK = (scale * (dS.transpose(0, 2, 1) @ Q)).reshape(hkv, g, skv, Q.shape[-1]).sum(axis=1)
    dV = (P.transpose(0, 2, 1) @ dO).reshape(hkv, g, skv, V.shape[-1]).sum(axis=1)
    dsinks = -(p_sink * D).sum(axis=(1, 2))
    return dQ, dK, dV, dsinks, dS


def backward(q, k, v, do, *, kind, causal="none", scale=None, window=None, softcap=0.0, alibi="symmetric",
             alibi_slopes=None, sinks=None, layout="bhsd", cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
             block_table=None, cache_seqlens=None, descale_q=None, descale_k=None, descale_v=None, out_kind=None):
    """What flashcheck.reference_backward should return for these keyword arguments (numpy inputs):
    (dq, dk, dv) in the inputs' shapes and layout, then dsinks when sinks are given. Elements no
    sequence reads are 0; a paged slot several sequences read gets the sum of their gradients."""
    Q, K, V = vo.values(q, kind), vo.values(k, kind), vo.values(v, kind)
    dO = vo.values(do, out_kind or ("bf16" if kind in ("e4m3", "e5m2") else kind))
    scale = 1.0 / np.sqrt(Q.shape[-1]) if scale is None else scale
    window = (-1, -1) if window is None else tuple(window)
    thd, paged = layout == "thd", block_table is not None
    # Per sequence b: the [H, S, D] views of q, dO and of the keys it uses, where their rows live.
    if thd:
        cu_q = np.asarray(cu_seqlens_q)
        batch = len(cu_q) - 1
        q_rows = [np.arange(cu_q[b], cu_q[b + 1]) for b in range(batch)]
        take_q = lambda X, b: X[q_rows[b]].transpose(1, 0, 2)  # noqa: E731
    else:
        batch = Q.shape[0]
        take_q = lambda X, b: X[b] if layout == "bhsd" else X[b].transpose(1, 0, 2)  # noqa: E731
    if paged:
        table, lens = np.asarray(block_table), np.asarray(cache_seqlens)
        ps = K.shape[1]
        key_slots = [[(table[b][j // ps], j % ps) for j in range(lens[b])] for b in range(batch)]
    elif thd:
        cu_k = np.asarray(cu_seqlens_k)
        key_slots = [list(range(cu_k[b], cu_k[b + 1])) for b in range(batch)]
    else:
        key_slots = [list(range(K.shape[2] if layout == "bhsd" else K.shape[1])) for _ in range(batch)]
    if seqused_k is not None:
        key_slots = [slots[:n] for slots, n in zip(key_slots, seqused_k)]
    hq = Q.shape[-2] if (thd or layout == "bshd") else Q.shape[1]
    hkv = K.shape[-2] if (thd or paged or layout == "bshd") else K.shape[1]

    def keys(X, b):  # [H, n, D] of the keys sequence b uses
        if paged:
            rows = [X[p, s] for p, s in key_slots[b]]
        elif thd or layout == "bshd":
            rows = [X[j] if thd else X[b, j] for j in key_slots[b]]
        else:
            rows = [X[b, :, j] for j in key_slots[b]]
        return np.stack(rows, axis=1) if rows else np.zeros((X.shape[-2] if (paged or thd or layout == "bshd")
                                                             else X.shape[1], 0, X.shape[-1]))

    def add_keys(G, b, grad):  # grad [H, n, D] added where sequence b's keys live
        for n, j in enumerate(key_slots[b]):
            if paged:
                G[j[0], j[1]] += grad[:, n]
            elif thd:
                G[j] += grad[:, n]
            elif layout == "bshd":
                G[b, j] += grad[:, n]
            else:
                G[b, :, j] += grad[:, n]

    def descale(d, b, heads, per_q):
        if d is None:
            return 1.0
        d = np.asarray(d, np.float64).reshape(-1)
        if d.size == 1:
            return d[0]
        d = d.reshape(batch, hkv)[b]
        return d[np.arange(heads) // (hq // hkv) if per_q else np.arange(heads)][:, None, None]

    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float64)
    dq, dk, dv = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    ds_total = np.zeros(hq)
    for b in range(batch):
        sl = None if slopes is None else (slopes[b] if slopes.ndim == 2 else slopes)
        gq, gk, gv, gs, _ = sequence(
            take_q(Q, b) * descale(descale_q, b, hq, True), keys(K, b) * descale(descale_k, b, hkv, False),
            keys(V, b) * descale(descale_v, b, hkv, False), take_q(dO, b), scale=scale, causal=causal, window=window,
            softcap=softcap, alibi="none" if slopes is None else alibi, slopes=sl, sinks=sinks)
        if thd:
            dq[q_rows[b]] = gq.transpose(1, 0, 2)
        elif layout == "bshd":
            dq[b] = gq.transpose(1, 0, 2)
        else:
            dq[b] = gq
        add_keys(dk, b, gk)
        add_keys(dv, b, gv)
        ds_total += gs
    return (dq, dk, dv) + ((ds_total,) if sinks is not None else ())
