"""flashcheck.reference_backward and flashcheck.check_backward. reference_backward agrees with an
independent numpy closed form (backward_oracle) on every variant and layout, and with central finite
differences of an independent numpy forward (variant_oracle); check_backward passes the oracle's own
gradients rounded to the kernel's dtype and fails deliberately broken ones (a scaled dK, a dQ missing
one key, swapped KV heads under GQA, one NaN); bad input is refused by name. Inputs are drawn fresh
from this run's seed (FLASHCHECK_SEED, printed)."""
import numpy as np
import pytest

import backward_oracle as bo
import flashcheck
import variant_oracle as vo
from conftest import seed_for

# Every variant and layout the forward takes: GQA, Dv != Dqk, both causal alignments, windows,
# softcap, ALiBi of both forms (per batch too), sinks, bshd, packed batches with empty sequences,
# seqused, paged caches with pages shared between sequences, fp8 with per-head descales.
LINES = [
    "b=2 hq=4 hkv=2 sq=9 skv=13 dqk=16 dv=8 causal=bottom_right dtype=f32",
    "b=2 hq=4 hkv=2 sq=13 skv=9 dqk=16 dv=16 causal=top_left dtype=bf16 window=3,2 softcap=5 alibi=symmetric "
    "sinks=1 layout=bshd",
    "b=3 hq=4 hkv=2 sq=5,0,17 skv=9,3,40 dqk=16 dv=16 causal=bottom_right dtype=f16 window=8,0 alibi=signed "
    "slopes=batch sinks=1 layout=thd",
    "b=3 hq=2 hkv=1 sq=6 skv=45,12,33 page=5 pages=shared dqk=16 dv=16 dtype=f32 softcap=3",
    "b=2 hq=4 hkv=2 sq=20 skv=31 dqk=16 dv=16 dtype=e4m3 descale=head",
    "b=3 hq=4 hkv=2 layout=thd sq=9,1,30 skv=20,7,33 dqk=16 dv=16 dtype=f32 used=10,7,0",
]


def drawn(line, salt):
    """(problem, q, k, v, keywords) as flashcheck draws them, and a fresh dO in o's dtype (and sinks)."""
    q, k, v, p = flashcheck.make_case(flashcheck.Problem.parse(line), "normal", seed_for(salt))
    rng = np.random.default_rng(seed_for(salt + 1))
    do = narrow(rng.standard_normal(p.o_shape), p.out_dtype)
    kw = p.keywords()
    if p.has_sinks:  # logits near the scores' own, so the sinks take weight and have a gradient to compare
        kw["sinks"] = rng.standard_normal(p.heads_q).astype(np.float32)
    return p, q, k, v, kw, do


def narrow(x, kind):
    """float64 values rounded to a tensor of `kind` (bf16 as uint16 bits)."""
    return vo.narrow(np.asarray(x, np.float64), kind)


def oracle_keywords(kw):
    return {n: x for n, x in kw.items() if n not in ("dtype", "max_seqlen_q", "max_seqlen_k")}


def rel_error(got, want):
    scale = max(np.max(np.abs(want)) if want.size else 0.0, 1e-300)
    return np.max(np.abs(got - want)) / scale if want.size else 0.0


@pytest.mark.parametrize("line", LINES)
def test_reference_backward_is_the_closed_form(line):
    p, q, k, v, kw, do = drawn(line, 2501 + LINES.index(line))
    got = flashcheck.reference_backward(q, k, v, do, **kw)
    want = bo.backward(q, k, v, do, kind=p.dtype, out_kind=p.out_dtype, **oracle_keywords(kw))
    names = ("dq", "dk", "dv", "dsinks")
    assert len(got) == len(want) == (4 if p.has_sinks else 3)
    for name, g, w, like in zip(names, got, want, (q, k, v, None)):
        assert g.dtype == np.float64
        if like is not None:
            assert g.shape == tuple(like.shape), name
        assert np.max(np.abs(w)) > 1e-3, f"{name}: the closed form is all but zero; nothing was compared"
        assert rel_error(g, w) < 1e-12, f"{name} of {line}: {rel_error(g, w)}"


