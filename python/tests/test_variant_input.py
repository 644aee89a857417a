"""Bad input to check() and reference() on problem model 2's keywords: each a Python exception that
names the argument and what is wrong with it, before any judging; never a crash, never a pass."""
import numpy as np
import pytest

import flashcheck
from conftest import seed_for

D = "dqk=16 dv=16"
LINES = {
    "thd": f"b=3 hq=4 hkv=2 layout=thd sq=9,1,30 skv=20,7,33 {D} dtype=f32",
    "paged": f"b=3 hq=4 hkv=2 sq=6 skv=45,12,33 page=5 pages=shuffled {D} dtype=f32",
    "dense": f"b=2 hq=4 hkv=2 sq=20 skv=31 {D} dtype=f32 alibi=symmetric sinks=1",
    "fp8": f"b=2 hq=4 hkv=2 sq=20 skv=31 {D} dtype=e4m3 descale=head",
}


def i32(*x):
    return np.array(x, np.int32)


def replace(**changes):
    return lambda t, kw: (t, dict(kw, **changes))


def drop(*names):
    return lambda t, kw: (t, {n: x for n, x in kw.items() if n not in names})


def table_entry(value):
    """The block table with one used entry set to value (None: the number of pages, one past the last)."""
    def f(t, kw):
        table = kw["block_table"].copy()
        table[2][3] = t[1].shape[0] if value is None else value
        return t, dict(kw, block_table=table)
    return f


def q_overlapping(t, kw):
    q = t[0]
    return (np.lib.stride_tricks.as_strided(q, strides=(0,) + q.strides[1:]),) + t[1:], kw


# (case, problem, the bad input, exception, what the message says)
BAD = [
    ("cu_seqlens_q not from 0", "thd", replace(cu_seqlens_q=i32(1, 10, 11, 40)), ValueError,
     r"cu_seqlens_q\[0\] is 1; cu_seqlens_q must start at 0"),
    ("cu_seqlens_q decreasing", "thd", replace(cu_seqlens_q=i32(0, 10, 9, 40)), ValueError,
     r"cu_seqlens_q decreases at index 2 \(9 after 10\)"),
    ("cu_seqlens_q past q's rows", "thd", lambda t, kw: drop("max_seqlen_q")(t, dict(kw, cu_seqlens_q=i32(0, 9, 10, 41))),
     ValueError, r"cu_seqlens_q.*41.*40"),
    ("cu_seqlens_k past k's rows", "thd", lambda t, kw: drop("max_seqlen_k")(t, dict(kw, cu_seqlens_k=i32(0, 20, 27, 61))),
     ValueError, r"cu_seqlens_k.*61.*60"),
    ("cu_seqlens_k one short", "thd", replace(cu_seqlens_k=i32(0, 20, 27)), ValueError,
     r"cu_seqlens_k has shape \(3,\); the batch needs 4 entries"),
    ("cu_seqlens_q float", "thd", replace(cu_seqlens_q=np.array([0, 9, 10, 40], np.float32)), TypeError,
     r"cu_seqlens_q is float32; expected integers"),
    ("max_seqlen_q below the longest", "thd", replace(max_seqlen_q=29), ValueError,
     r"max_seqlen_q is 29 but sequence 2 has 30 queries"),
    ("seqused_k past the keys stored", "thd", replace(seqused_k=i32(20, 8, 33)), ValueError,
     r"seqused_k\[1\] = 8 exceeds the 7 keys stored for sequence 1"),
    ("seqused_k negative", "thd", replace(seqused_k=i32(20, -1, 33)), ValueError, r"seqused_k\[1\] is negative"),
    ("block_table past the pages", "paged", table_entry(None), ValueError,
     r"block_table\[2\]\[3\] = (\d+) is outside \[0, num_pages = \1\)"),
    ("block_table negative", "paged", table_entry(-1), ValueError, r"block_table\[2\]\[3\] = -1 is outside"),
    ("block_table one row short", "paged", lambda t, kw: (t, dict(kw, block_table=kw["block_table"][:2])), ValueError,
     r"block_table has shape \[2, 9\]; the problem needs \[B, max_pages\] = \[3, any\]"),
    ("cache_seqlens past the table", "paged", replace(cache_seqlens=i32(45, 12, 1000)), ValueError,
     r"block_table rows hold 9 pages; sequence 2 needs 200 for its 1000 keys"),
    ("cache_seqlens without block_table", "paged", drop("block_table"), ValueError, r"cache_seqlens needs block_table"),
    ("window below -1", "dense", replace(window=(-2, 3)), ValueError, r"window bounds must be >= -1.*\(-2, 3\)"),
    ("window not a pair", "dense", replace(window=5), TypeError, r"window must be a pair \(left, right\)"),
    ("window and window_size", "dense", replace(window=(1, 1), window_size=(1, 1)), TypeError, r"window_size"),
    ("softcap negative", "dense", replace(softcap=-1.0), ValueError, r"softcap must be finite and >= 0"),
    ("softcap NaN", "dense", replace(softcap=float("nan")), ValueError, r"softcap must be a finite number >= 0"),
    ("softcap infinite", "dense", replace(softcap=float("inf")), ValueError, r"softcap must be finite"),
    ("alibi_slopes short", "dense", lambda t, kw: (t, dict(kw, alibi_slopes=kw["alibi_slopes"][:3])), ValueError,
     r"alibi_slopes has shape \[3\]; the problem needs \[Hq\] = \[4\]"),
    ("alibi_slopes NaN", "dense", replace(alibi_slopes=np.full(4, np.nan, np.float32)), ValueError,
     r"alibi_slopes holds a non-finite slope"),
    ("alibi_slopes float64 not float32", "dense", replace(alibi_slopes=np.full(4, 0.1)), ValueError,
     r"alibi_slopes holds values float32 cannot hold exactly"),
    ("alibi convention unknown", "dense", replace(alibi="bogus"), ValueError, r"alibi must be 'symmetric' or 'signed'"),
    ("sinks short", "dense", lambda t, kw: (t, dict(kw, sinks=kw["sinks"][:2])), ValueError,
     r"sinks has shape \[2\]; the problem needs \[Hq\] = \[4\]"),
    ("sinks NaN", "dense", replace(sinks=np.full(4, np.nan, np.float32)), ValueError, r"sinks holds NaN or \+inf"),
    ("layout unknown", "dense", replace(layout="bsdh"), ValueError, r"layout must be 'bhsd', 'bshd' or 'thd'"),
    ("thd without cu_seqlens_q", "thd", drop("cu_seqlens_q"), ValueError, r"layout='thd' needs cu_seqlens_q"),
    ("thd without cu_seqlens_k", "thd", drop("cu_seqlens_k"), ValueError, r"layout='thd' needs cu_seqlens_k"),
    ("cu_seqlens_q with bhsd", "dense", replace(cu_seqlens_q=i32(0, 20, 40)), ValueError,
     r"cu_seqlens_q / cu_seqlens_k need layout='thd'"),
    ("descale for f32 inputs", "dense", replace(descale_q=np.float32([2])), ValueError,
     r"descale factors are for fp8 inputs only"),
    ("descale 0", "fp8", replace(descale_k=np.zeros((2, 2), np.float32)), ValueError,
     r"descale_k must be finite and positive, got 0"),
    ("descale NaN", "fp8", replace(descale_v=np.full((2, 2), np.nan, np.float32)), ValueError,
     r"descale_v must be finite and positive, got nan"),
    ("descale infinite", "fp8", replace(descale_q=np.full((2, 2), np.inf, np.float32)), ValueError,
     r"descale_q must be finite and positive, got inf"),
    ("descale of the wrong shape", "fp8", replace(descale_v=np.ones((2, 3), np.float32)), ValueError,
     r"descale_v has shape \[2, 3\]; the problem needs \[B, Hkv\] \(per head\) = \[2, 2\]"),
    ("fp8 bits without dtype", "fp8", drop("dtype"), TypeError, r"q is numpy uint8: numpy has no fp8 type"),
    ("overlapping strides", "dense", q_overlapping, ValueError, r"tensor q: its strides overlap"),
]


