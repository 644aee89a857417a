"""flashcheck.fuzz: a Python kernel through flashcheck's campaign (the one `flashcheck run` runs)."""
import collections
import ctypes
import json
import sys
import traceback
from pathlib import Path

import numpy as np

from . import _lib
from ._api import (UINT64_MAX, Problem, Report, deliver, finite, make_case, resolve_backend, split_output, whole,
                   with_side_tensors)
from ._replay import _to_bshd, replay
from ._tensors import NUMPY_DTYPES, array_view, to_bits


class Unsupported(Exception):
    """Raised by a fuzzed kernel to decline a problem it does not support (a shape, dtype or mask it
    refuses at dispatch). The case is counted as declined (skipped, as `flashcheck run` skips a
    problem a plugin's supports() refuses): never failed, never a step of shrinking. The message is
    the reason the summary shows. Decline on the problem alone, never on the input values: shrinking
    re-runs smaller problems on fresh inputs."""


NOTHING_TESTED_EXIT = 125  # `flashcheck run`'s kCannotTest: every case skipped, nothing judged


class Failure:
    """One kept failing case, shrunk: its problem, input distribution and seed, the report, and the
    Python that reproduces it."""

    def __init__(self, problem, dist, seed, report, repro):
        self.problem, self.dist, self.seed, self.report, self.repro = problem, dist, seed, report, repro

    def __repr__(self):
        return f"<flashcheck.Failure {self.problem.line} dist={self.dist} seed={self.seed}>"


class FuzzResult:
    """The campaign's outcome; str() is what fuzz printed.

    cases = passed + failed + declined. `declined` (alias `skipped`, the CLI's word) counts cases
    the kernel declined (flashcheck.Unsupported, or supports= returning False); decline_reasons maps
    each reason to how often it was given (shrinking's calls included). status is "passed",
    "failed" or "nothing tested" (every case declined). bool() is True only for "passed": no case
    failed *and* at least one was judged, so `assert flashcheck.fuzz(...)` cannot pass on a kernel
    that declined everything. exit_code is `flashcheck run`'s for the same outcome: 0, 1, or 125.
    """

    def __init__(self, name, seed, counts, failures, campaign, text, decline_reasons=None):
        self.name, self.seed = name, seed
        self.cases, self.passed, self.failed, self.declined = counts
        self.failures = failures
        self.decline_reasons = dict(decline_reasons or {})
        self._campaign = campaign
        self._text = text

    @property
    def skipped(self):
        return self.declined

    @property
    def tested(self):
        """Cases whose output was judged (or that failed by raising)."""
        return self.passed + self.failed

    @property
    def status(self):
        if self.failed:
            return "failed"
        return "passed" if self.passed else "nothing tested"

    @property
    def exit_code(self):
        return {"passed": 0, "failed": 1, "nothing tested": NOTHING_TESTED_EXIT}[self.status]

    def __bool__(self):
        return self.status == "passed"

    def to_dict(self):
        """Summary and every kept failure's case and report (with its Python reproduction)."""
        d = json.loads(_lib.lib().fc_campaign_json(self._campaign.handle).decode())
        d.update(declined=self.declined, status=self.status, decline_reasons=self.decline_reasons)
        return d

    def __str__(self):
        return self._text

    def __repr__(self):
        return (f"<flashcheck.FuzzResult {self.name}: {self.status}: {self.passed} passed, {self.failed} failed, "
                f"{self.declined} declined of {self.cases} (seed {self.seed})>")