def test_reference_backward_matches_finite_differences():
    """Central differences of sum(dO * O) through variant_oracle's forward (no gradient formula at all)
    at random elements of q, k, v and at every sink, on a problem with every score modifier."""
    line = "b=2 hq=4 hkv=2 sq=5 skv=7 dqk=8 dv=8 causal=bottom_right dtype=f32 window=3,1 softcap=4 " \
           "alibi=symmetric sinks=1"
    p, q, k, v, kw, do = drawn(line, 2510)
    dq, dk, dv, dsinks = flashcheck.reference_backward(q, k, v, do, **kw)
    okw = oracle_keywords(kw)
    X = {"q": q.astype(np.float64), "k": k.astype(np.float64), "v": v.astype(np.float64),
         "sinks": np.asarray(kw["sinks"], np.float64)}

    def loss(x):
        o, _ = vo.attention(x["q"], x["k"], x["v"], kind="f32", **dict(okw, sinks=x["sinks"]))
        return float(np.sum(do.astype(np.float64) * o))

    rng = np.random.default_rng(seed_for(2511))
    for name, grad in (("q", dq), ("k", dk), ("v", dv), ("sinks", dsinks)):
        flat = grad.reshape(-1)
        picks = range(flat.size) if name == "sinks" else rng.choice(flat.size, 25, replace=False)
        for e in picks:
            h = 1e-5
            up, down = {n: a.copy() for n, a in X.items()}, {n: a.copy() for n, a in X.items()}
            up[name].reshape(-1)[e] += h
            down[name].reshape(-1)[e] -= h
            fd = (loss(up) - loss(down)) / (2 * h)
            assert abs(flat[e] - fd) <= 1e-6 * max(1.0, np.max(np.abs(grad))), \
                f"d{name} element {e}: oracle {flat[e]}, finite differences {fd}"


def kernel_outputs(p, q, k, v, kw, do):
    """A correct kernel's outputs: the fp64 oracles' O, LSE and gradients rounded to the kernel's dtypes."""
    o, lse = flashcheck.reference(q, k, v, **kw)
    grads = flashcheck.reference_backward(q, k, v, do, **kw)
    gkind = p.out_dtype if p.dtype in ("e4m3", "e5m2") else p.dtype
    dq, dk, dv = (narrow(g, gkind) for g in grads[:3])
    dsinks = grads[3].astype(np.float32) if p.has_sinks else None
    return narrow(o, p.out_dtype), lse.astype(np.float32), dq, dk, dv, dsinks


CHECKED = [
    "b=2 hq=4 hkv=2 sq=33 skv=47 dqk=32 dv=32 causal=bottom_right dtype=bf16",
    "b=2 hq=6 hkv=2 sq=40 skv=29 dqk=32 dv=16 causal=top_left dtype=f16 window=12,3 softcap=20 alibi=symmetric "
    "sinks=1 layout=bshd",
    "b=3 hq=4 hkv=1 layout=thd sq=19,0,33 skv=25,6,40 dqk=32 dv=32 causal=bottom_right dtype=bf16 window=16,0 "
    "alibi=signed sinks=1",
    "b=3 hq=4 hkv=2 sq=12 skv=40,17,33 page=8 pages=shuffled dqk=32 dv=32 causal=bottom_right dtype=f16 softcap=10",
    "b=1 hq=2 hkv=2 sq=37 skv=37 dqk=64 dv=64 causal=top_left dtype=f32",
]


@pytest.mark.parametrize("line", CHECKED)
def test_check_backward_passes_the_rounded_oracle(line):
    p, q, k, v, kw, do = drawn(line, 2520 + CHECKED.index(line))
    o, lse, dq, dk, dv, dsinks = kernel_outputs(p, q, k, v, kw, do)
    r = flashcheck.check_backward(q, k, v, o, lse, do, dq, dk, dv, dsinks=dsinks, **kw)
    assert r, str(r)
    assert r.passed and r.failed == []
    assert list(r.gradients) == ["dq", "dk", "dv"] + (["dsinks"] if p.has_sinks else [])
    assert all(g.passed for g in r.gradients.values())
    assert r.forward is not None and r.forward.passed
    assert r.to_dict()["pass"] is True and r.to_dict()["backward"]["problem"] == r.problem.line
    assert "backward" in str(r)


