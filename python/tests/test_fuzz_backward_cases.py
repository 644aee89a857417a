"""What fuzz(fn, backward=...) hands fn and what it leaves behind, against the C++ side's backward
campaign (`flashcheck run --backward`): non-finite inputs placed where no masked pair meets them, so a
correct backward that multiplies every pair (a tile GEMM) passes; the dO of a case is the one C++
generator's (make_d_out), the goldens' golden_do bit for bit; a failing case's HTML page shows the
gradients' verdict. Seeds come from this run's FLASHCHECK_SEED (printed), as every test's."""
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import backward_kernels as bk
import flashcheck
from conftest import seed_for

DATA = Path(__file__).resolve().parents[2] / "data"


def fuzz(fn, salt, **kw):
    args = dict(cases=20, max_seq=48, seed=seed_for(salt), verbose=False, backward=True)
    args.update(kw)
    return flashcheck.fuzz(fn, **args)


def visible(p):
    """[Sq, Skv] booleans: key j visible to query row i (plain problems)."""
    i, j = np.arange(p.seq_q)[:, None], np.arange(p.seq_kv)[None, :]
    if p.causal == "none":
        return np.ones((p.seq_q, p.seq_kv), bool)
    return j <= i + (p.seq_kv - p.seq_q if p.causal == "bottom_right" else 0)


def test_a_backward_that_multiplies_masked_pairs_passes_the_non_finite_cases():
    """bk.tile_gemm is correct, and differs from the oracle only where a masked pair meets NaN or Inf
    (0·Inf). Every non-finite value fuzz hands it lies in q at a row that sees every key, or in k or v
    of a problem without a masked pair (the rule of reference/nonfinite_inputs.h), and it passes: with
    the forward's placement, masked problems carried their value in k, v or a partly masked row and it
    failed nan_inf_positions."""
    seen = {"q": 0, "kv": 0, "masked problems": 0}

    def recorder(q, k, v, do, p):
        bits = [flashcheck.bf16_to_float32(x) if p.dtype == "bf16" else np.asarray(x, np.float64) for x in (q, k, v)]
        bad_q, bad_k, bad_v = (~np.isfinite(x) for x in bits)
        sees_all = visible(p).all(axis=1)  # per row
        if bad_q.any():
            rows = np.nonzero(bad_q.any(axis=(0, 1, 3)))[0]
            assert sees_all[rows].all(), f"NaN/Inf in q at rows {rows} of {p.line}, some of which do not see every key"
            seen["q"] += 1
        if bad_k.any() or bad_v.any():
            assert sees_all.all(), f"NaN/Inf in k or v of {p.line}, which masks a pair"
            seen["kv"] += 1
        seen["masked problems"] += (bad_q.any() or bad_k.any() or bad_v.any()) and not sees_all.all()
        return bk.tile_gemm(q, k, v, do, p)

    r = fuzz(recorder, 3101, cases=120, max_seq=24, dtypes=("f32", "f16", "bf16"),
             causal=("top_left", "bottom_right"), lse_base=None)
    assert r, str(r)
    assert seen["q"] + seen["kv"] >= 4, f"too few non-finite cases to tell: {seen}"
    assert seen["masked problems"] >= 1, f"no masked problem carried a non-finite value: {seen}"


def test_the_rule_is_what_the_kernel_needs():
    """The same kernel on the forward's placement (make_case) of one masked problem fails
    nan_inf_positions on some draws (a value in k or v that a masked pair meets), and passes the
    backward's placement (make_backward_case) of every draw: the passing campaign above is the
    placement's doing, not a kernel that never meets 0·Inf."""
    p = flashcheck.Problem.parse("b=1 hq=1 hkv=1 sq=6 skv=6 dqk=8 dv=8 causal=top_left dtype=f32")
    first = seed_for(3102) % 100000
    forward_failed = 0
    for seed in range(first, first + 60):
        q, k, v, do, pb = flashcheck.make_backward_case(p, "nonfinite", seed)
        grads = bk.tile_gemm(q, k, v, do, pb)
        report = flashcheck.check_backward(q, k, v, None, None, do, *grads, causal="top_left", allow_nonfinite_inputs=True)
        assert report, f"seed {seed}, the backward's placement:\n{report}"
        q, k, v, _ = flashcheck.make_case(p, "nonfinite", seed)
        report = flashcheck.check_backward(q, k, v, None, None, do, *bk.tile_gemm(q, k, v, do, pb), causal="top_left",
                                           allow_nonfinite_inputs=True)
        if not report:
            assert all(n.endswith(": nan_inf_positions") for n in report.failed), str(report)
            forward_failed += 1
    assert forward_failed >= 1, "no forward draw in 60 seeds met a masked pair"


def load_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file: the goldens' own format, read by its spec."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
            for name, t in header.items()}