class _Campaign:
    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if self.handle:
            try:
                _lib.lib().fc_campaign_free(self.handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the module down
                pass
            self.handle = None


def _kernel_ref(kernel):
    """(import line or None, expression) naming the kernel in reproduction code."""
    module = getattr(kernel, "__module__", None)
    qualname = getattr(kernel, "__qualname__", None) or getattr(kernel, "__name__", None)
    if not qualname or "<" in qualname or not module:
        return None, "kernel"
    top = qualname.split(".")[0]
    if module == "__main__":
        return None, qualname
    return f"from {module} import {top}", qualname


def _write_output(x, kind, view, layout, name, p):
    """A kernel's output (o, or lse in float32) written into the campaign's buffer through its
    strides, after checking its dtype and shape; never rounded. A packed (thd) batch's padding rows
    are no row's output and are left as staged: a Python kernel returns whole arrays and cannot
    avoid "writing" them."""
    a, got = to_bits(x, name)
    if got != kind:
        if name == "lse":
            raise TypeError(f"the kernel returned lse as {got}; LSE must be float32 (flashcheck never converts it)")
        raise TypeError(f"the kernel returned {name} as {got} for a problem whose output is {kind}; return that dtype "
                        "(flashcheck never rounds a kernel's output)")
    if layout == "bshd" and p.layout == "bhsd" and name == "o" and a.ndim == 4:
        a = np.ascontiguousarray(a.transpose(0, 2, 1, 3))  # the kernel was handed [B, S, H, D]
    dst = array_view(view, NUMPY_DTYPES[kind])
    if tuple(a.shape) != dst.shape:
        raise ValueError(f"the kernel returned {name} of shape {tuple(a.shape)}, expected {dst.shape}"
                         + (" (as BHSD)" if layout == "bshd" and name == "o" else ""))
    if p.layout == "thd":
        rows = sum(p.seqlens_q)
        if name == "o":
            dst[:rows] = a[:rows]
        else:
            dst[:, :rows] = a[:, :rows]
    else:
        dst[...] = a


# The fuzz keywords that declare problem model 2's variants, as fc_fuzz_options fields.
def _variant_options(opt, windows, softcap, alibi, alibi_per_batch, sinks, layouts, seqused, paged, page_sizes,
                     out_dtypes, descales, alibi_lse):
    keep = []
    opt.windows, opt.softcap, opt.sinks = int(bool(windows)), int(bool(softcap)), int(bool(sinks))
    forms = () if alibi is None else ((alibi,) if isinstance(alibi, str) else tuple(alibi))
    for f in forms:
        if f not in ("symmetric", "signed"):
            raise ValueError(f"alibi must be among ['signed', 'symmetric'], got {f!r}")
    opt.alibi = sum(1 << _lib.ALIBIS[f] for f in set(forms))
    opt.alibi_per_batch = int(bool(alibi_per_batch))
    if alibi_per_batch and not forms:
        raise ValueError("alibi_per_batch needs an ALiBi form in alibi")
    shapes = ("bhsd",) if layouts is None else ((layouts,) if isinstance(layouts, str) else tuple(layouts))
    for l in shapes:
        if l not in _lib.LAYOUTS:
            raise ValueError(f"layouts must be among ['bhsd', 'bshd', 'thd'], got {l!r}")
    opt.layouts = sum(1 << _lib.LAYOUTS[l] for l in set(shapes))
    opt.seqused, opt.paged = int(bool(seqused)), int(bool(paged))
    if page_sizes is not None:
        if not paged:
            raise ValueError("page_sizes needs paged=True")
        sizes = (ctypes.c_int64 * len(page_sizes))(*[whole("page_sizes", x) for x in page_sizes])
        keep.append(sizes)
        opt.page_sizes, opt.num_page_sizes = ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64)), len(page_sizes)
    outs = () if out_dtypes is None else ((out_dtypes,) if isinstance(out_dtypes, str) else tuple(out_dtypes))
    for d in outs:
        if d not in ("bf16", "f16"):
            raise ValueError(f"out_dtypes (of fp8 inputs) must be among ['bf16', 'f16'], got {d!r}")
    opt.out_dtypes = sum(1 << _lib.DTYPES[d] for d in set(outs))
    grains = () if descales is None else ((descales,) if isinstance(descales, str) else tuple(descales))
    for d in grains:
        if d not in ("tensor", "head"):
            raise ValueError(f"descales must be among ['head', 'tensor'], got {d!r}")
    opt.descales = sum(1 << _lib.DESCALES[d] for d in set(grains))
    if alibi_lse not in _lib.ALIBI_LSE:
        raise ValueError(f"alibi_lse must be 'exact' or 'key_offset', got {alibi_lse!r}")
    opt.alibi_lse = _lib.ALIBI_LSE[alibi_lse]
    return keep