def gqa_case(salt):
    line = "b=2 hq=4 hkv=2 sq=24 skv=40 dqk=32 dv=32 causal=bottom_right dtype=bf16"
    p, q, k, v, kw, do = drawn(line, salt)
    return (p, q, k, v, kw, do) + kernel_outputs(p, q, k, v, kw, do)


def bf16_values(x):
    return flashcheck.bf16_to_float32(x).astype(np.float64)


def missing_first_key(p, q, k, v, do, dq):
    """dQ without key 0's term (every row sees key 0: bottom-right with Skv > Sq, no window), as a kernel
    that skips a KV tile's dQ update; the term is checked to matter."""
    Q, K, V, dO = (bf16_values(x) for x in (q, k, v, do))
    out = bf16_values(dq)
    biggest = 0.0
    for b in range(p.batch):
        *_, dS = bo.sequence(Q[b], K[b], V[b], dO[b], scale=p.scale, causal=p.causal)
        g = p.heads_q // p.heads_kv
        term = p.scale * dS[:, :, 0:1] * np.repeat(K[b], g, axis=0)[:, 0:1, :]
        out[b] -= term
        biggest = max(biggest, np.max(np.abs(term)))
    assert biggest > 0.05 * np.max(np.abs(bf16_values(dq))), "key 0's dQ term is too small to miss"
    return narrow(out, "bf16")


def nan_element(x):
    x = x.copy()
    x[1, 2, 3, 4] = 0x7FC0  # a bf16 quiet NaN
    return x


