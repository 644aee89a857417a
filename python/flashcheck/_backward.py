"""The backward pass from Python: reference_backward (the fp64 backward oracle's dQ, dK, dV) and
check_backward (a backward kernel's gradients judged per gradient, its forward output beside them),
over C API 5 (fc_reference_backward, fc_check_backward). The problem and every tensor go through the
forward's own argument handling (_args.build): the keywords, layouts and variants are check()'s."""
import collections
import ctypes
import json
from pathlib import Path

import numpy as np

from . import _api, _lib
from ._tensors import FP8, is_torch, kind_of, plain_view, tensor_view

GradientVerdict = collections.namedtuple("GradientVerdict", "name passed failed criteria worst")
GradientVerdict.__doc__ = """One gradient's verdict: name ("dq", "dk", "dv", "dsinks"), passed, the names of its failed
criteria, {criterion: {"pass", "value", "limit", "detail"}}, and its worst element (a Worst: for dq
(b, query head, row, col), for dk and dv (b, KV head, key, col), for dsinks (0, head, 0, 0); b is the
sequence; q_tile and kv_tile are -1) or None."""


class BackwardReport:
    """The verdict on a backward kernel's gradients. bool(report) is the whole verdict: every gradient's
    criteria and, when o was given, the forward's; str(report) is the forward's text then the
    backward's."""

    def __init__(self, handle):
        self._h = handle
        forward = _lib.lib().fc_backward_report_forward(handle)
        # The forward's report belongs to this one (freed with it): its Report must not free it.
        self.forward = _api.Report(forward, owner=self) if forward else None

    def __del__(self):
        if getattr(self, "_h", None):
            try:
                _lib.lib().fc_backward_report_free(self._h)
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the module down
                pass
            self._h = None

    def __bool__(self):
        return bool(_lib.lib().fc_backward_report_pass(self._h))

    @property
    def passed(self):
        return bool(self)

    @property
    def failed(self):
        """Failed criteria as "dk: baseline_relative", gradients in order, then "forward: cosine"."""
        L = _lib.lib()
        return [L.fc_backward_report_failed_name(self._h, i).decode()
                for i in range(L.fc_backward_report_failed_count(self._h))]

    @property
    def gradients(self):
        """{name: GradientVerdict}, in order dq, dk, dv (and dsinks when it was given)."""
        L = _lib.lib()
        listed = {g["name"]: g for g in self.to_dict()["backward"]["gradients"]}
        out = {}
        for i in range(L.fc_backward_report_gradient_count(self._h)):
            name = L.fc_backward_report_gradient_name(self._h, i).decode()
            loc = _lib.Location()
            worst = None
            if L.fc_backward_report_gradient_worst(self._h, i, ctypes.byref(loc)):
                worst = _api.Worst(loc.b, loc.h, loc.row, loc.col, loc.q_tile, loc.kv_tile, loc.kernel, loc.oracle)
            criteria = {c["name"]: {k: c[k] for k in ("pass", "value", "limit", "detail")}
                        for c in listed[name]["criteria"]}
            out[name] = GradientVerdict(name, bool(L.fc_backward_report_gradient_pass(self._h, i)),
                                        [n for n, c in criteria.items() if not c["pass"]], criteria, worst)
        return out

    @property
    def problem(self):
        a = _lib.init(_lib.Attention2)
        _lib.ok(_lib.lib().fc_backward_report_problem2(self._h, ctypes.byref(a)), "report problem")
        return _api.Problem._from_c2(a)

    def to_dict(self):
        """{"pass", "backward": the gradients' report, "forward": check()'s report or None}."""
        return json.loads(_lib.lib().fc_backward_report_json(self._h).decode(errors="replace"))

    def __str__(self):
        text = _lib.lib().fc_backward_report_text(self._h).decode(errors="replace")
        return (str(self.forward) + text) if self.forward is not None else text

    def __repr__(self):
        verdict = "PASS" if self else "FAIL " + ",".join(self.failed)
        return f"<flashcheck.BackwardReport {verdict}: {self.problem.line}>"

    def html(self):
        """One self-contained HTML page: the forward's sections when o was judged (else a line saying it
        was not), then each gradient's criteria, worst element and tiles, and its heatmap when the check
        computed error maps (check_backward(..., html=...))."""
        return _lib.lib().fc_backward_report_html(self._h).decode(errors="replace")

    def save_html(self, path):
        Path(path).write_text(self.html(), encoding="utf-8")

    def _set_repro(self, line):
        _lib.ok(_lib.lib().fc_backward_report_set_repro(self._h, line.encode(errors="replace")), "report")