def fuzz(kernel, cases=200, seed=0, dtypes=None, head_dims=None, causal=None, max_seq=300, *, lse_base="auto",
         empty_row_lse="-inf", gqa=True, dv_ne_dqk=True, backend="numpy", device=None, layout="bhsd", name=None,
         shrink=True, max_failures=1, fail_fast=False, tile_q=128, tile_kv=128, max_rows=4096, max_work=3e7,
         html_dir=None, verbose=True, progress=None, supports=None, windows=False, softcap=False, alibi=None,
         alibi_per_batch=False, sinks=False, layouts=None, seqused=False, paged=False, page_sizes=None,
         out_dtypes=None, descales=None, alibi_lse="exact", equal_lengths=False, mha_only=False, seq_multiple=1,
         nonfinite=True, backward=False):
    """Fuzzes kernel(q, k, v, problem) -> o or (o, lse) over random problems and inputs.

    Problems come from flashcheck's generators with `flashcheck run`'s case numbering: the same seed
    and declared space (dtypes, head_dims, causal, gqa, dv_ne_dqk, max_seq) give the same problems.
    Each output is judged like `flashcheck check`; failures are shrunk (batch, heads, sequence
    lengths, head dims, distribution) and the smallest is printed with Python that reproduces it.

    kernel: receives q, k, v in the problem's layout (BHSD for plain problems, BSHD with
    layout="bshd") as numpy arrays (float32, float16; bf16 as uint16 and fp8 as uint8 bit patterns)
    or, with backend="torch", torch tensors on `device` (default cuda when available), and a
    flashcheck.Problem (shapes, causal, dtype, scale, every variant field, and the side tensors the
    problem needs: problem.alibi_slopes, problem.sinks, problem.cu_seqlens_q, ...; see Problem). It
    returns o in the problem's layout and output dtype, and optionally lse (float32 [B, Hq, Sq], or
    [Hq, Tq] for "thd").
    dtypes: of "f32", "f16", "bf16", "e4m3", "e5m2" (default: all but fp8 for torch, f32 and f16 for
    numpy). Variants the kernel computes (default none; problems are drawn within them as
    `flashcheck run` draws a kernel's declared variants): windows, softcap, alibi (forms:
    "symmetric", "signed"), alibi_per_batch, sinks, layouts ("bhsd", "bshd", "thd"), seqused, paged,
    page_sizes, out_dtypes (of fp8 inputs: "bf16", "f16"), descales ("tensor", "head"); alibi_lse
    "exact" or "key_offset" (the kernel's ALiBi LSE convention). A variant allowed that the campaign
    cannot draw is refused (FlashcheckError naming it), never left out silently. Limits the kernel
    declares, so that problems are drawn within them instead of declined (a kernel like Triton's
    tutorial takes Sq = Skv, MHA, whole 64-row blocks): equal_lengths (Sq = Skv in every sequence),
    mha_only (Hq = Hkv; the same as gqa=False), seq_multiple (every length a multiple of it),
    max_seq, head_dims, dv_ne_dqk, dtypes, causal. nonfinite: the kernel propagates NaN/Inf in q, k,
    v as the oracle does (a NaN a row sees makes that row NaN), and about one case in ten carries
    one (dist "nonfinite"); False: finite inputs only (for a kernel that clamps or squashes them,
    which hides bad data). head_dims:
    Dqk/Dv values the kernel takes (default: any, drawn up to 256, values off the multiples of 8
    included; declare the ones your kernel compiles). causal: masks it takes, of
    "none", "top_left", "bottom_right" (default all). lse_base: "e", "2", None (writes none) or
    "auto" (one call decides whether it returns an LSE; its base is then taken as "e": a base-2 LSE
    must be declared). empty_row_lse: "-inf" or "+inf". html_dir: write an HTML report per kept
    failure there. supports: optional predicate supports(problem) -> bool; a problem it refuses is
    declined without calling the kernel. A kernel may also raise flashcheck.Unsupported("why") to
    decline. Declined cases are counted apart (skipped, never failed) and never shrunk to.
    Returns a FuzzResult: falsy when any case failed, and when every case was declined (nothing
    tested).

    backward: fuzz a backward kernel instead; each case's gradients are judged by check_backward
    against the fp64 backward oracle, for the case's dO (standard normal in o's dtype and layout,
    drawn from the case's seed as `flashcheck run --backward` and the goldens draw it, so a replay
    draws it again: make_backward_case), and a failure shrinks as a forward's does. A non-finite
    input (dist "nonfinite") goes only where every correct backward agrees with the oracle, as
    `flashcheck run --backward` places it: in q at a row that sees every key, in k or v only when
    no pair of its sequence is masked (a tile GEMM multiplies masked pairs, 0*Inf), else nowhere. backward="gradients": kernel(q, k, v, do, problem) returns
    (dq, dk, dv), or (o, lse, dq, dk, dv) with its forward output (lse may be None), with dsinks
    appended when it computes the sinks' gradient; gradients in q's, k's and v's shapes and layout
    and the inputs' dtype (fp8: o's). backward="autograd" (backend="torch"): kernel(q, k, v,
    problem) returns o or (o, lse) and is differentiated by torch: q, k, v (and problem.sinks)
    require grad, o.backward(do), their .grad judged. backward=True picks "autograd" for a
    torch.autograd.Function subclass (called through .apply) or a callable of 4 positional arguments,
    "gradients" for one of 5. A returned o is judged as the forward's, reported beside the
    gradients; without one the forward is not judged (the campaign is handed the oracle's rounded O:
    see BackwardKernel). Each failure's report is a BackwardReport (which gradient failed, its worst
    element, the forward apart); replay(kernel, ..., backward=...) reproduces it; html_dir gets its
    page (the gradients' verdicts and heatmaps, the forward's when fn returned o). A paged cache whose
    sequences share pages is declined (check_backward does not judge summed slots yet).
    """
    backend, device = resolve_backend(backend, device)
    name = name or getattr(kernel, "__qualname__", None) or getattr(kernel, "__name__", None) or "kernel"
    fn, mode, backward_failed = kernel, None, ()
    if backward is not False:
        from . import _fuzz_backward as fb

        mode = fb.resolve_mode(kernel, backward, backend)
        if mode == "autograd" and dtypes is not None and any(d in ("e4m3", "e5m2") for d in
                                                             ((dtypes,) if isinstance(dtypes, str) else dtypes)):
            raise ValueError("dtypes: torch cannot differentiate fp8 tensors, so backward='autograd' takes f32, f16, bf16")
        kernel = fb.BackwardKernel(fn, mode, backend, device, layout, dict(
            empty_row_lse=empty_row_lse, max_rows=max_rows, tile_q=tile_q, tile_kv=tile_kv, alibi_lse=alibi_lse))
        backward_failed = fb.BackwardFailed  # the adapter's verdict: a failed case, never a kernel exception
    if dtypes is None:
        dtypes = ("f32", "f16", "bf16") if backend == "torch" else ("f32", "f16")
    dtypes = (dtypes,) if isinstance(dtypes, str) else tuple(dtypes)
    causals = ("none", "top_left", "bottom_right") if causal is None else \
        ((causal,) if isinstance(causal, str) else tuple(causal))
    for d in dtypes:
        if d not in _lib.DTYPES:
            raise ValueError(f"dtypes must be among {sorted(_lib.DTYPES)}, got {d!r}")
    if layout not in ("bhsd", "bshd"):
        raise ValueError(f"layout must be 'bhsd' or 'bshd' (the drawn layouts are layouts=), got {layout!r}")
    for c in causals:
        if c not in _lib.CAUSALS:
            raise ValueError(f"causal must be among {sorted(_lib.CAUSALS)}, got {c!r}")
    if lse_base not in ("auto", "e", "2", None):
        raise ValueError(f"lse_base must be 'auto', 'e', '2' or None, got {lse_base!r}")
    if empty_row_lse not in _lib.EMPTY_ROW_LSE:
        raise ValueError(f"empty_row_lse must be '-inf' or '+inf', got {empty_row_lse!r}")

    opt = _lib.init(_lib.FuzzOptions)
    name_bytes = name.encode()
    opt.name = name_bytes
    opt.cases, opt.seed, opt.max_seq = whole("cases", cases), whole("seed", seed, 0, UINT64_MAX), whole("max_seq", max_seq)
    opt.max_work, opt.max_rows = finite("max_work", max_work, positive=True), whole("max_rows", max_rows)
    opt.dtypes = sum(1 << _lib.DTYPES[d] for d in set(dtypes))
    opt.causals = sum(1 << _lib.CAUSALS[c] for c in set(causals))
    dims = None
    if head_dims is not None:
        dims = (ctypes.c_int64 * len(head_dims))(*[whole("head_dims", d) for d in head_dims])
        opt.head_dims, opt.num_head_dims = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)), len(head_dims)
    opt.dv_ne_dqk, opt.gqa = int(bool(dv_ne_dqk)), int(bool(gqa) and not mha_only)
    opt.equal_lengths, opt.nonfinite = int(bool(equal_lengths)), int(bool(nonfinite))
    opt.seq_multiple = whole("seq_multiple", seq_multiple)
    opt.backward = int(mode is not None)  # the backward's placement of non-finite inputs, and dO per case
    opt.empty_row_lse = _lib.EMPTY_ROW_LSE[empty_row_lse]
    opt.tile_q, opt.tile_kv = whole("tile_q", tile_q), whole("tile_kv", tile_kv)
    opt.shrink, opt.fail_fast, opt.max_failures = int(bool(shrink)), int(bool(fail_fast)), whole("max_failures", max_failures, 0)
    opt.progress = int(sys.stderr.isatty() if progress is None else bool(progress))
    keep = _variant_options(opt, windows, softcap, alibi, alibi_per_batch, sinks, layouts, seqused, paged,
                            page_sizes, out_dtypes, descales, alibi_lse)

    if lse_base == "auto":
        # A call on a drawn problem tells whether the kernel returns an LSE (its base is never
        # guessed: "e" unless declared). A kernel may reject some problems, so a few are tried.
        opt.lse_base = _lib.FC_LSE_LOG_E
        # Declined problems are passed over (they cost nothing); errors count against a budget of 10.
        first_error, raised = None, 0
        for index in range(max(int(cases), 50)):
            drawn = _lib.Case2()
            drawn.problem.struct_size = ctypes.sizeof(_lib.Attention2)
            lengths = (ctypes.c_int32 * 4096)()
            _lib.ok(_lib.lib().fc_draw_case2(ctypes.byref(opt), index, ctypes.byref(drawn), lengths, 4096, None), "fuzz")
            p0 = Problem._from_c2(drawn.problem)
            if supports is not None and not supports(p0):
                continue
            if mode is None:
                q, k, v, p0 = make_case(p0, _lib.DISTS[drawn.dist], drawn.input_seed, backend=backend, device=device)
                args = [q, k, v]
            else:  # the case's inputs and dO, as the campaign will hand them
                q, k, v, do, p0 = fb.make_backward_case(p0, _lib.DISTS[drawn.dist], drawn.input_seed, backend=backend,
                                                        device=device)
                args = [q, k, v, do]
            if p0.layout == "bhsd" and layout == "bshd":
                args = [_to_bshd(x) for x in args]
            try:
                out = kernel(*args[:3], p0, *args[3:])
            except Unsupported:
                continue
            except backward_failed as e:  # judged and failed; what it returned still says whether it has an LSE
                out = e.forward
            except Exception as e:  # noqa: BLE001 - the campaign will report it case by case
                first_error, raised = first_error or e, raised + 1
                if raised == 10:
                    raise RuntimeError("flashcheck.fuzz: the kernel raised on 10 drawn problems, so whether it returns "
                                       "an LSE is unknown; pass lse_base ('e', '2' or None)") from first_error
                continue
            lse_base = "e" if split_output(out)[1] is not None else None
            break
        else:
            # It declined every problem tried: the campaign will most likely say "nothing tested".
            # No LSE is asked for, so a kernel without one is not failed for that reason alone.
            lse_base = None
    opt.lse_base = _lib.LSE_BASES[lse_base]

    errors = []  # (problem line, formatted traceback) of kernel exceptions
    interrupted = []
    reasons = collections.Counter()  # why the kernel declined, over every call (shrinking's too)

    def decline(why):
        why = why or "declined"
        reasons[why] += 1
        _lib.lib().fc_set_callback_error(why.encode(errors="replace"))
        return _lib.FC_CALLBACK_DECLINE

    def call(user, pa, tp):
        try:
            a, t = pa.contents, tp.contents
            p = Problem._from_c2(a)
            if supports is not None and not supports(p):
                return decline("supports() returned False")
            p = with_side_tensors(p, a, t, backend, device)
            ins = [deliver(np.array(array_view(getattr(t, n), NUMPY_DTYPES[p.dtype])), p.dtype, backend, device,
                           layout if p.layout == "bhsd" else None) for n in ("q", "k", "v")]
            if mode is not None:  # the case's dO, lent to this callback
                ins.append(fb.callback_d_out(p, backend, device, layout))
            o, lse = split_output(kernel(*ins[:3], p, *ins[3:]))
            _write_output(o, p.out_dtype, t.o, layout, "o", p)
            if t.lse.data:
                if lse is None:
                    raise TypeError("the kernel returned no LSE, but the campaign declares one (lse_base="
                                    f"{lse_base!r}); pass lse_base=None for a kernel without LSE")
                _write_output(lse, "f32", t.lse, layout, "lse", p)
            return 0
        except Unsupported as e:  # the kernel declined the problem: skipped, as the CLI skips unsupported ones
            return decline(str(e) or "flashcheck.Unsupported")
        except backward_failed as e:  # the gradients failed: the case fails (and shrinks) as a wrong o does
            _lib.lib().fc_set_callback_error(str(e).encode(errors="replace"))
            return 1
        except Exception as e:  # a kernel error fails this case, as a throwing kernel does in `flashcheck run`
            if len(errors) < 3:
                errors.append((_lib.problem_line(pa.contents), traceback.format_exc()))
            _lib.lib().fc_set_callback_error(f"{type(e).__name__}: {e}".encode(errors="replace"))
            return 1
        except BaseException as e:  # KeyboardInterrupt, SystemExit: stop the campaign, then re-raise
            interrupted.append(e)
            _lib.lib().fc_set_callback_error(type(e).__name__.encode())
            return _lib.FC_CALLBACK_ABORT

    callback = _lib.KERNEL_CALLBACK2(call)
    handle = ctypes.c_void_p()
    status = _lib.lib().fc_fuzz2(callback, None, ctypes.byref(opt), ctypes.byref(handle))
    del keep
    if interrupted:
        raise interrupted[0]
    _lib.ok(status, "flashcheck.fuzz")
    campaign = _Campaign(handle.value)
    summary = _lib.CampaignSummary()
    _lib.lib().fc_campaign_get_summary(campaign.handle, ctypes.byref(summary))

    import_line, expr = _kernel_ref(fn)
    extra = "".join(f", {k}={v!r}" for k, v, default in (
        ("lse_base", lse_base, "e"), ("empty_row_lse", empty_row_lse, "-inf"), ("backend", backend, "numpy"),
        ("layout", layout, "bhsd"), ("backward", mode, None)) if v != default)
    failures = []
    for i in range(_lib.lib().fc_campaign_failure_count(campaign.handle)):
        case, rh = _lib.Case2(), ctypes.c_void_p()
        case.problem.struct_size = ctypes.sizeof(_lib.Attention2)
        _lib.ok(_lib.lib().fc_campaign_failure2(campaign.handle, i, ctypes.byref(case), ctypes.byref(rh)), "fuzz")
        p, dist = Problem._from_c2(case.problem), _lib.DISTS[case.dist]
        call_line = f"flashcheck.replay({expr}, {p.line!r}, dist={dist!r}, seed={case.input_seed}{extra})"
        report = Report(rh.value, owner=campaign)
        report._set_repro(call_line)
        html = None
        if html_dir is not None:
            Path(html_dir).mkdir(parents=True, exist_ok=True)
            html = Path(html_dir) / f"{name.replace('/', '_')}_{i}.html"
        if mode is not None:
            # The campaign kept the case as a failed callback; judged again, its report says which
            # gradient failed (and its page shows them). A fn that raises keeps the campaign's report
            # (its exception), and that report's page.
            try:
                report = fb.replay_backward(fn, mode, p, dist, case.input_seed, runs=1, backend=backend, device=device,
                                            layout=layout, lse_base=lse_base, empty_row_lse=empty_row_lse,
                                            max_rows=max_rows, tile_q=tile_q, tile_kv=tile_kv, alibi_lse=alibi_lse,
                                            html=html, repro=call_line)
            except Exception:  # noqa: BLE001 - its message is in the campaign's report already
                if html is not None:
                    report.save_html(html)
        lines = ["import flashcheck"]
        if import_line:
            lines.append(import_line)
        elif expr == "kernel":
            lines.append("kernel = ...  # the kernel you fuzzed (a lambda or a local function cannot be imported)")
        lines += [f"report = {call_line}", "print(report)"]
        failures.append(Failure(p, dist, case.input_seed, report, "\n".join(lines)))
        if html is not None and mode is None:
            replay(kernel, p, dist, case.input_seed, runs=1, lse_base=lse_base, empty_row_lse=empty_row_lse,
                   backend=backend, device=device, layout=layout, max_rows=max_rows, tile_q=tile_q, tile_kv=tile_kv,
                   alibi_lse=alibi_lse, html=html)

    status = "failed" if summary.failed else ("passed" if summary.passed else "nothing tested")
    out = [f"flashcheck.fuzz {'backward (' + mode + ') ' if mode else ''}{name}: {status}: {summary.passed} passed, {summary.failed} failed, {summary.skipped} "
           f"declined of {summary.cases} cases (seed {seed}, dtypes {'/'.join(dtypes)}, causal {'/'.join(causals)})"]
    if mode is not None and kernel.forward_computed is False:
        out.append("forward: not judged (the kernel returns gradients only; the campaign's forward output is flashcheck's "
                   "own rounded fp64 O)")
    if status == "nothing tested":
        out.append(f"nothing tested: the kernel declined all {summary.cases} cases; this is not a pass "
                   f"(bool(result) is False, exit_code {NOTHING_TESTED_EXIT} as `flashcheck run`'s)")
    if reasons:
        shown = reasons.most_common(3)
        out.append("declined because: " + "; ".join(f"{n}x {why[:200]!r}" for why, n in shown) +
                   (f"; and {len(reasons) - 3} other reason(s)" if len(reasons) > 3 else ""))
    if errors:
        out.append(f"the kernel raised on {len(errors)}{'+' if len(errors) == 3 else ''} case(s); the first, on "
                   f"{errors[0][0]}:\n{errors[0][1].rstrip()}")
    if failures:
        f = failures[0]
        out.append(f"smallest failing case{'' if shrink else ' (not shrunk)'}: {f.problem.line}   inputs: "
                   f"dist={f.dist} seed={f.seed}")
        if mode is not None and hasattr(f.report, "gradients"):
            out.append("failed: " + fb.failure_summary(f.report))
        out.append(str(f.report).rstrip())
        out.append("reproduce in Python:\n    " + f.repro.replace("\n", "\n    "))
    text = "\n".join(out) + "\n"
    if verbose:
        print(text, end="")
    return FuzzResult(name, seed, (summary.cases, summary.passed, summary.failed, summary.skipped), failures,
                      campaign, text, reasons)
