"""flashcheck.replay: one fuzz case again, from its problem, input distribution and seed, run a few
times on fresh inputs to tell a reproduction from a flaky one."""
import numpy as np

from ._api import Problem, Report, make_case, resolve_backend, split_output
from ._api import check as _check


def _to_bshd(x):
    """A plain problem's [B, H, S, D] input as the [B, S, H, D] tensor fuzz(layout="bshd") hands."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    return x.transpose(1, 2).contiguous()


class Replayed:
    """What a replayed case adds to its report (a Report, or a BackwardReport for fuzz(backward=...)):
    how many of its runs failed.

    The report is the first failing run's (the first run's when none failed), so bool() is False
    as soon as one run failed. `reproduced` is {"runs": n, "failed": k}; `confirmed` means every run
    failed, `flaky` that some did and some did not (a kernel that caches by pointer, races, or
    depends on what ran before it): then the case is no clean reproduction. Each run gets freshly
    allocated inputs; a Python kernel runs in this process, so nothing it keeps between calls is
    reset."""

    reproduced = None

    @property
    def confirmed(self):
        return self.reproduced["failed"] == self.reproduced["runs"]

    @property
    def flaky(self):
        return 0 < self.reproduced["failed"] < self.reproduced["runs"]

    def _summary(self):
        k, n = self.reproduced["failed"], self.reproduced["runs"]
        said = f"failed {k} of {n} run{'s' if n != 1 else ''} (fresh inputs each, in this process)"
        if self.flaky:
            return f"  FLAKY: {said}: not a clean reproduction (a kernel that caches, races or keeps state between calls)"
        return f"  replayed: {said}"

    def to_dict(self):
        d = super().to_dict()
        d["reproduced"] = dict(self.reproduced, flaky=self.flaky)
        return d

    def __str__(self):
        return super().__str__().rstrip("\n") + "\n" + self._summary() + "\n"

    def __repr__(self):
        k, n = self.reproduced["failed"], self.reproduced["runs"]
        return super().__repr__()[:-1] + f", failed {k} of {n} runs{' (flaky)' if self.flaky else ''}>"


class Replay(Replayed, Report):
    """A replayed case's report (flashcheck.replay), with how many of its runs failed (Replayed)."""


def replay(kernel, problem, dist="normal", seed=0, *, runs=3, lse_base="e", empty_row_lse="-inf", backend="numpy",
           device=None, layout="bhsd", max_rows=4096, tile_q=128, tile_kv=128, alibi_lse="exact", html=None,
           backward=None):
    """Runs kernel(q, k, v, problem) `runs` times on the inputs flashcheck draws for (problem, dist,
    seed), each time on freshly made inputs (and side tensors, set on the problem as fuzz sets
    them), and judges every output: one failing fuzz case, again, and whether it fails every time.
    Returns a Replay (a Report): the first failing run's report, with `reproduced` = {"runs": n,
    "failed": k} and `flaky` when 0 < k < n.

    backward ("gradients", "autograd" or True, as fuzz's): a backward kernel's case, with the inputs
    and dO fuzz drew for it (make_backward_case); returns a BackwardReplay (a BackwardReport with the
    same `reproduced`), and html= writes its page with the gradients' verdicts and heatmaps."""
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a whole number of at least 1, got {runs!r}")
    if layout not in ("bhsd", "bshd"):
        raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")
    p0 = Problem.parse(problem) if isinstance(problem, str) else problem
    if backward not in (None, False):
        from . import _fuzz_backward as fb

        backend, device = resolve_backend(backend, device)
        return fb.replay_backward(kernel, fb.resolve_mode(kernel, backward, backend), p0, dist, seed, runs=runs,
                                  backend=backend, device=device, layout=layout, lse_base=lse_base,
                                  empty_row_lse=empty_row_lse, max_rows=max_rows, tile_q=tile_q, tile_kv=tile_kv,
                                  alibi_lse=alibi_lse, html=html)
    kept, failed = None, 0
    for _ in range(runs):
        q, k, v, p = make_case(p0, dist, seed, backend=backend, device=device)
        transposed = layout == "bshd" and p.layout == "bhsd"
        if transposed:  # the kernel takes [B, S, H, D]: hand it that, judge it so
            q, k, v = (_to_bshd(x) for x in (q, k, v))
        o, lse = split_output(kernel(q, k, v, p))
        if lse_base is None:  # declared without LSE: whatever it returns there is not judged
            lse = None
        kw = p.keywords()
        if transposed:
            kw["layout"] = "bshd"
        args = (q, k, v, o, lse)
        # The inputs of dist="nonfinite" hold a NaN or Inf by design: judged on its propagation.
        kw["allow_nonfinite_inputs"] = dist == "nonfinite"
        report = _check(*args, lse_base=lse_base or "e", empty_row_lse=empty_row_lse, max_rows=max_rows, tile_q=tile_q,
                        tile_kv=tile_kv, alibi_lse=alibi_lse, **kw)
        failed += not report
        if kept is None or (not report and kept[0]):
            kept = (report, args, kw)
    report, args, kw = kept
    if html is not None:  # the kept run judged again, with the page's error maps
        report = _check(*args, lse_base=lse_base or "e", empty_row_lse=empty_row_lse, max_rows=max_rows, tile_q=tile_q,
                        tile_kv=tile_kv, alibi_lse=alibi_lse, html=html, **kw)
    report.__class__ = Replay
    report.reproduced = {"runs": runs, "failed": failed}
    return report
