"""fuzz(fn, backward=...): a backward kernel through the forward's own campaign (fc_fuzz2), so its
failures are drawn, counted and shrunk exactly as a forward's are.

The campaign judges one forward output per case; the backward's verdict reaches it as the case's
outcome: each case the campaign hands over, BackwardKernel runs fn on the case's inputs and dO,
judges the gradients with check_backward and, when they fail, raises BackwardFailed, which the
campaign's callback turns into a failed case (a kernel error, the one verdict a callback can give
besides its output). The campaign then shrinks that case by re-running smaller problems through the
same adapter: the forward's shrinking, unchanged. The kept (shrunk) case is judged again afterwards
(replay_backward) for its BackwardReport: which gradient failed, its worst element, and the forward
beside it.

The campaign is a backward one (fc_fuzz_options.backward): a non-finite input goes only where every
correct backward agrees with the oracle (`flashcheck run --backward`'s placement), and dO is the
C++ side's one generator (make_d_out of the case's seed, read with fc_callback_d_out), so a case's
inputs and dO are the CLI's and the goldens' for the same problem, dist and seed."""
import ctypes

import numpy as np

from . import _lib
from ._api import deliver, draw_case, reference, split_output
from ._backward import BackwardReport, check_backward
from ._fuzz import Unsupported
from ._replay import Replayed, _to_bshd
from ._tensors import FP8, NUMPY_DTYPES, array_view, float32_to_bf16, is_torch

MODES = ("gradients", "autograd")


class BackwardFailed(Exception):
    """A case's gradients failed check_backward: the campaign counts it failed and shrinks it. Carries
    the report and the forward output fn gave (for fuzz's LSE detection)."""

    def __init__(self, report, forward):
        self.report, self.forward = report, forward
        super().__init__("backward: " + "; ".join(_failed_gradients(report)))


def _failed_gradients(report):
    """["dk fails baseline_relative, cosine", "forward fails lse"], for messages."""
    out = [f"{g.name} fails {', '.join(g.failed)}" for g in report.gradients.values() if not g.passed]
    if report.forward is not None and not report.forward:
        out.append("forward fails " + ", ".join(report.forward.failed))
    return out or ["failed"]


def _positional_arity(fn):
    """(fewest, most) positional arguments fn takes, or None when its signature cannot be read."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return (sum(p.default is p.empty for p in positional), None)
    return (sum(p.default is p.empty for p in positional), len(positional))


def _is_autograd_function(fn):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


def resolve_mode(fn, backward, backend):
    """"gradients" (fn(q, k, v, do, problem) returns the gradients) or "autograd" (fn(q, k, v, problem)
    returns o or (o, lse) and torch differentiates it). backward=True decides: a torch.autograd.Function
    subclass, or a callable that takes 4 positional arguments and not 5, is differentiated; any other
    callable returns its gradients. Ambiguity is refused rather than guessed at case time."""
    if backward not in (True, "gradients", "autograd"):
        raise ValueError(f"backward must be False, True, 'gradients' or 'autograd', got {backward!r}")
    mode = backward
    if backward is True:
        arity = _positional_arity(fn.apply if _is_autograd_function(fn) else fn)
        if _is_autograd_function(fn) or (arity is not None and arity[0] <= 4 and arity[1] == 4):
            mode = "autograd"
        elif arity is None or (arity[0] <= 5 and (arity[1] is None or arity[1] >= 5)):
            mode = "gradients"
        else:
            raise TypeError(f"fuzz(backward=True) calls fn(q, k, v, do, problem) for its gradients, or differentiates "
                            f"fn(q, k, v, problem) with torch; this fn takes {arity[0]} to {arity[1]} positional "
                            "arguments: say backward='gradients' or backward='autograd'")
    if mode == "autograd" and backend != "torch":
        raise ValueError("backward='autograd' differentiates fn with torch: pass backend='torch' (or return the gradients "
                         "from fn(q, k, v, do, problem) with backward='gradients')")
    return mode


def make_backward_case(problem, dist="normal", seed=0, *, backend="numpy", device=None):
    """(q, k, v, do, problem) exactly as fuzz(backward=...) hands a case to its kernel: make_case's
    inputs, a non-finite one (dist "nonfinite") placed where every correct backward agrees with the
    oracle (in q at a row that sees every key of its sequence, in k or v only when no pair of the
    sequence is masked, else nowhere: a tile GEMM multiplies masked pairs too, 0*Inf), and the case's
    dO: standard normal rounded to o's dtype, in o's shape and layout, drawn from the seed as `flashcheck
    run --backward` and the goldens (golden_do) draw it. A packed (thd) batch's padding rows of dO are
    NaN, as its inputs' are."""
    q, k, v, p, do = draw_case(problem, dist, seed, backend, device, backward=True)
    return q, k, v, do, p


