"""Problems, reports, and judging one output: check, assert_close, make_inputs, replay."""
import collections
import ctypes
import json
import math
import numbers
import operator
from pathlib import Path

import numpy as np

from . import _args, _lib
from ._tensors import NUMPY_DTYPES, array_view, from_bits

INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


def whole(name, value, lo=1, hi=INT64_MAX):
    """value as a Python int in [lo, hi], or ValueError/TypeError naming the argument. ctypes would
    wrap what does not fit its field without a word (c_int64(2**64 + 1) is 1, c_uint64(-1) is
    2**64 - 1), and int() would cut 2.5 to 2: a bad argument must not become another one."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        f = float(value)
        if not f.is_integer():  # also NaN and infinities
            raise ValueError(f"{name} must be a whole number, got {value!r}")
        value = int(f)
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a whole number, got {type(value).__name__} {value!r}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {v}")
    return v


def finite(name, value, positive=False, nonzero=False):
    """value as a finite float, or ValueError naming the argument (NaN would otherwise mean 'the
    default scale' in the C API, silently)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be a finite number, got {f}")
    if positive and f <= 0:
        raise ValueError(f"{name} must be greater than 0, got {f}")
    if nonzero and f == 0:
        raise ValueError(f"{name} must not be 0")
    return f


Worst = collections.namedtuple("Worst", "b h row col q_tile kv_tile kernel oracle")
Worst.__doc__ = """The worst element: (b, h, row, col), its q-tile, the KV tile of its row's last visible key,
and its value beside the oracle's."""


class Problem:
    """One attention problem, as a kernel receives it from flashcheck.fuzz (problem model 2).

    Sizes: batch, heads_q, heads_kv, seq_q, seq_kv (the longest sequence's when lengths are listed),
    head_dim_qk, head_dim_v; query head h reads KV head h // (heads_q // heads_kv). causal is
    "none", "top_left" (key j visible to query i iff j <= i) or "bottom_right" (iff
    j <= i + Skv - Sq); dtype "f32", "f16", "bf16", "e4m3" or "e5m2" (of q, k, v; out_dtype is o's);
    scale the softmax scale to use (1/sqrt(head_dim_qk) unless the problem sets another).

    Variants (plain attention leaves them all at their defaults): window (left, right), inclusive,
    -1 unbounded; softcap (0: none); alibi "none", "symmetric" or "signed" (alibi_per_batch: slopes
    [B, Hq]); has_sinks; layout "bhsd", "bshd" or "thd"; seqlens_q / seqlens_kv (per-sequence
    lengths of a packed batch, or a paged cache's lengths), seqused_kv (keys used per sequence);
    page_size (> 0: k and v are a paged cache [num_pages, page_size, Hkv, D]); descale "none",
    "tensor" or "head" (fp8).

    The tensors a kernel needs beside q, k and v are set on the problems fuzz, replay and make_case
    hand out (None otherwise), as numpy arrays or torch tensors like q: alibi_slopes, sinks,
    descale_q, descale_k, descale_v (float32); cu_seqlens_q, cu_seqlens_k, seqused_k, block_table,
    cache_seqlens (int32), in FlashAttention's form. problem.keywords() gives them, with the fields,
    as the keyword arguments of check() and reference().
    """

    _FIELDS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim_qk", "head_dim_v")
    SIDE_TENSORS = ("alibi_slopes", "sinks", "descale_q", "descale_k", "descale_v", "cu_seqlens_q", "cu_seqlens_k",
                    "seqused_k", "block_table", "cache_seqlens")

    def __init__(self, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v, causal="none",
                 dtype="bf16", scale=None, *, window=(-1, -1), softcap=0.0, alibi="none", alibi_per_batch=False,
                 has_sinks=False, layout="bhsd", seqlens_q=None, seqlens_kv=None, seqused_kv=None, page_size=0,
                 page_order="identity", out_dtype=None, descale="none"):
        self.batch, self.heads_q, self.heads_kv = whole("batch", batch), whole("heads_q", heads_q), whole("heads_kv", heads_kv)
        # Listed lengths may all be 0 (empty sequences); a dense problem's are at least 1.
        self.seq_q = whole("seq_q", seq_q, 0 if seqlens_q is not None else 1)
        self.seq_kv = whole("seq_kv", seq_kv, 0 if seqlens_kv is not None else 1)
        self.head_dim_qk, self.head_dim_v = whole("head_dim_qk", head_dim_qk), whole("head_dim_v", head_dim_v)
        self.causal = _causal_name(causal)
        if dtype not in _lib.DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_lib.DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        self._custom_scale = None if scale is None else finite("scale", scale, nonzero=True)
        self.scale = self._custom_scale if scale is not None else 1.0 / math.sqrt(self.head_dim_qk)
        left, right = window
        self.window = (whole("window", left, -(1 << 63)), whole("window", right, -(1 << 63)))
        self.softcap = finite("softcap", softcap)
        for name, value, allowed in (("alibi", alibi, _lib.ALIBIS), ("layout", layout, _lib.LAYOUTS),
                                     ("page_order", page_order, _lib.PAGE_ORDERS), ("descale", descale, _lib.DESCALES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {sorted(allowed)}, got {value!r}")
        self.alibi, self.alibi_per_batch, self.has_sinks = alibi, bool(alibi_per_batch), bool(has_sinks)
        self.layout, self.page_order, self.descale = layout, page_order, descale
        lists = {}
        for name, value in (("seqlens_q", seqlens_q), ("seqlens_kv", seqlens_kv), ("seqused_kv", seqused_kv)):
            lists[name] = None if value is None else [whole(name, x, 0) for x in value]
        self.seqlens_q, self.seqlens_kv, self.seqused_kv = lists["seqlens_q"], lists["seqlens_kv"], lists["seqused_kv"]
        self.page_size = whole("page_size", page_size, 0)
        if out_dtype is not None and out_dtype not in _lib.DTYPES:
            raise ValueError(f"out_dtype must be one of {sorted(_lib.DTYPES)}, got {out_dtype!r}")
        self._out_dtype = out_dtype
        for name in self.SIDE_TENSORS:
            setattr(self, name, None)

    @property
    def out_dtype(self):
        """o's dtype: the dtype, or for fp8 inputs the one set (bf16 by default)."""
        if self.dtype in ("e4m3", "e5m2"):
            return self._out_dtype or "bf16"
        return self.dtype

    @property
    def plain(self):
        """No variant at all: what API 2 and `flashcheck check` files of model 1 describe."""
        return (self.window == (-1, -1) and self.softcap == 0 and self.alibi == "none" and not self.has_sinks
                and self.layout == "bhsd" and self.seqlens_q is None and self.seqlens_kv is None
                and self.seqused_kv is None and self.page_size == 0 and self.dtype in _lib.PLAIN_DTYPES)

    @classmethod
    def parse(cls, line):
        """From the one-line form flashcheck prints, e.g. "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128
        causal=bottom_right dtype=bf16", variants included ("... window=128,0 layout=thd sq=3,0,17 ...")."""
        if not isinstance(line, str):
            raise TypeError(f"a problem line is a str, got {type(line).__name__}")
        a = _lib.init(_lib.Attention2)
        lengths = (ctypes.c_int32 * 256)()
        needed = ctypes.c_size_t(0)
        status = _lib.lib().fc_attention2_parse(line.encode(), ctypes.byref(a), lengths, 256, ctypes.byref(needed))
        if status != _lib.FC_OK and needed.value > 256:  # a long batch: again with room for its lengths
            lengths = (ctypes.c_int32 * needed.value)()
            status = _lib.lib().fc_attention2_parse(line.encode(), ctypes.byref(a), lengths, needed.value, None)
        _lib.ok(status, "problem")
        return cls._from_c2(a)

    @classmethod
    def _from_c(cls, a):
        return cls(*(getattr(a, f) for f in cls._FIELDS), causal=_lib.CAUSAL_NAMES[a.causal],
                   dtype=_lib.DTYPE_NAMES[a.dtype], scale=None if math.isnan(a.scale) else a.scale)

    @classmethod
    def _from_c2(cls, a):
        """From an Attention2 struct (its length arrays read for batch (+ 1) entries)."""
        b = a.batch

        def read(ptr, n):
            return [ptr[i] for i in range(n)] if ptr else None

        cu_q, cu_k = read(a.cu_seqlens_q, b + 1), read(a.cu_seqlens_k, b + 1)
        diffs = lambda cu: None if cu is None else [cu[i + 1] - cu[i] for i in range(b)]  # noqa: E731
        seqlens_kv = read(a.cache_seqlens, b) if a.page_size > 0 else diffs(cu_k)
        return cls(*(getattr(a, f) for f in cls._FIELDS), causal=_lib.CAUSAL_NAMES[a.causal],
                   dtype=_lib.DTYPE_NAMES[a.dtype], scale=None if math.isnan(a.scale) else a.scale,
                   window=(a.window_left, a.window_right), softcap=a.softcap, alibi=_lib.ALIBI_NAMES[a.alibi],
                   alibi_per_batch=bool(a.alibi_per_batch), has_sinks=bool(a.sinks),
                   layout=_lib.LAYOUT_NAMES[a.layout], seqlens_q=diffs(cu_q), seqlens_kv=seqlens_kv,
                   seqused_kv=read(a.seqused_k, b), page_size=a.page_size,
                   page_order=_lib.PAGE_ORDER_NAMES[a.page_order],
                   out_dtype=None if a.out_dtype < 0 else _lib.DTYPE_NAMES[a.out_dtype],
                   descale=_lib.DESCALE_NAMES[a.descale])

    def _to_c(self):
        """API 2's struct: plain problems only."""
        if not self.plain:
            raise ValueError(f"the problem {self.line!r} has variants, which API 2's struct cannot hold")
        return _lib.Attention(*(getattr(self, f) for f in self._FIELDS), _lib.DTYPES[self.dtype],
                              _lib.CAUSALS[self.causal],
                              math.nan if self._custom_scale is None else float(self._custom_scale))

    def _to_c2(self):
        """(Attention2 struct, the length arrays it points into: keep them alive while it is used)."""
        a = _lib.init(_lib.Attention2)
        for f in self._FIELDS:
            setattr(a, f, getattr(self, f))
        a.dtype, a.causal, a.layout = _lib.DTYPES[self.dtype], _lib.CAUSALS[self.causal], _lib.LAYOUTS[self.layout]
        a.out_dtype = -1 if self._out_dtype is None else _lib.DTYPES[self._out_dtype]
        a.scale = math.nan if self._custom_scale is None else float(self._custom_scale)
        a.window_left, a.window_right = self.window
        a.softcap = self.softcap
        a.alibi, a.alibi_per_batch, a.sinks = _lib.ALIBIS[self.alibi], int(self.alibi_per_batch), int(self.has_sinks)
        a.descale, a.page_size, a.page_order = _lib.DESCALES[self.descale], self.page_size, _lib.PAGE_ORDERS[self.page_order]
        keep = []

        def array(values, prefix):
            x = np.cumsum([0] + list(values)) if prefix else np.asarray(values)
            if x.size and x.max() > np.iinfo(np.int32).max:
                raise ValueError("a length of the problem does not fit int32 (FlashAttention's length arrays)")
            x = np.ascontiguousarray(x, dtype=np.int32)
            if x.shape[0] != self.batch + (1 if prefix else 0):
                raise ValueError(f"the problem's per-sequence lengths list {x.shape[0] - prefix} sequences, batch is "
                                 f"{self.batch}")
            keep.append(x)
            return x.ctypes.data_as(_lib.I32P)

        if self.seqlens_q is not None:
            a.cu_seqlens_q = array(self.seqlens_q, True)
        if self.seqlens_kv is not None:
            if self.page_size > 0:
                a.cache_seqlens = array(self.seqlens_kv, False)
            else:
                a.cu_seqlens_k = array(self.seqlens_kv, True)
        if self.seqused_kv is not None:
            a.seqused_k = array(self.seqused_kv, False)
        return a, keep

    @property
    def line(self):
        a, keep = self._to_c2()
        return _lib.problem_line(a)

    def keywords(self):
        """The keyword arguments of check() and reference() for this problem: the fields, and the
        side tensors set on it (by fuzz, replay or make_case)."""
        kw = {"causal": self.causal, "scale": self._custom_scale, "layout": self.layout}
        if self.window != (-1, -1):
            kw["window"] = self.window
        if self.softcap:
            kw["softcap"] = self.softcap
        if self.alibi != "none":
            kw["alibi"] = self.alibi
        if self.dtype in ("e4m3", "e5m2"):
            kw["dtype"] = self.dtype  # numpy holds fp8 as uint8 bit patterns: the dtype names them
        for name in self.SIDE_TENSORS:
            if getattr(self, name) is not None:
                kw[name] = getattr(self, name)
        if self.layout == "thd":  # FlashAttention's varlen bounds: the longest sequence
            kw["max_seqlen_q"] = self.seq_q
            if not self.page_size:
                kw["max_seqlen_k"] = self.seq_kv
        return kw

    # Tensor shapes in the problem's layout (paged caches: k and v are [num_pages, page_size, Hkv, D],
    # num_pages being the cache's own; k_shape and v_shape are then None).
    def _shape(self, heads, seq, total, dim):
        if self.layout == "thd":
            return (total, heads, dim)
        if self.layout == "bshd":
            return (self.batch, seq, heads, dim)
        return (self.batch, heads, seq, dim)

    q_shape = property(lambda s: s._shape(s.heads_q, s.seq_q, sum(s.seqlens_q or []), s.head_dim_qk))
    k_shape = property(lambda s: None if s.page_size else s._shape(s.heads_kv, s.seq_kv, sum(s.seqlens_kv or []), s.head_dim_qk))
    v_shape = property(lambda s: None if s.page_size else s._shape(s.heads_kv, s.seq_kv, sum(s.seqlens_kv or []), s.head_dim_v))
    o_shape = property(lambda s: s._shape(s.heads_q, s.seq_q, sum(s.seqlens_q or []), s.head_dim_v))
    lse_shape = property(lambda s: (s.heads_q, sum(s.seqlens_q or [])) if s.layout == "thd" else (s.batch, s.heads_q, s.seq_q))

    def __eq__(self, other):
        return isinstance(other, Problem) and self.line == other.line

    def __hash__(self):
        return hash(self.line)

    def __str__(self):
        return self.line

    def __repr__(self):
        return f"flashcheck.Problem.parse({self.line!r})"


def _causal_name(causal):
    if causal is True:
        raise ValueError("causal=True is ambiguous when seq_q != seq_kv: say causal='top_left' (torch SDPA's "
                         "is_causal) or causal='bottom_right' (flash-attn >= 2.1's causal=True)")
    if causal is False or causal is None:
        return "none"
    if causal not in _lib.CAUSALS:
        raise ValueError(f"causal must be 'none', 'top_left' or 'bottom_right', got {causal!r}")
    return causal


class Report:
    """The judge's report on one output. bool(report) is the verdict; str(report) is the text
    `flashcheck check` prints."""

    def __init__(self, handle, owner=None):
        self._h = handle
        self._owner = owner  # a campaign owns its failures' reports; otherwise this object does

    def __del__(self):
        if getattr(self, "_owner", True) is None and self._h:
            try:
                _lib.lib().fc_report_free(self._h)
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the module down
                pass
            self._h = None

    def __bool__(self):
        return bool(_lib.lib().fc_report_pass(self._h))

    @property
    def passed(self):
        return bool(self)

    @property
    def failed(self):
        """Names of the failed criteria."""
        L = _lib.lib()
        return [L.fc_report_failed_name(self._h, i).decode() for i in range(L.fc_report_failed_count(self._h))]

    @property
    def worst(self):
        loc = _lib.Location()
        if not _lib.lib().fc_report_worst(self._h, ctypes.byref(loc)):
            return None
        return Worst(loc.b, loc.h, loc.row, loc.col, loc.q_tile, loc.kv_tile, loc.kernel, loc.oracle)

    @property
    def problem(self):
        a = _lib.init(_lib.Attention2)
        _lib.ok(_lib.lib().fc_report_problem2(self._h, ctypes.byref(a)), "report problem")
        return Problem._from_c2(a)

    @property
    def criteria(self):
        """{name: {"pass", "value", "limit", "detail"}}, in the report's order."""
        return {c["name"]: {k: c[k] for k in ("pass", "value", "limit", "detail")} for c in self.to_dict()["criteria"]}

    def to_dict(self):
        """The report as `flashcheck check --json` writes it."""
        return json.loads(_lib.lib().fc_report_json(self._h).decode(errors="replace"))

    def html(self):
        """One self-contained HTML page (heatmaps only when the check computed error maps: html=...)."""
        return _lib.lib().fc_report_html(self._h).decode(errors="replace")

    def save_html(self, path):
        Path(path).write_text(self.html(), encoding="utf-8")
        return path

    def _set_repro(self, command):
        _lib.ok(_lib.lib().fc_report_set_repro(self._h, command.encode()), "set repro")

    def __str__(self):
        return _lib.lib().fc_report_text(self._h).decode(errors="replace")

    def __repr__(self):
        verdict = "PASS" if self else "FAIL " + ",".join(self.failed)
        return f"<flashcheck.Report {verdict}: {self.problem.line}>"


_KEYWORDS_DOC = """
    Tensors are numpy arrays or torch tensors on any device (a CUDA tensor is copied to the host),
    passed as their own bits and strides: any strided view with a contiguous last dimension, never
    converted. q, k, v share one dtype: float32, float16, bf16 (torch.bfloat16, numpy uint16 bit
    patterns, ml_dtypes.bfloat16) or fp8 (torch.float8_e4m3fn / float8_e5m2, ml_dtypes' float8, or
    numpy uint8 bit patterns with dtype="e4m3" / "e5m2"). Shapes per layout: "bhsd" q [B, Hq, Sq, Dqk],
    k [B, Hkv, Skv, Dqk], v [B, Hkv, Skv, Dv]; "bshd" [B, S, H, D] each; "thd" (packed sequences)
    q [Tq, Hq, Dqk], k and v [Tk, Hkv, D] with cu_seqlens_q and cu_seqlens_k (int32 [B + 1], from 0,
    non-decreasing; rows past their last entry are padding). A paged KV cache: k, v
    [num_pages, page_size, Hkv, D] with block_table (int [B, max_pages]) and cache_seqlens (int [B]),
    q in "bhsd", "bshd" or "thd". seqused_k (int [B]): keys each sequence uses (dense or packed caches).
    max_seqlen_q / max_seqlen_k (FlashAttention's varlen bounds) are optional and only checked: one
    below the longest sequence is refused.

    causal: "none", "top_left" or "bottom_right" (True is refused as ambiguous). scale: None for
    1/sqrt(Dqk). window (or window_size, FlashAttention's name): (left, right), inclusive, -1 unbounded
    (key j visible to query i iff i + d - left <= j <= i + d + right, d = Skv - Sq unless top_left; a
    causal mask makes right min(right, 0)). softcap: c > 0 caps scores at
    c*tanh(s/c) (0 or None: none). alibi_slopes: float32 [Hq] or [B, Hq], with alibi="symmetric"
    (-slope*|i + d - j|, FlashAttention) or "signed" (slope*(j - i)). sinks: float32 [Hq], one logit
    per query head in every row's softmax denominator. descale_q/k/v: fp8 descale factors, [1] or
    [B, Hkv]. dtype: the inputs' dtype where numpy cannot say it (fp8 as uint8).
    Bad input is a ValueError (or TypeError) naming the argument."""


def _call(q, k, v, o, lse, kw):
    return _args.build(q, k, v, o, lse, causal_code=_lib.CAUSALS[_causal_name(kw.pop("causal"))], **kw)


def check(q, k, v, o, lse=None, *, causal="none", scale=None, window=None, window_size=None, softcap=0.0,
          alibi_slopes=None, alibi="symmetric", sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
          max_seqlen_k=None, seqused_k=None, block_table=None, cache_seqlens=None, descale_q=None, descale_k=None,
          descale_v=None, layout="bhsd", dtype=None, lse_base="e", empty_row_lse="-inf", alibi_lse="exact",
          max_rows=4096, tile_q=128, tile_kv=128, allow_nonfinite_inputs=False, html=None):
    """Judges an attention forward's output o (and lse) for inputs q, k, v against the fp64 oracle.

    o: in the layout of q with Dv, in the inputs' dtype (fp8 inputs: bf16 or f16). lse: float32
    [B, Hq, Sq] ("thd": [Hq, Tq]) or None. lse_base: "e" or "2" (declared, never guessed).
    empty_row_lse: "-inf" or "+inf" (what the kernel writes for a row that sees no key). alibi_lse:
    "exact" or "key_offset" (FlashAttention 2's causal ALiBi LSE, LSE + slope*(i + d)). Rows beyond
    max_rows per (b, h) are sampled. html: a path to also write the HTML report with its heatmaps
    to. Returns a Report.
    """
    if lse_base not in ("e", "2"):
        raise ValueError(f"lse_base must be 'e' or '2', got {lse_base!r}")
    if empty_row_lse not in _lib.EMPTY_ROW_LSE:
        raise ValueError(f"empty_row_lse must be '-inf' or '+inf', got {empty_row_lse!r}")
    if alibi_lse not in _lib.ALIBI_LSE:
        raise ValueError(f"alibi_lse must be 'exact' or 'key_offset', got {alibi_lse!r}")
    if o is None:
        raise TypeError("o is required (reference() computes the oracle's output without one)")
    call = _call(q, k, v, o, lse, dict(
        causal=causal, scale=scale, window=window, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, alibi=alibi, sinks=sinks, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
        block_table=block_table, cache_seqlens=cache_seqlens, descale_q=descale_q, descale_k=descale_k,
        descale_v=descale_v, layout=layout, dtype=dtype))
    opt = _lib.init(_lib.CheckOptions)
    opt.lse_base = _lib.LSE_BASES[lse_base]
    opt.empty_row_lse = _lib.EMPTY_ROW_LSE[empty_row_lse]
    opt.alibi_lse = _lib.ALIBI_LSE[alibi_lse]
    opt.max_rows, opt.tile_q, opt.tile_kv = whole("max_rows", max_rows), whole("tile_q", tile_q), whole("tile_kv", tile_kv)
    opt.allow_nonfinite_inputs = int(bool(allow_nonfinite_inputs))
    opt.error_maps = int(html is not None)
    handle = ctypes.c_void_p()
    _lib.ok(_lib.lib().fc_check2(ctypes.byref(call.problem), ctypes.byref(call.tensors), ctypes.byref(opt),
                                 ctypes.byref(handle)), "flashcheck.check")
    report = Report(handle.value)
    if html is not None:
        report.save_html(html)
    return report


check.__doc__ += _KEYWORDS_DOC


def reference(q, k, v, *, causal="none", scale=None, window=None, window_size=None, softcap=0.0, alibi_slopes=None,
              alibi="symmetric", sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              seqused_k=None, block_table=None, cache_seqlens=None, descale_q=None, descale_k=None, descale_v=None,
              layout="bhsd", dtype=None):
    """The fp64 oracle's (O, LSE) for inputs q, k, v: numpy float64 arrays, computed by flashcheck's
    CPU oracle (every variant, in fp64) on the inputs' exact values (fp8: times their descale).

    O is in the input layout: [B, Hq, Sq, Dv] ("bhsd"), [B, Sq, Hq, Dv] ("bshd") or [Tq, Hq, Dv]
    ("thd", Tq = q.shape[0]). LSE is [B, Hq, Sq], or [Hq, Tq] for "thd"; natural log. A row that sees
    no key has O = 0 and LSE = -inf. NaN/Inf inputs reach exactly the rows that see them. With "thd",
    the padding rows past cu_seqlens_q[-1] are no query's: their O rows and LSE entries are NaN, so a
    comparison that includes them fails instead of passing on a made-up value (compare
    [:cu_seqlens_q[-1]]).
    """
    call = _call(q, k, v, None, None, dict(
        causal=causal, scale=scale, window=window, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, alibi=alibi, sinks=sinks, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
        block_table=block_table, cache_seqlens=cache_seqlens, descale_q=descale_q, descale_k=descale_k,
        descale_v=descale_v, layout=layout, dtype=dtype))
    o, lse, o_view, lse_view = _args.output_views(call, layout)
    _lib.ok(_lib.lib().fc_reference(ctypes.byref(call.problem), ctypes.byref(call.tensors), ctypes.byref(o_view),
                                    ctypes.byref(lse_view)), "flashcheck.reference")
    return o, lse


reference.__doc__ += _KEYWORDS_DOC


def assert_close(q, k, v, o, lse=None, **kwargs):
    """check(...) for tests: raises AssertionError with the report's text unless every criterion
    passes; returns the report otherwise."""
    report = check(q, k, v, o, lse, **kwargs)
    if not report:
        raise AssertionError("flashcheck: the output fails " + ", ".join(report.failed) + "\n" + str(report))
    return report


def _as_problem(problem):
    return problem if isinstance(problem, Problem) else Problem.parse(problem)


class _Inputs:
    """fc_make_inputs2's handle."""

    def __init__(self, handle):
        self.handle = handle

    def __del__(self):
        if self.handle:
            try:
                _lib.lib().fc_inputs_free(self.handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the module down
                pass
            self.handle = None


def make_case(problem, dist="normal", seed=0, *, backend="numpy", device=None):
    """(q, k, v, problem) exactly as flashcheck draws them for (problem, dist, seed): q, k, v in the
    problem's own layout and dtype (numpy: bf16 as uint16, fp8 as uint8 bit patterns; torch: tensors
    on `device`; a paged cache's slots no sequence uses hold NaN), and a copy of the problem with
    the side tensors it needs set (alibi_slopes, sinks, descales, cu_seqlens_q/k, seqused_k,
    block_table, cache_seqlens) in the same backend. What fuzz handed the kernel for that case."""
    return draw_case(problem, dist, seed, backend, device, backward=False)[:4]


def draw_case(problem, dist, seed, backend, device, backward):
    """make_case's (q, k, v, problem) and dO: None, or with `backward` the case's dO (o's shape and
    dtype), its inputs then drawn as a backward campaign's (fc_make_backward_inputs)."""
    p = _as_problem(problem)
    if dist not in _lib.DISTS:
        raise ValueError(f"dist must be one of {_lib.DISTS}, got {dist!r}")
    backend, device = resolve_backend(backend, device)
    a, keep = p._to_c2()
    handle = ctypes.c_void_p()
    make = _lib.lib().fc_make_backward_inputs if backward else _lib.lib().fc_make_inputs2
    _lib.ok(make(ctypes.byref(a), _lib.DISTS.index(dist), whole("seed", seed, 0, UINT64_MAX), ctypes.byref(handle)),
            "make_inputs")
    owner = _Inputs(handle.value)
    got, tensors = _lib.init(_lib.Attention2), _lib.init(_lib.Tensors)
    _lib.ok(_lib.lib().fc_inputs_get(owner.handle, ctypes.byref(got), ctypes.byref(tensors)), "make_inputs")
    q, k, v = (from_bits(np.array(array_view(getattr(tensors, n), NUMPY_DTYPES[p.dtype])), p.dtype, backend, device)
               for n in ("q", "k", "v"))
    drawn = with_side_tensors(Problem._from_c2(got), got, tensors, backend, device)
    do = None
    if backward:
        view = _lib.TensorView()
        _lib.ok(_lib.lib().fc_inputs_d_out(owner.handle, ctypes.byref(view)), "make_inputs")
        do = from_bits(np.array(array_view(view, NUMPY_DTYPES[drawn.out_dtype])), drawn.out_dtype, backend, device)
    return q, k, v, drawn, do


def with_side_tensors(p, a, tensors, backend, device):
    """p with the side tensors of a C problem (its length arrays) and tensors struct set, copied into
    the backend's arrays."""
    def put(x):
        if backend == "numpy":
            return x
        import torch
        return torch.from_numpy(x).to(device)

    for name in ("alibi_slopes", "sinks", "descale_q", "descale_k", "descale_v"):
        view = getattr(tensors, name)
        if view.data:
            setattr(p, name, put(np.array(array_view(view, np.float32))))
    if tensors.block_table.data:
        p.block_table = put(np.array(array_view(tensors.block_table, np.int32)))
    for name, count in (("cu_seqlens_q", p.batch + 1), ("cu_seqlens_k", p.batch + 1), ("seqused_k", p.batch),
                        ("cache_seqlens", p.batch)):
        ptr = getattr(a, name)
        if ptr:
            setattr(p, name, put(np.array([ptr[i] for i in range(count)], dtype=np.int32)))
    return p


def make_inputs(problem, dist="normal", seed=0, *, backend="numpy", device=None, layout=None):
    """(q, k, v) exactly as flashcheck draws them for (problem, dist, seed): what fuzz handed the
    kernel for that case, in the problem's layout (make_case also gives the side tensors a variant
    needs). numpy backend: float32/float16 arrays, bf16 as uint16 and fp8 as uint8 bit patterns;
    torch: tensors on `device`. layout="bshd" hands a plain (bhsd) problem's tensors transposed to
    [B, S, H, D], as fuzz(layout="bshd") does."""
    p = _as_problem(problem)
    q, k, v, _ = make_case(p, dist, seed)
    return tuple(deliver(x, p.dtype, backend, device, layout if p.layout == "bhsd" else None) for x in (q, k, v))


def resolve_backend(backend, device):
    if backend not in ("numpy", "torch"):
        raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
    if backend == "torch":
        import torch  # noqa: F401  (the torch backend needs it; numpy alone does not)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
    return backend, device


def deliver(bits, kind, backend, device, layout):
    """A numpy array of raw values/bits as the kernel receives it; layout "bshd" transposes a plain
    problem's BHSD tensor (fuzz's layout= for kernels of [B, S, H, D] tensors)."""
    backend, device = resolve_backend(backend, device)
    if layout == "bshd":
        bits = np.ascontiguousarray(bits.transpose(0, 2, 1, 3))
    elif layout not in ("bhsd", None):
        raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")
    return from_bits(bits, kind, backend, device)


def split_output(out):
    """A kernel's return value as (o, lse or None): o alone, or a pair (o, lse)."""
    if isinstance(out, (tuple, list)):
        if len(out) == 2:
            return out[0], out[1]
        if len(out) == 1:
            return out[0], None
        raise TypeError(f"a kernel returns o or (o, lse); it returned a {type(out).__name__} of {len(out)}")
    return out, None

