"""A fuzzed kernel may decline problems it does not support (flashcheck.Unsupported, or supports=):
declined cases are counted apart, never failed and never shrunk to, and a campaign that declined
everything reads as "nothing tested", never as a pass."""
import numpy as np

import flashcheck
import kernels
from conftest import seed_for

SMALL = dict(cases=30, max_seq=64, verbose=False)


class OddKeys:
    """Wraps a kernel so it declines every problem with an odd key count, recording what it saw."""

    def __init__(self, inner):
        self.inner, self.computed, self.declined = inner, [], []

    def __call__(self, q, k, v, p):
        if p.seq_kv % 2:
            self.declined.append(p)
            raise flashcheck.Unsupported(f"odd seq_kv={p.seq_kv}")
        self.computed.append(p)
        return self.inner(q, k, v, p)


def test_a_correct_kernel_that_declines_some_shapes_passes():
    k = OddKeys(kernels.reference)
    r = flashcheck.fuzz(k, seed=seed_for(1), dtypes=("f32", "bf16"), lse_base="e", **SMALL)  # no probing call
    assert r and r.status == "passed" and r.exit_code == 0, str(r)
    assert r.declined > 0 and r.passed > 0 and r.failed == 0, repr(r)
    assert r.passed + r.declined == r.cases == 30 and r.skipped == r.declined
    assert r.failures == []
    assert f"{r.declined} declined" in str(r) and "declined because: " in str(r)
    assert all(why.startswith("odd seq_kv=") for why in r.decline_reasons)
    assert sum(r.decline_reasons.values()) == len(k.declined) == r.declined  # nothing failed: no shrinking
    assert "Traceback" not in str(r)  # a decline is not a kernel error
    d = r.to_dict()
    assert d["declined"] == d["skipped"] == r.declined and d["status"] == "passed"


def test_supports_predicate_declines_without_calling_the_kernel():
    seen = []

    def even_only(q, k, v, p):
        seen.append(p)
        return kernels.reference(q, k, v, p)

    r = flashcheck.fuzz(even_only, seed=seed_for(2), supports=lambda p: p.seq_kv % 2 == 0, **SMALL)
    assert r and r.declined > 0 and r.passed + r.declined == 30, str(r)
    assert seen and all(p.seq_kv % 2 == 0 for p in seen), [p.line for p in seen if p.seq_kv % 2]
    assert r.decline_reasons == {"supports() returned False": r.declined}


def test_a_wrong_kernel_fails_and_shrinks_only_over_supported_problems():
    # Dropping the tail KV tile fails whenever Skv % 16 != 0; unconstrained, shrinking ends at
    # Skv = 1 (test_fuzz). With odd Skv declined, it must stop at an even Skv instead.
    k = OddKeys(kernels.dropped_tail_tile)
    r = flashcheck.fuzz(k, seed=seed_for(3), dtypes=("f32",), max_failures=1, lse_base="e", **SMALL)
    assert not r and r.status == "failed" and r.exit_code == 1, str(r)
    assert r.failed > 0 and r.declined > 0, repr(r)
    f = r.failures[0]
    assert f.problem.seq_kv % 2 == 0 and f.problem.seq_kv % kernels.TILE != 0, f.problem
    assert f.report.failed and "declined" not in str(f.report)
    assert (f.problem.batch, f.problem.heads_q) == (1, 1), f.problem
    # Shrinking offered smaller problems the kernel declined, and did not move to them.
    assert any(p.seq_kv < f.problem.seq_kv for p in k.declined), (f.problem, [p.line for p in k.declined])
    assert len(k.declined) > r.declined  # shrinking's declines are on top of the campaign's
    again = flashcheck.replay(kernels.dropped_tail_tile, f.problem, f.dist, f.seed)
    assert not again and again.failed == f.report.failed


def test_declines_never_hide_a_failure():
    # One wrong answer among many declines still fails the campaign.
    def mostly_declines(q, k, v, p):
        if p.seq_kv % 2 or p.seq_q % 2:
            raise flashcheck.Unsupported("odd")
        o, lse = kernels.reference(q, k, v, p)
        return (o * 2 if p.dtype == "f32" else o), lse

    r = flashcheck.fuzz(mostly_declines, seed=seed_for(4), dtypes=("f32",), shrink=False, **SMALL)
    assert r.declined > 0 and r.failed > 0 and not r, str(r)


def test_everything_declined_is_nothing_tested_not_a_pass():
    calls = []

    def declines_all(q, k, v, p):
        calls.append(p)
        raise flashcheck.Unsupported("not my shapes")

    r = flashcheck.fuzz(declines_all, seed=seed_for(5), **SMALL)  # lse_base="auto": no LSE could be probed
    assert not r, "a campaign that judged nothing must not read as a pass"
    assert r.status == "nothing tested" and r.exit_code == 125
    assert (r.passed, r.failed, r.declined, r.tested) == (0, 0, 30, 0)
    assert r.failures == [] and len(calls) >= 30
    assert "nothing tested: the kernel declined all 30 cases" in str(r)
    assert r.decline_reasons["not my shapes"] >= 30
    worst_cos = r.to_dict()["worst_cos"]  # NaN, which JSON writes as null: never a perfect-looking 1
    assert worst_cos is None or np.isnan(worst_cos)
    # The predicate form says the same.
    r = flashcheck.fuzz(kernels.reference, seed=seed_for(5), supports=lambda p: False, **SMALL)
    assert not r and r.status == "nothing tested" and r.declined == 30
