"""flashcheck.fuzz(fn, backward=True) over numpy backward kernels (backward_kernels.py): a correct one
passes in every dtype, with or without its forward output; each broken one fails exactly its gradient
and shrinks to a small problem that still shows the bug; the printed Python reproduces it with the
same dO; the contract's misuse is refused by name. Seeds come from this run's FLASHCHECK_SEED
(printed), as every test's."""
import contextlib
import io

import numpy as np
import pytest

import backward_kernels as bk
import flashcheck
from conftest import seed_for

SMALL = dict(cases=20, max_seq=48)


def fuzz(fn, salt, **kw):
    args = dict(SMALL, seed=seed_for(salt), verbose=False, backward=True)
    args.update(kw)
    return flashcheck.fuzz(fn, **args)


def test_a_correct_backward_passes_in_every_dtype():
    r = fuzz(bk.correct, 3001, dtypes=("f32", "f16", "bf16"))
    assert r, str(r)
    assert r.passed == r.cases == 20 and r.failures == []
    assert str(r).startswith("flashcheck.fuzz backward (gradients) correct: passed")
    assert "forward: not judged" in str(r)  # it returned no o: nothing about a forward is claimed


def test_a_correct_backward_with_its_forward_passes_and_the_forward_is_judged():
    r = fuzz(bk.correct_with_forward, 3002, dtypes=("f16", "bf16"))
    assert r, str(r)
    assert "forward: not judged" not in str(r)
    # The same gradients beside a wrong o: the forward fails, and only the forward.
    bad = fuzz(bk.wrong_forward, 3002, dtypes=("f16", "bf16"))
    assert not bad, str(bad)
    f = bad.failures[0]
    assert all(g.passed for g in f.report.gradients.values()), str(f.report)
    assert f.report.forward is not None and not f.report.forward
    assert f.report.failed and all(n.startswith("forward: ") for n in f.report.failed), f.report.failed


def first_drawn_failure(fn, salt, **kw):
    """The campaign's first failing case as drawn, before shrinking."""
    raw = fuzz(fn, salt, shrink=False, fail_fast=True, **kw)
    assert not raw, f"no case failed: {raw!r}"
    return raw.failures[0].problem


def shrunk(fn, salt, gradient, **kw):
    """The kept failure of fn's campaign: shrunk from the first drawn failure, failing `gradient` alone."""
    r = fuzz(fn, salt, **kw)
    assert not r, f"the bug went unnoticed: {r!r}\n{r}"
    f = r.failures[0]
    drawn = first_drawn_failure(fn, salt, **kw)
    dims = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim_qk")
    assert all(getattr(f.problem, d) <= getattr(drawn, d) for d in dims), (f.problem, drawn)
    assert any(getattr(f.problem, d) < getattr(drawn, d) for d in dims), (f.problem, drawn)
    failing = [name for name, g in f.report.gradients.items() if not g.passed]
    assert failing == [gradient], str(f.report)
    assert f.report.forward is None, "fn returns gradients only: no forward verdict"
    worst = f.report.gradients[gradient].worst
    assert worst is not None and worst.kernel != worst.oracle, str(f.report)
    assert f"failed: {gradient} fails " in str(r) and str(f.report).rstrip() in str(r)
    return f


def test_dk_without_the_softmax_scale_fails_dk_and_shrinks_to_one_head():
    f = shrunk(bk.dk_without_scale, 3003, "dk")
    p = f.problem
    # One key has dK = 0 (P = 1, dS = 0) whatever the scale: the smallest failure has two.
    assert (p.batch, p.heads_q, p.heads_kv) == (1, 1, 1) and p.seq_q <= 2 and p.seq_kv == 2, p


def test_dv_of_the_wrong_kv_head_fails_dv_and_shrinks_to_two_kv_heads():
    f = shrunk(bk.dv_of_interleaved_heads, 3004, "dv")
    p = f.problem
    # MHA and one KV head map query heads the same either way: the bug needs Hkv >= 2 and groups >= 2.
    assert p.batch == 1 and p.heads_kv == 2 and p.heads_q // p.heads_kv >= 2, p
    assert p.seq_q <= 2 and p.seq_kv <= 2, p


def test_dq_ignoring_the_causal_mask_fails_dq_and_shrinks_to_a_masked_pair():
    f = shrunk(bk.dq_ignores_causal, 3005, "dq", causal=("none", "top_left", "bottom_right"))
    p = f.problem
    assert p.causal != "none" and (p.batch, p.heads_q) == (1, 1), p
    # A masked key needs two keys; the smallest problem masks one of them from one query row.
    assert p.seq_kv == 2 and p.seq_q <= 2, p


def test_the_printed_python_reproduces_the_failure_with_the_same_d_out():
    r = fuzz(bk.dk_without_scale, 3006)
    f = r.failures[0]
    assert "from backward_kernels import dk_without_scale" in f.repro and "backward='gradients'" in f.repro
    assert "reproduce in Python:\n    " + f.repro.replace("\n", "\n    ") in str(r)
    scope = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(f.repro, scope)  # noqa: S102 - the very lines a user would paste
    again = scope["report"]
    assert not again and again.problem == f.problem and again.failed == f.report.failed
    assert again.reproduced == {"runs": 3, "failed": 3} and again.confirmed
    # The same dO each run: the worst element and both values are the same bits.
    assert again.gradients["dk"].worst == f.report.gradients["dk"].worst