def _require_shape(x, name, like, like_name):
    if tuple(x.shape) != tuple(like.shape):
        raise ValueError(f"{name} has shape {tuple(x.shape)}; it must have {like_name}'s shape {tuple(like.shape)}")


def _o_shape(call, layout):
    if layout == "thd":
        return (call.tokens_q, call.heads_q, call.head_dim_v)
    if layout == "bshd":
        return (call.batch, call.seq_q, call.heads_q, call.head_dim_v)
    return (call.batch, call.heads_q, call.seq_q, call.head_dim_v)


def _output_kind(call, do, layout, o_given):
    """o's dtype, which dO must have (checked with dO's shape): the inputs' dtype, or for fp8 inputs o's
    when given, else dO's own (bf16 or f16), which then sets the problem's output dtype."""
    if do is None:
        raise TypeError("do (dO, the gradient of the loss with respect to o) is required")
    kind = kind_of(do, "do")
    in_kind = _lib.DTYPE_NAMES[call.problem.dtype]
    if in_kind not in FP8:
        out_kind = in_kind
    elif o_given:
        out_kind = _lib.DTYPE_NAMES[call.problem.out_dtype]
    elif kind in ("bf16", "f16"):
        out_kind = kind
        call.problem.out_dtype = _lib.DTYPES[kind]
    else:
        raise TypeError(f"do is {kind}; the output gradient of fp8 inputs is bf16 or f16")
    if kind != out_kind:
        raise TypeError(f"do is {kind}; dO must be in o's dtype ({out_kind}), as the forward wrote o")
    shape = _o_shape(call, layout)
    if tuple(do.shape) != shape:
        raise ValueError(f"do has shape {tuple(do.shape)}; it must have o's shape {shape} (layout {layout!r})")
    return out_kind


def _device_footprint(x):
    """(device, address, shape, byte strides, item size) of a torch tensor off the host, else None: such a
    tensor reaches the C API as a host copy of its own, where its aliasing no longer shows."""
    if not is_torch(x) or x.device.type == "cpu" or x.numel() == 0:
        return None
    return (str(x.device), x.data_ptr(), tuple(x.shape), tuple(s * x.element_size() for s in x.stride()),
            x.element_size())


class _Addresses:
    """An array interface over device addresses: numpy's exact overlap test reads only the numbers."""

    def __init__(self, address, shape, strides, item):
        self.__array_interface__ = {"data": (address, True), "shape": shape, "strides": strides,
                                    "typestr": f"|V{item}", "version": 3}


def footprints_share_memory(a, b):
    """Whether two device footprints share a byte (exactly: interleaved views that share no element do not)."""
    if a is None or b is None or a[0] != b[0]:
        return False
    x, y = (np.asarray(_Addresses(*f[1:])) for f in (a, b))
    return bool(np.shares_memory(x, y, max_work=None))


def _refuse_device_aliasing(inputs, grads):
    """Gradients on a device (CUDA) sharing memory with an input or another gradient, named as the C API
    names host memory's."""
    ins = [(n, _device_footprint(x)) for n, x in inputs if x is not None]
    gs = [(n, _device_footprint(x)) for n, x in grads if x is not None]
    for i, (gn, gf) in enumerate(gs):
        for n, f in ins:
            if footprints_share_memory(gf, f):
                raise ValueError(f"{gn} shares memory with {n}: a gradient buffer must not alias an input (the "
                                 "gradients are written where the inputs are read)")
        for n, f in gs[i + 1:]:
            if footprints_share_memory(gf, f):
                raise ValueError(f"{gn} shares memory with {n}: each gradient needs its own elements")