# (fault, gradients it breaks, how a kernel's gradients become broken)
FAULTS = [
    ("scaled dk", {"dk"}, lambda c, g: dict(g, dk=narrow(2 * bf16_values(g["dk"]), "bf16"))),
    ("dq missing one key", {"dq"}, lambda c, g: dict(g, dq=missing_first_key(c[0], c[1], c[2], c[3], c[5], g["dq"]))),
    ("dk and dv heads swapped", {"dk", "dv"},
     lambda c, g: dict(g, dk=np.ascontiguousarray(g["dk"][:, ::-1]), dv=np.ascontiguousarray(g["dv"][:, ::-1]))),
    ("NaN in one dq element", {"dq"}, lambda c, g: dict(g, dq=nan_element(g["dq"]))),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
def test_check_backward_fails_broken_gradients(fault):
    name, broken, breaks = fault
    case = gqa_case(2530)
    p, q, k, v, kw, do, o, lse, dq, dk, dv, _ = case
    good = flashcheck.check_backward(q, k, v, o, lse, do, dq, dk, dv, **kw)
    assert good, str(good)  # the same kernel unbroken passes: the failure below is the fault's
    g = breaks(case, {"dq": dq, "dk": dk, "dv": dv})
    r = flashcheck.check_backward(q, k, v, o, lse, do, g["dq"], g["dk"], g["dv"], **kw)
    assert not r, f"{name} passed:\n{r}"
    assert {n for n, v in r.gradients.items() if not v.passed} == broken, str(r)
    assert all(f.split(":")[0] in broken for f in r.failed), r.failed
    assert r.forward.passed
    if name.startswith("NaN"):
        assert "nan_inf_positions" in r.gradients["dq"].failed
        w = r.gradients["dq"].worst
        assert (w.b, w.h, w.row, w.col) == (1, 2, 3, 4)


# A problem whose q, k, v, o, dO, dq, dk, dv all have one shape, so any can stand in for another.
SAME = "b=2 hq=2 hkv=2 sq=8 skv=8 dqk=16 dv=16 causal=none dtype=bf16 sinks=1"


def same_case():
    p, q, k, v, kw, do = drawn(SAME, 2540)
    o, lse, dq, dk, dv, dsinks = kernel_outputs(p, q, k, v, kw, do)
    return dict(q=q, k=k, v=v, o=o, lse=lse, do=do, dq=dq, dk=dk, dv=dv, dsinks=dsinks), kw


def with_(**changes):
    return lambda a, kw: (dict(a, **{n: f(a) for n, f in changes.items()}), kw)


# (case, the bad input, exception, what the message says)
BAD = [
    ("do of the wrong shape", with_(do=lambda a: a["do"][:, :, :-1]), ValueError,
     r"do has shape \(2, 2, 7, 16\); it must have o's shape \(2, 2, 8, 16\)"),
    ("do of the wrong dtype", with_(do=lambda a: flashcheck.bf16_to_float32(a["do"]).astype(np.float16)), TypeError,
     r"do is f16; dO must be in o's dtype \(bf16\)"),
    ("dq of the wrong shape", with_(dq=lambda a: a["dq"][:1]), ValueError,
     r"dq has shape \(1, 2, 8, 16\); it must have q's shape \(2, 2, 8, 16\)"),
    ("dk of the wrong dtype", with_(dk=lambda a: flashcheck.bf16_to_float32(a["dk"])), TypeError,
     r"dk is f32; the gradients of bf16 inputs are bf16"),
    ("dv in another layout", with_(dv=lambda a: np.ascontiguousarray(a["dv"].transpose(0, 2, 1, 3))[:, :, :2]),
     ValueError, r"dv has shape \(2, 8, 2, 16\); it must have v's shape \(2, 2, 8, 16\)"),
    ("dq is q", with_(dq=lambda a: a["q"]), ValueError, r"dq shares memory with q: a gradient buffer must not alias"),
    ("dk is k", with_(dk=lambda a: a["k"]), ValueError, r"dk shares memory with k"),
    ("dv is v", with_(dv=lambda a: a["v"]), ValueError, r"dv shares memory with v"),
    ("dq is o", with_(dq=lambda a: a["o"]), ValueError, r"dq shares memory with o"),
    ("dv is do", with_(dv=lambda a: a["do"]), ValueError, r"dv shares memory with d_out"),
    ("dq over half of q", lambda a, kw: (overlapping_halves(a), kw), ValueError, r"dq shares memory with q"),
    ("dk is dq", with_(dk=lambda a: a["dq"]), ValueError, r"dq shares memory with dk: each gradient needs its own"),
    ("dsinks is sinks", lambda a, kw: (dict(a, dsinks=kw["sinks"]), kw), ValueError, r"dsinks shares memory with sinks"),
    ("dsinks in bf16", with_(dsinks=lambda a: flashcheck.float32_to_bf16(a["dsinks"])), TypeError,
     r"dsinks is bf16; the sinks' gradient is float32"),
    ("dsinks without sinks", lambda a, kw: (a, {n: x for n, x in kw.items() if n != "sinks"}), ValueError,
     r"dsinks is given but sinks is not"),
    ("NaN in do", with_(do=lambda a: nan_do(a["do"])), flashcheck.FlashcheckError, r"input 'd_out' holds NaN at \[1,0,2,3\]"),
    ("do missing", with_(do=lambda a: None), TypeError, r"do \(dO, the gradient of the loss with respect to o\) is required"),
]


def nan_do(do):
    do = do.copy()
    do[1, 0, 2, 3] = 0x7FC0  # a bf16 quiet NaN
    return do


def overlapping_halves(a):
    """q and dq as views of one buffer of three batch entries: q the first two, dq the last two."""
    big = np.concatenate([a["q"], a["q"][:1]])
    return dict(a, q=big[:2], dq=big[1:])


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_check_backward_refuses_bad_input(case):
    name, change, exception, says = case
    a, kw = same_case()
    assert flashcheck.check_backward(a["q"], a["k"], a["v"], a["o"], a["lse"], a["do"], a["dq"], a["dk"], a["dv"],
                                     dsinks=a["dsinks"], **kw)
    b, kw = change(a, kw)
    with pytest.raises(exception, match=says):
        flashcheck.check_backward(b["q"], b["k"], b["v"], b["o"], b["lse"], b["do"], b["dq"], b["dk"], b["dv"],
                                  dsinks=b["dsinks"], **kw)


@pytest.mark.parametrize("case", [b for b in BAD if b[0].startswith("do ")], ids=lambda b: b[0])
def test_reference_backward_refuses_a_bad_do(case):
    name, change, exception, says = case
    a, kw = same_case()
    b, _ = change(a, kw)
    with pytest.raises(exception, match=says):
        flashcheck.reference_backward(a["q"], a["k"], a["v"], b["do"], **kw)


def test_packed_qkv_gradients_are_not_aliasing():
    """FlashAttention's packed layout: q, k, v and dq, dk, dv interleaved in one [B, S, 3, H, D] buffer
    each (bshd views that share a buffer but no element) are judged, not refused."""
    p, q, k, v, kw, do = drawn("b=2 hq=3 hkv=3 sq=11 skv=11 dqk=16 dv=16 causal=top_left dtype=f16 layout=bshd", 2550)
    o, lse, dq, dk, dv, _ = kernel_outputs(p, q, k, v, kw, do)
    qkv, dqkv = np.stack([q, k, v], axis=2), np.stack([dq, dk, dv], axis=2)
    views = [qkv[:, :, i] for i in range(3)] + [dqkv[:, :, i] for i in range(3)]
    assert not views[0].flags.c_contiguous  # strided views of one buffer, never copied
    r = flashcheck.check_backward(*views[:3], o, lse, do, *views[3:], **kw)
    assert r, str(r)
    with pytest.raises(ValueError, match="dq shares memory with q"):
        flashcheck.check_backward(*views[:3], o, lse, do, qkv[:, :, 0], *views[4:], **kw)


def test_device_footprints_overlap_exactly():
    """The aliasing test for tensors off the host (CUDA tensors reach the C API as copies of their own),
    on numpy's addresses: the same buffer, a view into it, interleaved views, another device."""
    from flashcheck._backward import footprints_share_memory as share

    def fp(a, device="cuda:0"):
        return (device, a.ctypes.data, a.shape, a.strides, a.itemsize)

    buf = np.zeros((2, 5, 3, 4, 8), np.float16)
    q, k = buf[:, :, 0], buf[:, :, 1]
    assert share(fp(q), fp(q))
    assert share(fp(buf), fp(k))
    assert not share(fp(q), fp(k))
    assert not share(fp(q), fp(q, "cuda:1"))
    assert not share(fp(q), None)


def test_reference_backward_of_rows_without_keys_is_zero():
    """A row that sees no key has dq exactly 0, whatever its dO: top-left with window (1, 0), row i sees
    keys i - 1 and i of the 4, so rows 5.. see none; rows 0 and 4 see one key, whose dS = P (dP - D) is
    0 too (P = 1, D = dP); rows 1..3 see two."""
    p, q, k, v, kw, do = drawn("b=1 hq=2 hkv=1 sq=9 skv=4 dqk=16 dv=16 causal=top_left dtype=f32 window=1,0", 2560)
    dq, dk, dv = flashcheck.reference_backward(q, k, v, do, **kw)
    assert np.all(dq[:, :, 4:] == 0) and np.all(dq[:, :, 0] == 0)
    assert np.all(np.any(dq[:, :, 1:4] != 0, axis=-1))  # two keys each: a real gradient
    assert np.all(np.any(dk != 0, axis=-1)) and np.all(np.any(dv != 0, axis=-1))


def test_check_backward_with_torch_tensors():
    torch = pytest.importorskip("torch")
    p, q, k, v, kw, do = drawn(CHECKED[0], 2570)
    o, lse, dq, dk, dv, _ = kernel_outputs(p, q, k, v, kw, do)
    t = lambda x: torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)  # noqa: E731
    r = flashcheck.check_backward(t(q), t(k), t(v), t(o), torch.from_numpy(lse), t(do), t(dq), t(dk), t(dv), **kw)
    assert r, str(r)
    got = flashcheck.reference_backward(t(q), t(k), t(v), t(do), **kw)
    want = flashcheck.reference_backward(q, k, v, do, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
