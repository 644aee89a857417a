"""flashcheck.check and flashcheck.reference on problem model 2's keywords. Every keyword is shown to
matter: reference() agrees with an independent numpy statement of the semantics (variant_oracle),
which differs from the same inputs without the keyword, and check() passes the right output and
fails the output of a kernel that ignores the keyword (or follows another convention)."""

import numpy as np
import pytest

import flashcheck
import variant_oracle as vo
from conftest import seed_for

D = "dqk=32 dv=32"
DENSE = f"b=2 hq=4 hkv=2 sq=37 skv=53 {D}"


def drawn(line, salt, dist="normal"):
    """(problem, q, k, v, check/reference keywords) as flashcheck draws them."""
    q, k, v, p = flashcheck.make_case(flashcheck.Problem.parse(line), dist, seed_for(salt))
    return p, q, k, v, p.keywords()


def as_checked(p):
    """The problem a report states for p's tensors: a block table is data (how it was drawn is not in
    it), and fp8 inputs' output dtype is o's, explicit."""
    c = flashcheck.Problem.parse(p.line)
    c.page_order = "identity"
    c._out_dtype = p.out_dtype if p.dtype in ("e4m3", "e5m2") else None
    return c


def oracle(p, q, k, v, kw):
    kw = {n: x for n, x in kw.items() if n not in ("dtype", "max_seqlen_q", "max_seqlen_k")}
    return vo.attention(q, k, v, kind=p.dtype, **kw)


def without(*names):
    return lambda p, kw: {n: x for n, x in kw.items() if n not in names}


def with_(**changes):
    return lambda p, kw: dict(kw, **{n: (f(p, kw) if callable(f) else f) for n, f in changes.items()})


def one_sequence(p, kw):
    """A kernel that runs the packed batch as one long sequence (ignores the boundaries)."""
    cu_q, cu_k = kw["cu_seqlens_q"], kw["cu_seqlens_k"]
    return dict(kw, cu_seqlens_q=np.array([0, cu_q[-1]], np.int32), cu_seqlens_k=np.array([0, cu_k[-1]], np.int32))


def pages_in_order(p, kw):
    """A kernel that reads the pages in storage order instead of through the block table."""
    t = kw["block_table"]
    return dict(kw, block_table=np.arange(t.size, dtype=np.int32).reshape(t.shape) % (t.max() + 1))