def callback_d_out(p, backend, device, layout):
    """Inside the campaign's callback: the case's dO (fc_callback_d_out), copied out of the campaign's
    buffer and handed over as the inputs were (layout "bshd" transposes a plain problem's)."""
    view = _lib.TensorView()
    _lib.ok(_lib.lib().fc_callback_d_out(ctypes.byref(view)), "fuzz")
    return deliver(np.array(array_view(view, NUMPY_DTYPES[p.out_dtype])), p.out_dtype, backend, device,
                   layout if p.layout == "bhsd" else None)


def _narrowed(x, kind):
    """fp64 values rounded to `kind` (bf16 as uint16 bits): the stand-in forward output below."""
    if kind == "bf16":
        return float32_to_bf16(x.astype(np.float32))
    return x.astype(np.float32 if kind == "f32" else np.float16)


def _run(fn, mode, q, k, v, do, p):
    """fn on one case: (o or None, lse or None, dq, dk, dv, dsinks or None)."""
    if mode == "autograd":
        if p.dtype in FP8:
            raise TypeError("torch cannot differentiate fp8 tensors: fuzz(backward='autograd') takes f32, f16 and bf16")
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
        sinks = p.sinks
        if sinks is not None and is_torch(sinks):
            p.sinks = sinks.detach().clone().requires_grad_(True)
        o, lse = split_output(fn.apply(*leaves, p) if _is_autograd_function(fn) else fn(*leaves, p))
        if not is_torch(o) or not o.requires_grad:
            raise TypeError("fuzz(backward='autograd'): fn returned an o that torch cannot differentiate "
                            f"({type(o).__name__}{'' if not is_torch(o) else ' without requires_grad'})")
        o.backward(do)
        grads = [x.grad for x in leaves]
        for name, g in zip(("dq", "dk", "dv"), grads):
            if g is None:
                raise TypeError(f"fuzz(backward='autograd'): {name} is None after o.backward(do): o does not depend on "
                                f"{name[1]}")
        dsinks = p.sinks.grad if sinks is not None and is_torch(sinks) else None
        return (o.detach(), None if lse is None else lse.detach(), *grads, dsinks)
    out = fn(q, k, v, do, p)
    if not isinstance(out, (tuple, list)) or len(out) not in (3, 4, 5, 6):
        got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        raise TypeError("fuzz(backward='gradients'): fn(q, k, v, do, problem) returns (dq, dk, dv), (dq, dk, dv, dsinks), "
                        f"(o, lse, dq, dk, dv) or (o, lse, dq, dk, dv, dsinks); it returned {got}")
    out = list(out)
    o, lse = (out.pop(0), out.pop(0)) if len(out) >= 5 else (None, None)
    dq, dk, dv = out[:3]
    return o, lse, dq, dk, dv, (out[3] if len(out) == 4 else None)


def _judge(q, k, v, o, lse, do, grads, p, layout, judge_kw):
    dq, dk, dv, dsinks = grads
    kw = p.keywords()
    if layout == "bshd" and p.layout == "bhsd":
        kw["layout"] = "bshd"  # the kernel was handed [B, S, H, D] tensors: judged so
    judge_kw = dict(judge_kw)
    repro = judge_kw.pop("repro", None)
    # flashcheck drew the inputs, NaN and Inf included (dist "nonfinite"): judged on their propagation.
    report = check_backward(q, k, v, o, lse, do, dq, dk, dv, dsinks=dsinks, allow_nonfinite_inputs=True,
                            **judge_kw, **kw)
    if repro is not None:
        report._set_repro(repro)
        if judge_kw.get("html") is not None:
            report.save_html(judge_kw["html"])  # again, now naming the line that replays it
    return report