def test_d_out_is_fresh_per_case_and_the_same_on_replay():
    seen = []

    def recorder(q, k, v, do, p):
        seen.append((p.line, np.array(do, copy=True)))
        return bk.correct(q, k, v, do, p)

    assert fuzz(recorder, 3007, cases=4, dtypes=("bf16",))
    line, do = seen[0]
    assert do.dtype == np.uint16 and do.shape == flashcheck.Problem.parse(line).o_shape
    # N(0, 1) is judged on every case's dO pooled: one case may hold 2 elements, whose spread says
    # nothing (0.37 and 0.66 are a fair draw); 64 draws from N(0, 1) have a sample std below 0.5 with
    # probability < 1e-9.
    pool = np.concatenate([flashcheck.bf16_to_float32(d).ravel() for _, d in seen])
    assert np.all(np.isfinite(pool)), "dO holds a non-finite value"
    if pool.size >= 64:
        assert np.std(pool) > 0.5 and abs(np.mean(pool)) < 0.5, "dO is no draw of N(0, 1)"
    # fuzz's first call (whether fn returns an LSE) and the campaign's case 0 are one case, though only
    # the campaign's problem says its scale: one dO.
    assert np.array_equal(seen[1][1], do), (line, seen[1][0])
    other = next(d for _, d in seen[2:] if d.size >= 8)
    assert not np.array_equal(other.ravel()[:8], do.ravel()[:8]), "another case drew the same dO"
    seen.clear()
    flashcheck.replay(recorder, line, "normal", seed_for(3008), runs=2, backward=True)
    assert np.array_equal(seen[0][1], seen[1][1])


def test_a_replay_draws_the_d_out_the_campaign_drew():
    calls = []

    def recorder(q, k, v, do, p):
        calls.append((q.tobytes() + k.tobytes() + v.tobytes(), np.array(do, copy=True)))
        return bk.dk_without_scale(q, k, v, do, p)

    f = fuzz(recorder, 3013, dtypes=("f16",)).failures[0]
    # The last call is fuzz's own judging of the kept case (a replay): the campaign's are before it.
    campaign = dict(calls[:-1])
    calls.clear()
    again = flashcheck.replay(recorder, f.problem.line, f.dist, f.seed, runs=1, backward=True)
    assert not again
    (qkv, do), = calls
    assert qkv in campaign, "the replay's inputs are not the shrunk case's"
    assert np.array_equal(campaign[qkv], do), "the replay drew another dO than the campaign's case"


def test_a_declined_problem_is_counted_as_declined():
    def no_gqa(q, k, v, do, p):
        if p.heads_q != p.heads_kv:
            raise flashcheck.Unsupported("MHA only")
        return bk.correct(q, k, v, do, p)

    r = fuzz(no_gqa, 3009)
    assert r and r.declined > 0 and r.passed + r.declined == r.cases, repr(r)
    assert r.decline_reasons.get("MHA only", 0) > 0


def test_a_return_value_off_the_contract_fails_each_case_naming_the_contract():
    r = fuzz(lambda q, k, v, do, p: bk.correct(q, k, v, do, p)[:2], 3010, cases=3, shrink=False, lse_base=None)
    assert r.failed == 3 and "returns (dq, dk, dv)" in str(r.failures[0].report)


def test_the_mode_is_decided_up_front_or_refused():
    with pytest.raises(TypeError, match="backward='gradients' or backward='autograd'"):
        fuzz(lambda q, k, v: None, 3011)
    with pytest.raises(ValueError, match="backend='torch'"):
        fuzz(lambda q, k, v, p: None, 3011)  # four arguments: differentiated, which needs torch
    with pytest.raises(ValueError, match="backward must be"):
        fuzz(bk.correct, 3011, backward="both")


def test_autograd_differentiates_a_torch_function():
    torch = pytest.importorskip("torch")

    def sdpa(q, k, v, p):  # plain attention by torch ops, differentiated by autograd
        g = p.heads_q // p.heads_kv
        s = (q.float() @ k.float().repeat_interleave(g, 1).transpose(-1, -2)) * p.scale
        if p.causal != "none":
            i = torch.arange(p.seq_q, device=q.device)[:, None]
            j = torch.arange(p.seq_kv, device=q.device)[None, :]
            s = s.masked_fill(j > i + (p.seq_kv - p.seq_q if p.causal == "bottom_right" else 0), float("-inf"))
        return (torch.softmax(s, -1).nan_to_num() @ v.float().repeat_interleave(g, 1)).to(q.dtype)

    r = fuzz(sdpa, 3012, backend="torch", device="cpu", dtypes=("f32",), nonfinite=False)
    assert r, str(r)
    assert str(r).startswith("flashcheck.fuzz backward (autograd)")