def _forward_keywords(kw):
    return {n: kw[n] for n in ("causal", "scale", "window", "window_size", "softcap", "alibi_slopes", "alibi", "sinks",
                               "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_k",
                               "block_table", "cache_seqlens", "descale_q", "descale_k", "descale_v", "layout", "dtype")}


def check_backward(q, k, v, o, lse, do, dq, dk, dv, *, dsinks=None, causal="none", scale=None, window=None,
                   window_size=None, softcap=0.0, alibi_slopes=None, alibi="symmetric", sinks=None, cu_seqlens_q=None,
                   cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, block_table=None,
                   cache_seqlens=None, descale_q=None, descale_k=None, descale_v=None, layout="bhsd", dtype=None,
                   lse_base="e", empty_row_lse="-inf", alibi_lse="exact", max_rows=4096, tile_q=128, tile_kv=128,
                   allow_nonfinite_inputs=False, html=None):
    """Judges a backward kernel's gradients dq, dk, dv (and dsinks) for inputs q, k, v and output
    gradient do against flashcheck's fp64 backward oracle, per gradient: unwritten (poison), NaN/Inf
    positions, exact zeros (rows that see no key, keys no row sees), cosine and rel_l2, and the
    baseline-relative error against same-dtype FlashAttention-2 backward replicas
    (verify/TOLERANCE.md, Backward). o and lse, the forward output the backward was given, are judged
    as check() judges them, reported apart (report.forward); o=None leaves the forward out.

    do: o's shape and dtype. dq, dk, dv: q's, k's and v's shapes (a paged cache's gradients are caches
    of k's shape), in the inputs' dtype (fp8 inputs: o's dtype); with respect to the values the
    forward computes with (fp8: x * descale); GQA: dk and dv summed over each KV head's query group.
    dsinks: float32 [Hq] when the kernel computes the sinks' gradient (None: not judged). A gradient
    sharing memory with q, k, v, o, lse, do, a side tensor or another gradient is refused (views that
    interleave in one packed buffer without sharing an element are not aliasing). A paged cache whose
    sequences share a slot is refused (FlashcheckError) until the criteria judge summed slots.
    html: a path to also write the HTML page, with each gradient's heatmap (report.html() gives it).
    The other keywords are check()'s. Returns a BackwardReport: bool() is the verdict, .gradients the
    per-gradient verdicts, .forward the forward's Report (or None), .failed the failed criteria.
    """
    if lse_base not in ("e", "2"):
        raise ValueError(f"lse_base must be 'e' or '2', got {lse_base!r}")
    if empty_row_lse not in _lib.EMPTY_ROW_LSE:
        raise ValueError(f"empty_row_lse must be '-inf' or '+inf', got {empty_row_lse!r}")
    if alibi_lse not in _lib.ALIBI_LSE:
        raise ValueError(f"alibi_lse must be 'exact' or 'key_offset', got {alibi_lse!r}")
    kw = _forward_keywords(locals())
    for name, x in (("dq", dq), ("dk", dk), ("dv", dv)):
        if x is None:
            raise TypeError(f"{name} is required (reference_backward() computes the oracle's gradients)")
    _refuse_device_aliasing((("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do), ("sinks", sinks)),
                            (("dq", dq), ("dk", dk), ("dv", dv), ("dsinks", dsinks)))
    call = _api._call(q, k, v, o, lse, kw)
    in_kind = _lib.DTYPE_NAMES[call.problem.dtype]
    out_kind = _output_kind(call, do, layout, o is not None)
    grad_kind = out_kind if in_kind in FP8 else in_kind
    grads = _lib.init(_lib.Gradients)
    keep = []
    for name, x, like, like_name in (("dq", dq, q, "q"), ("dk", dk, k, "k"), ("dv", dv, v, "v")):
        kind = kind_of(x, name)
        if kind != grad_kind:
            raise TypeError(f"{name} is {kind}; the gradients of {in_kind} inputs are {grad_kind}")
        _require_shape(x, name, like, like_name)
    for name, x in (("d_out", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        view, owner, _ = tensor_view(x, "do" if name == "d_out" else name)
        setattr(grads, name, view)
        keep.append(owner)
    if dsinks is not None:
        if sinks is None:
            raise ValueError("dsinks is given but sinks is not: the problem has no sinks to differentiate")
        view, owner, kind = tensor_view(dsinks, "dsinks")
        if kind != "f32":
            raise TypeError(f"dsinks is {kind}; the sinks' gradient is float32, as the sinks are")
        grads.dsinks = view
        keep.append(owner)
    opt = _lib.init(_lib.CheckOptions)
    opt.lse_base = _lib.LSE_BASES[lse_base]
    opt.empty_row_lse = _lib.EMPTY_ROW_LSE[empty_row_lse]
    opt.alibi_lse = _lib.ALIBI_LSE[alibi_lse]
    opt.max_rows = _api.whole("max_rows", max_rows)
    opt.tile_q, opt.tile_kv = _api.whole("tile_q", tile_q), _api.whole("tile_kv", tile_kv)
    opt.allow_nonfinite_inputs = int(bool(allow_nonfinite_inputs))
    opt.error_maps = int(html is not None)
    handle = ctypes.c_void_p()
    _lib.ok(_lib.lib().fc_check_backward(ctypes.byref(call.problem), ctypes.byref(call.tensors), ctypes.byref(grads),
                                         ctypes.byref(opt), ctypes.byref(handle)), "flashcheck.check_backward")
    report = BackwardReport(handle.value)
    if html is not None:
        report.save_html(html)
    return report


def reference_backward(q, k, v, do, *, causal="none", scale=None, window=None, window_size=None, softcap=0.0,
                       alibi_slopes=None, alibi="symmetric", sinks=None, cu_seqlens_q=None, cu_seqlens_k=None,
                       max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, block_table=None, cache_seqlens=None,
                       descale_q=None, descale_k=None, descale_v=None, layout="bhsd", dtype=None):
    """The fp64 backward oracle's gradients of the loss sum(do * O) for inputs q, k, v: (dq, dk, dv) as
    numpy float64 arrays of q's, k's and v's shapes in their layout, and dsinks (float64 [Hq]) after
    them when sinks are given. Computed by flashcheck's CPU backward oracle, every variant in fp64, on
    the inputs' exact values: gradients with respect to the values the forward computes with (fp8:
    x * descale); GQA sums dk and dv over each KV head's query group; a row that sees no key adds
    nothing (its dq row is 0). Elements nothing reads — "thd" padding rows past cu_seqlens[-1], a
    paged cache's unused pages and slots — are 0; a slot several sequences read gets their sum.

    do: o's shape, in o's dtype (the inputs' dtype; for fp8 inputs bf16 or f16, which do's dtype
    says). The other keywords are check()'s."""
    kw = _forward_keywords(locals())
    call = _api._call(q, k, v, None, None, kw)
    _output_kind(call, do, layout, False)
    grads = _lib.init(_lib.Gradients)
    view, owner, _ = tensor_view(do, "do")
    grads.d_out = view
    call.keep.append(owner)
    results = []
    for name, like in (("dq", q), ("dk", k), ("dv", v)):
        x = np.zeros(tuple(like.shape), np.float64)
        setattr(grads, name, plain_view(x, _lib.FC_F64))
        results.append(x)
    if sinks is not None:
        ds = np.zeros(call.heads_q, np.float64)
        grads.dsinks = plain_view(ds, _lib.FC_F64)
        results.append(ds)
    _lib.ok(_lib.lib().fc_reference_backward(ctypes.byref(call.problem), ctypes.byref(call.tensors),
                                             ctypes.byref(grads)), "flashcheck.reference_backward")
    return tuple(results)


check_backward.__doc__ += _api._KEYWORDS_DOC
reference_backward.__doc__ += _api._KEYWORDS_DOC