def whole_pages(p, kw):
    """A kernel that reads every slot of a sequence's last page (the unused ones hold NaN)."""
    lens = np.asarray(kw["cache_seqlens"])
    return dict(kw, cache_seqlens=(-(-lens // p.page_size) * p.page_size).astype(np.int32))


def first_batch_slopes(p, kw):
    """A kernel that reads slopes [Hq] from per-batch slopes [B, Hq]: batch 0's for every sequence."""
    s = np.asarray(kw["alibi_slopes"])
    return dict(kw, alibi_slopes=np.broadcast_to(s[0], s.shape).copy())


def far_from_1(name):
    """Descale factors of our own: drawn ones (2^U(-3, 3)) may be near 1, where ignoring them hardly shows."""
    return lambda rng, p: {name: rng.uniform(2, 4, (1,) if p.descale == "tensor" else (p.batch, p.heads_kv))
                           .astype(np.float32)}


# (what is tested, problem line, how a kernel that gets it wrong computes[, side tensors of our own]).
VARIANTS = [
    ("window", f"{DENSE} dtype=f32 window=7,3", without("window")),
    ("window left bound exclusive (cuDNN's count)", f"{DENSE} dtype=f32 window=7,3",
     with_(window=lambda p, kw: (kw["window"][0] - 1, kw["window"][1]))),
    ("window with causal", f"{DENSE} dtype=f32 causal=bottom_right window=5,-1", without("window")),
    ("softcap", f"{DENSE} dtype=f32 softcap=0.75", without("softcap")),
    ("alibi_slopes", f"{DENSE} dtype=f32 alibi=symmetric", without("alibi_slopes", "alibi")),
    ("alibi symmetric, not signed", f"{DENSE} dtype=f32 alibi=symmetric", with_(alibi="signed")),
    ("alibi signed, not symmetric", f"{DENSE} dtype=bf16 alibi=signed", with_(alibi="symmetric")),
    # Drawn per-batch slopes may be alike in both sequences (the geometric ones are); these are not.
    ("alibi slopes per batch", f"{DENSE} dtype=f32 alibi=symmetric slopes=batch", first_batch_slopes,
     lambda rng, p: {"alibi_slopes": np.exp2(rng.uniform(-5, 0, (p.batch, p.heads_q))).astype(np.float32)}),
    # Drawn sinks are mostly N(0, 4) against 53 keys: a few percent of the weight. These take a lot.
    ("sinks", f"b=2 hq=8 hkv=2 sq=37 skv=53 {D} dtype=f32 sinks=1", without("sinks"),
     lambda rng, p: {"sinks": rng.uniform(2, 5, p.heads_q).astype(np.float32)}),
    ("cu_seqlens_q, cu_seqlens_k", f"b=4 hq=4 hkv=2 layout=thd sq=9,1,30,0 skv=20,7,33,5 {D} dtype=f16",
     one_sequence),
    ("seqused_k", f"b=2 hq=4 hkv=2 sq=20 skv=53 used=11,40 {D} dtype=f32", without("seqused_k")),
    ("seqused_k in a packed batch", f"b=3 hq=2 hkv=1 layout=thd sq=9,3,12 skv=20,7,33 used=4,7,30 {D} dtype=f32",
     without("seqused_k")),
    ("block_table", f"b=3 hq=4 hkv=2 sq=6 skv=45,12,33 page=5 pages=shuffled {D} dtype=f32", pages_in_order),
    ("cache_seqlens", f"b=3 hq=4 hkv=2 sq=6 skv=44,12,33 page=5 pages=shared {D} dtype=f16", whole_pages),
    ("descale_q", f"{DENSE} dtype=e4m3 descale=head", without("descale_q"), far_from_1("descale_q")),
    ("descale_k", f"{DENSE} dtype=e4m3 descale=tensor", without("descale_k"), far_from_1("descale_k")),
    ("descale_v", f"{DENSE} dtype=e5m2 descale=head odtype=f16", without("descale_v"), far_from_1("descale_v")),
    ("layout bshd", f"b=2 hq=4 hkv=4 sq=30 skv=30 {D} dtype=f32 layout=bshd", with_(layout="bhsd")),
]


@pytest.mark.parametrize("what, line, wrong, side", [v + (None,) * (4 - len(v)) for v in VARIANTS],
                         ids=[v[0] for v in VARIANTS])
def test_reference_is_the_semantics_and_check_tells_a_kernel_that_ignores_it(what, line, wrong, side):
    salt = 100 + [v[0] for v in VARIANTS].index(what)
    p, q, k, v, kw = drawn(line, salt)
    if side:
        kw.update(side(np.random.default_rng(seed_for(salt)), p))
    o, lse = flashcheck.reference(q, k, v, **kw)
    want_o, want_lse = oracle(p, q, k, v, kw)
    np.testing.assert_allclose(o, want_o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)

    bad_kw = wrong(p, kw)
    bad_o, bad_lse = oracle(p, q, k, v, bad_kw)
    if bad_kw.get("layout") != kw.get("layout"):  # computed in another layout, written into this one's buffer
        bad_o, bad_lse = bad_o.reshape(want_o.shape), bad_lse.reshape(want_lse.shape)
    # The variant matters on these inputs (else the rest would prove nothing).
    differs = np.abs(np.nan_to_num(bad_o - want_o, nan=1.0))
    assert differs.max() > 0.05, f"{what}: the wrong computation is no different here"

    report = flashcheck.check(q, k, v, vo.narrow(want_o, p.out_dtype), want_lse.astype(np.float32), **kw)
    assert report, f"{what}: the right output fails\n{report}"
    assert report.problem == as_checked(p)
    report = flashcheck.check(q, k, v, vo.narrow(bad_o, p.out_dtype), bad_lse.astype(np.float32), **kw)
    assert not report, f"{what}: the wrong output passes\n{report}"


# ---- Properties of the keywords (issue 20's): each a second statement of what a keyword means.

def test_window_size_is_window_and_max_seqlen_is_an_upper_bound():
    p, q, k, v, kw = drawn(f"b=3 hq=4 hkv=2 layout=thd sq=9,1,30 skv=20,7,33 {D} dtype=f32 window=3,5", 201)
    o, lse = flashcheck.reference(q, k, v, **kw)
    fa = dict(kw, window_size=kw.pop("window"))  # FlashAttention's name
    o2, lse2 = flashcheck.reference(q, k, v, **fa)
    assert np.array_equal(o, o2, equal_nan=True) and np.array_equal(lse, lse2, equal_nan=True)
    assert not np.allclose(np.nan_to_num(o), np.nan_to_num(flashcheck.reference(q, k, v, **kw)[0]))  # no window
    with pytest.raises(TypeError, match="window_size"):
        flashcheck.reference(q, k, v, window=(3, 5), **fa)
    assert (kw["max_seqlen_q"], kw["max_seqlen_k"]) == (30, 33)
    flashcheck.reference(q, k, v, **dict(fa, max_seqlen_q=64, max_seqlen_k=33))  # a bound, not the longest
    with pytest.raises(ValueError, match="max_seqlen_q is 29 but sequence 2 has 30 queries"):
        flashcheck.reference(q, k, v, **dict(fa, max_seqlen_q=29))
    with pytest.raises(ValueError, match="max_seqlen_k is 32 but sequence 2 has 33 keys"):
        flashcheck.check(q, k, v, o2.astype(np.float32), **dict(fa, max_seqlen_k=32))


def test_alibi_lse_convention_is_declared():
    # FlashAttention 2's causal ALiBi adds slope*j instead of -slope*|i + d - j|: the same O, an LSE
    # larger by slope*(i + d). Judged strictly under the declared convention, never guessed.
    p, q, k, v, kw = drawn(f"b=2 hq=4 hkv=2 sq=20 skv=31 {D} dtype=f32 causal=bottom_right alibi=symmetric", 202)
    o, lse = flashcheck.reference(q, k, v, **kw)
    d = p.seq_kv - p.seq_q
    shifted = lse + np.asarray(kw["alibi_slopes"], np.float64)[None, :, None] * (np.arange(p.seq_q) + d)
    o32 = o.astype(np.float32)
    assert flashcheck.check(q, k, v, o32, lse.astype(np.float32), **kw)
    assert flashcheck.check(q, k, v, o32, shifted.astype(np.float32), **kw).failed == ["lse"]
    assert flashcheck.check(q, k, v, o32, shifted.astype(np.float32), alibi_lse="key_offset", **kw)
    assert flashcheck.check(q, k, v, o32, lse.astype(np.float32), alibi_lse="key_offset", **kw).failed == ["lse"]


def test_a_paged_cache_is_its_keys_wherever_its_pages_lie():
    p, q, k, v, kw = drawn(f"b=3 hq=4 hkv=2 sq=7 skv=45,12,33 page=5 pages=shuffled {D} dtype=bf16", 203)
    o, lse = flashcheck.reference(q, k, v, **kw)
    table, lens = kw["block_table"], kw["cache_seqlens"]
    # The same keys as a dense cache [B, Hkv, S, D] whose sequences use cache_seqlens of them; the
    # slots past them hold NaN, never read.
    dense = [np.full((p.batch, p.heads_kv, 45, x.shape[-1]), 0x7FC0, np.uint16) for x in (k, v)]
    for b in range(p.batch):
        for j in range(lens[b]):
            for x, y in zip(dense, (k, v)):
                x[b, :, j] = y[table[b][j // p.page_size], j % p.page_size]
    plain = {n: x for n, x in kw.items() if n not in ("block_table", "cache_seqlens")}
    o2, lse2 = flashcheck.reference(q, *dense, seqused_k=lens, **plain)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
    # Pages moved anywhere, the table following them: bitwise the same.
    perm = np.random.default_rng(seed_for(203)).permutation(k.shape[0])
    moved = [np.empty_like(x) for x in (k, v)]
    for x, y in zip(moved, (k, v)):
        x[perm] = y
    o3, lse3 = flashcheck.reference(q, *moved, **dict(kw, block_table=perm[table].astype(np.int32)))
    assert np.array_equal(o, o3) and np.array_equal(lse, lse3)
    bits = flashcheck.float32_to_bf16(o.astype(np.float32))
    assert flashcheck.check(q, *moved, bits, lse.astype(np.float32), **dict(kw, block_table=perm[table]))
    # A NaN in a slot a sequence uses is an input the check refuses, by name and place.
    # Its place is given in the logical layout: [sequence, KV head, key, dim].
    poisoned = k.copy()
    poisoned[table[2][6 // p.page_size], 6 % p.page_size, 1, 3] = 0x7FC0
    with pytest.raises(flashcheck.FlashcheckError, match=r"input 'k' holds NaN at \[2,1,6,3\]"):
        flashcheck.check(q, poisoned, v, bits, **kw)


def test_bshd_and_strided_views_are_the_same_data():
    p, q, k, v, kw = drawn(f"b=2 hq=4 hkv=2 sq=19 skv=26 {D} dtype=f16 window=6,0 softcap=5", 204)
    o, lse = flashcheck.reference(q, k, v, **kw)
    t = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    o2, lse2 = flashcheck.reference(t(q), t(k), t(v), **dict(kw, layout="bshd"))
    assert np.array_equal(o, o2.transpose(0, 2, 1, 3)) and np.array_equal(lse, lse2)
    # Views of other memory, never copied: a wider buffer's columns, and BSHD as a transposed view.
    wide = np.zeros(q.shape[:3] + (q.shape[3] + 8,), q.dtype)
    wide[..., 4:4 + q.shape[3]] = q
    o3, _ = flashcheck.reference(wide[..., 4:4 + q.shape[3]], t(k).transpose(0, 2, 1, 3), v, **kw)
    assert np.array_equal(o, o3)
    o16 = o.astype(np.float16)
    a = flashcheck.check(q, k, v, o16, lse.astype(np.float32), **kw)
    b = flashcheck.check(t(q).transpose(0, 2, 1, 3), k, v, t(o16).transpose(0, 2, 1, 3), lse.astype(np.float32), **kw)
    assert a and str(a) == str(b)


def test_packed_padding_is_never_read():
    p, q, k, v, kw = drawn(f"b=2 hq=2 hkv=1 layout=thd sq=11,11 skv=17,17 {D} dtype=f32 causal=bottom_right", 205)
    o, lse = flashcheck.reference(q, k, v, **kw)
    rng = np.random.default_rng(seed_for(205))
    pad_q = np.concatenate([q, rng.standard_normal((3,) + q.shape[1:]).astype(np.float32)])
    pad_k, pad_v = (np.concatenate([x, np.full((4,) + x.shape[1:], np.nan, np.float32)]) for x in (k, v))
    o2, lse2 = flashcheck.reference(pad_q, pad_k, pad_v, **kw)
    assert np.array_equal(o2[:22], o) and np.array_equal(lse2[:, :22], lse)
    assert np.isnan(o2[22:]).all() and np.isnan(lse2[:, 22:]).all()  # no query's rows: no made-up value
    out = np.concatenate([o, rng.standard_normal((3,) + o.shape[1:])]).astype(np.float32)
    assert flashcheck.check(pad_q, pad_k, pad_v, out, lse2.astype(np.float32), **kw)


def test_a_packed_batch_is_its_sequences():
    p, q, k, v, kw = drawn(f"b=4 hq=4 hkv=2 layout=thd sq=9,0,30,1 skv=20,7,33,0 {D} dtype=bf16 alibi=signed "
                           "window=4,-1 sinks=1", 206)
    o, lse = flashcheck.reference(q, k, v, **kw)
    cu_q, cu_k = kw["cu_seqlens_q"], kw["cu_seqlens_k"]
    for b in range(p.batch):
        if cu_q[b] == cu_q[b + 1] or cu_k[b] == cu_k[b + 1]:
            continue  # a dense problem has at least one query and one key
        one = lambda x, cu: x[cu[b]:cu[b + 1]].transpose(1, 0, 2)[None]  # noqa: E731
        sub = {n: x for n, x in kw.items() if n not in ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")}
        ob, lb = flashcheck.reference(one(q, cu_q), one(k, cu_k), one(v, cu_k), **dict(sub, layout="bhsd"))
        assert np.array_equal(ob[0].transpose(1, 0, 2), o[cu_q[b]:cu_q[b + 1]]), b
        assert np.array_equal(lb[0], lse[:, cu_q[b]:cu_q[b + 1]]), b


def test_fp8_with_descale_1_is_the_bf16_path():
    p, q, k, v, kw = drawn(f"b=2 hq=4 hkv=2 sq=20 skv=31 {D} dtype=e4m3 descale=tensor", 207)
    ones = {n: np.ones(1, np.float32) for n in ("descale_q", "descale_k", "descale_v")}
    o, lse = flashcheck.reference(q, k, v, **dict(kw, **ones))
    as_bf16 = [flashcheck.float32_to_bf16(vo.fp8_values(x, "e4m3").astype(np.float32)) for x in (q, k, v)]
    plain = {n: x for n, x in kw.items() if not n.startswith("descale") and n != "dtype"}
    o2, lse2 = flashcheck.reference(*as_bf16, **plain)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
    assert not np.array_equal(o, flashcheck.reference(q, k, v, **kw)[0])  # the drawn descales do count


def test_a_sink_of_minus_inf_is_no_sink():
    p, q, k, v, kw = drawn(f"b=2 hq=4 hkv=2 sq=20 skv=31 {D} dtype=f32 causal=top_left", 208)
    o, lse = flashcheck.reference(q, k, v, **kw)
    o2, lse2 = flashcheck.reference(q, k, v, sinks=np.full(4, -np.inf, np.float32), **kw)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)


def test_nan_inputs_reach_the_rows_that_see_them():
    p, q, k, v, kw = drawn(f"b=1 hq=2 hkv=1 sq=12 skv=12 {D} dtype=f32 causal=bottom_right window=2,0", 209)
    bad = k.copy()
    bad[0, 0, 5, 7] = np.nan  # key 5: seen by queries 5, 6, 7 (window 2, causal)
    o, lse = flashcheck.reference(q, bad, v, **kw)
    rows = np.isnan(o).any(axis=-1)[0]
    assert (rows == np.isin(np.arange(12), [5, 6, 7])[None]).all(), rows
    with pytest.raises(flashcheck.FlashcheckError, match=r"input 'k' holds NaN at \[0,0,5,7\]"):
        flashcheck.check(q, bad, v, np.nan_to_num(o).astype(np.float32), **kw)