class BackwardKernel:
    """A backward fn as the campaign's kernel(q, k, v, problem, do): its o (and lse) for the campaign
    to judge, after its gradients passed check_backward; BackwardFailed when they did not.

    A fn that returns only gradients has no forward output: the campaign is then handed the fp64
    oracle's O rounded to o's dtype (and no LSE), which it judges as a forward like any other, and
    fuzz reports the forward as not computed by the kernel. That O is flashcheck's, never the kernel's,
    so no verdict about the kernel rests on it."""

    def __init__(self, fn, mode, backend, device, layout, judge_kw):
        self.fn, self.mode, self.backend, self.device, self.layout = fn, mode, backend, device, layout
        self.judge_kw = judge_kw
        self.forward_computed = None  # whether fn returned o (set on its first call)

    def __call__(self, q, k, v, p, do):
        if p.page_size and p.page_order == "shared":
            # A problem property, so a decline (never shrunk to), not a failure.
            raise Unsupported("backward: a paged cache whose sequences share pages (check_backward does not judge "
                              "summed slots yet)")
        o, lse, *grads = _run(self.fn, self.mode, q, k, v, do, p)
        self.forward_computed = o is not None
        report = _judge(q, k, v, None, None, do, grads, p, self.layout, self.judge_kw)
        if o is None:
            kw = p.keywords()
            if self.layout == "bshd" and p.layout == "bhsd":
                kw["layout"] = "bshd"
            o = _narrowed(reference(q, k, v, **kw)[0], p.out_dtype)
        if not report:
            raise BackwardFailed(report, (o, lse))
        return (o, lse) if lse is not None else o


class BackwardReplay(Replayed, BackwardReport):
    """A replayed backward case (flashcheck.replay(..., backward=...)): its BackwardReport, with how many
    of its runs failed (Replayed)."""


def replay_backward(fn, mode, problem, dist, seed, *, runs, backend, device, layout, lse_base, empty_row_lse, max_rows,
                    tile_q, tile_kv, alibi_lse, html=None, repro=None):
    """replay() of a backward case: fn run `runs` times on fresh inputs (and the same dO), each run's
    gradients and forward output judged by check_backward; a BackwardReport with `reproduced`. html: a
    path for the kept run's page (judged again with the error maps); repro: the line it names."""
    kept, failed = None, 0
    judge_kw = dict(empty_row_lse=empty_row_lse, max_rows=max_rows, tile_q=tile_q, tile_kv=tile_kv,
                    alibi_lse=alibi_lse, lse_base=lse_base or "e")
    for _ in range(runs):
        q, k, v, do, p = make_backward_case(problem, dist, seed, backend=backend, device=device)
        if layout == "bshd" and p.layout == "bhsd":
            q, k, v, do = (_to_bshd(x) for x in (q, k, v, do))
        o, lse, *grads = _run(fn, mode, q, k, v, do, p)
        if lse_base is None:  # declared without LSE: whatever fn returns there is not judged
            lse = None
        args = (q, k, v, o, lse, do, grads, p, layout)
        report = _judge(*args, judge_kw)
        failed += not report
        if kept is None or (not report and kept[0]):
            kept = (report, args)
    report, args = kept
    if html is not None:  # the kept run judged again, with the page's error maps
        report = _judge(*args, dict(judge_kw, html=html, repro=repro))
    elif repro is not None:
        report._set_repro(repro)
    report.__class__ = BackwardReplay
    report.reproduced = {"runs": runs, "failed": failed}
    return report


def failure_summary(report):
    """The failed gradients (and forward) of a kept failure, one line: "dk fails baseline_relative; ..."."""
    return "; ".join(_failed_gradients(report))