def test_the_d_out_of_a_case_is_the_goldens():
    """Every golden with gradients holds the dO make_d_out draws from its seed (golden_do), which
    `flashcheck run --backward` draws too: make_backward_case (what fuzz hands fn) gives it bit for bit,
    in the golden's layout and dtype (a packed batch's padding rows aside)."""
    cases = [c for c in json.loads((DATA / "manifest.json").read_text())["cases"] if c["gradients"]]
    assert len(cases) >= 10
    for c in cases:
        t = load_safetensors(DATA / c["file"])
        dtype, shape, raw = t["golden_do"]
        _, _, _, do, p = flashcheck.make_backward_case(c["problem"], c["dist"], c["seed"])
        width = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}[dtype]
        assert do.dtype.itemsize == np.dtype(width).itemsize, (c["name"], do.dtype, dtype)
        golden = np.frombuffer(raw, width).reshape(shape)
        ours = do.view(width)
        if p.layout == "thd":
            golden = golden[:ours.shape[0]]  # the golden's padding rows follow the last sequence
        assert ours.shape == golden.shape, (c["name"], ours.shape, golden.shape)
        assert np.array_equal(ours, golden), f"{c['name']}: fuzz's dO is not the golden's"


def test_fuzz_hands_fn_the_d_out_of_its_case():
    """Every call of a campaign, shrinking's included: the dO fn gets is make_backward_case's for the
    case, so the kept failure's calls got the dO the goldens' generator draws for it."""
    calls = []

    def recorder(q, k, v, do, p):
        calls.append((p, q.tobytes(), np.array(do, copy=True)))
        return bk.dk_without_scale(q, k, v, do, p)

    r = fuzz(recorder, 3103, dtypes=("bf16",), lse_base=None)
    f = r.failures[0]
    q, _, _, do, p = flashcheck.make_backward_case(f.problem, f.dist, f.seed)
    # By problem and bytes: inputs are drawn by element index from the seed, so a shrinking candidate
    # of another shape with as many elements (Sq = 1, D = 4 beside Sq = 2, D = 2) has the same bytes,
    # and one that differs only in Dv (or the causal mode) has the same q but another dO: matching q's
    # shape and bytes alone took such a call for the kept case's (CI, FLASHCHECK_SEED=8249015313034536397).
    mine = [d for prob, qb, d in calls if prob == p and qb == q.tobytes()]
    assert mine, "no call had the kept case's inputs"
    assert all(np.array_equal(d, do) for d in mine)


def test_a_failing_backward_case_gets_its_page(tmp_path):
    """html_dir: the kept failure's page holds the backward verdict (the failing gradient named, its
    heatmap drawn from the error maps, the Python that replays it), and says the forward was not judged
    for a fn that returns gradients only; with its forward output the page holds both."""
    r = fuzz(bk.dk_without_scale, 3104, html_dir=tmp_path / "only", max_failures=1)
    assert not r
    pages = sorted((tmp_path / "only").glob("*.html"))
    assert len(pages) == 1, pages
    page = pages[0].read_text()
    assert '<h2 id="backward">' in page and 'data-gradient="dk" data-pass="false"' in page
    assert 'data-gradient="dq" data-pass="true"' in page
    assert '<canvas id="grad-map-dk">' in page
    assert 'forward <span class="na">not judged</span>' in page and "Forward verdict" not in page
    assert "flashcheck.replay(dk_without_scale, " in page and "backward=&#39;gradients&#39;" in page

    def with_forward(q, k, v, do, p):
        return bk.correct_with_forward(q, k, v, do, p)[:2] + bk.dk_without_scale(q, k, v, do, p)

    r = fuzz(with_forward, 3104, html_dir=tmp_path / "both", max_failures=1)
    assert not r
    page = next((tmp_path / "both").glob("*.html")).read_text()
    assert page.index("Forward verdict (o, lse)") < page.index('<h2 id="backward">')
    assert re.search(r'data-gradient="dk" data-pass="false"', page)


def test_check_backward_and_replay_write_the_page(tmp_path):
    p = flashcheck.Problem.parse("b=1 hq=2 hkv=1 sq=9 skv=12 dqk=16 dv=16 causal=bottom_right dtype=f16")
    q, k, v, do, p = flashcheck.make_backward_case(p, "normal", seed_for(3105))
    report = flashcheck.check_backward(q, k, v, None, None, do, *bk.dk_without_scale(q, k, v, do, p),
                                       causal="bottom_right", html=tmp_path / "check.html")
    assert not report
    page = (tmp_path / "check.html").read_text()
    assert '<canvas id="grad-map-dk">' in page and page == report.html()
    again = flashcheck.replay(bk.dk_without_scale, p.line, "normal", seed_for(3105), runs=1, backward=True,
                              html=tmp_path / "replay.html")
    assert not again and 'data-gradient="dk" data-pass="false"' in (tmp_path / "replay.html").read_text()