@pytest.mark.parametrize("case, kind, bad, error, message", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("fn", ["reference", "check"])
def test_bad_input_is_named(case, kind, bad, error, message, fn):
    p = flashcheck.Problem.parse(LINES[kind])
    q, k, v, p = flashcheck.make_case(p, "normal", seed_for(300 + [b[0] for b in BAD].index(case)))
    kw = p.keywords()
    o, lse = flashcheck.reference(q, k, v, **kw)  # the inputs are good before the change
    (q, k, v), kw = bad((q, k, v), kw)
    with pytest.raises(error, match=message):
        if fn == "reference":
            flashcheck.reference(q, k, v, **kw)
        else:
            out = flashcheck.float32_to_bf16(o.astype(np.float32)) if p.dtype == "e4m3" else o.astype(np.float32)
            flashcheck.check(q, k, v, out, lse.astype(np.float32), **kw)


def test_nan_in_q_is_refused_by_check_and_propagated_by_reference():
    p = flashcheck.Problem.parse(f"b=3 hq=4 hkv=2 layout=thd sq=10,10,10 skv=20,20,20 {D} dtype=f32")
    q, k, v, p = flashcheck.make_case(p, "normal", seed_for(399))
    kw = p.keywords()
    o, lse = flashcheck.reference(q, k, v, **kw)
    q = q.copy()
    q[12, 3, 5] = np.nan  # query 2 of sequence 1, head 3: its place is given as [sequence, head, query, dim]
    with pytest.raises(flashcheck.FlashcheckError, match=r"input 'q' holds NaN at \[1,3,2,5\]"):
        flashcheck.check(q, k, v, o.astype(np.float32), lse.astype(np.float32), **kw)
    o2, lse2 = flashcheck.reference(q, k, v, **kw)
    hit = np.isnan(o2).any(axis=-1)
    assert hit.sum() == 1 and hit[12, 3] and np.isnan(lse2[3, 12])
    # Declared, NaN inputs are judged instead: the row the NaN reaches must be NaN in the output.
    assert flashcheck.check(q, k, v, o2.astype(np.float32), lse2.astype(np.float32), allow_nonfinite_inputs=True, **kw)
