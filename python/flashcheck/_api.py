"""Problems, reports, and judging one output: check, assert_close, make_inputs, replay."""
import collections
import ctypes
import json
import math
import numbers
import operator
from pathlib import Path

import numpy as np

from . import _lib
from ._tensors import NUMPY_DTYPES, buffer, from_bits, lse_bits, to_bits

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
    """One attention problem, as a kernel receives it from flashcheck.fuzz.

    Shapes (BHSD): q [batch, heads_q, seq_q, head_dim_qk], k [batch, heads_kv, seq_kv, head_dim_qk],
    v [batch, heads_kv, seq_kv, head_dim_v], o [batch, heads_q, seq_q, head_dim_v], lse
    [batch, heads_q, seq_q]; query head h reads KV head h // (heads_q // heads_kv). causal is "none",
    "top_left" (key j visible to query i iff j <= i) or "bottom_right" (iff j <= i + seq_kv - seq_q);
    dtype is "f32", "f16" or "bf16"; scale is the softmax scale to use (1/sqrt(head_dim_qk) unless
    the problem sets another).
    """

    _FIELDS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim_qk", "head_dim_v")

    def __init__(self, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v, causal="none",
                 dtype="bf16", scale=None):
        self.batch, self.heads_q, self.heads_kv = whole("batch", batch), whole("heads_q", heads_q), whole("heads_kv", heads_kv)
        self.seq_q, self.seq_kv = whole("seq_q", seq_q), whole("seq_kv", seq_kv)
        self.head_dim_qk, self.head_dim_v = whole("head_dim_qk", head_dim_qk), whole("head_dim_v", head_dim_v)
        self.causal = _causal_name(causal)
        if dtype not in _lib.DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_lib.DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        self._custom_scale = None if scale is None else finite("scale", scale, nonzero=True)
        self.scale = self._custom_scale if scale is not None else 1.0 / math.sqrt(self.head_dim_qk)

    @classmethod
    def parse(cls, line):
        """From the one-line form flashcheck prints, e.g. "b=1 hq=8 hkv=2 sq=97 skv=113 dqk=128 dv=128
        causal=bottom_right dtype=bf16"."""
        a = _lib.Attention()
        _lib.ok(_lib.lib().fc_attention_parse(line.encode(), ctypes.byref(a)), "problem")
        return cls._from_c(a)

    @classmethod
    def _from_c(cls, a):
        return cls(*(getattr(a, f) for f in cls._FIELDS), causal=_lib.CAUSAL_NAMES[a.causal],
                   dtype=_lib.DTYPE_NAMES[a.dtype], scale=None if math.isnan(a.scale) else a.scale)

    def _to_c(self):
        return _lib.Attention(*(getattr(self, f) for f in self._FIELDS), _lib.DTYPES[self.dtype],
                              _lib.CAUSALS[self.causal],
                              math.nan if self._custom_scale is None else float(self._custom_scale))

    @property
    def line(self):
        return _lib.problem_line(self._to_c())

    q_shape = property(lambda s: (s.batch, s.heads_q, s.seq_q, s.head_dim_qk))
    k_shape = property(lambda s: (s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk))
    v_shape = property(lambda s: (s.batch, s.heads_kv, s.seq_kv, s.head_dim_v))
    o_shape = property(lambda s: (s.batch, s.heads_q, s.seq_q, s.head_dim_v))
    lse_shape = property(lambda s: (s.batch, s.heads_q, s.seq_q))

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
        a = _lib.Attention()
        _lib.ok(_lib.lib().fc_report_problem(self._h, ctypes.byref(a)), "report problem")
        return Problem._from_c(a)

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


def _to_layout(a, layout, name):
    if layout == "bhsd":
        return a
    if layout == "bshd":  # [B, S, H, D] -> [B, H, S, D]: a transpose, exact
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3)) if a.ndim == 4 else a
    raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")


def check(q, k, v, o, lse=None, *, causal="none", scale=None, lse_base="e", empty_row_lse="-inf",
          max_rows=4096, layout="bhsd", tile_q=128, tile_kv=128, allow_nonfinite_inputs=False, html=None):
    """Judges an attention forward's output o (and lse) for inputs q, k, v against the fp64 oracle.

    q, k, v, o: numpy arrays or torch tensors (CPU or CUDA) of one dtype: float32, float16 or bf16
    (torch.bfloat16, numpy uint16 bit patterns or ml_dtypes.bfloat16); BHSD unless layout="bshd".
    lse: float32 [B, Hq, Sq] or None. causal: "none", "top_left" or "bottom_right". scale: None for
    1/sqrt(Dqk). lse_base: "e" or "2" (declared, never guessed). empty_row_lse: "-inf" or "+inf"
    (what the kernel writes for a row that sees no key). Rows beyond max_rows per (b, h) are
    sampled. html: a path to also write the HTML report with its heatmaps to. Returns a Report.
    """
    causal = _causal_name(causal)
    if lse_base not in ("e", "2"):
        raise ValueError(f"lse_base must be 'e' or '2', got {lse_base!r}")
    if empty_row_lse not in _lib.EMPTY_ROW_LSE:
        raise ValueError(f"empty_row_lse must be '-inf' or '+inf', got {empty_row_lse!r}")
    arrays = {}
    kinds = {}
    for name, x in (("q", q), ("k", k), ("v", v), ("o", o)):
        a, kinds[name] = to_bits(x, name)
        if a.ndim != 4:
            raise ValueError(f"{name} has shape {a.shape}; expected 4 dimensions ({layout.upper()})")
        arrays[name] = _to_layout(a, layout, name)
    if len(set(kinds.values())) != 1:
        raise TypeError("q, k, v and o must share one dtype; got " + ", ".join(f"{n}={d}" for n, d in kinds.items()))
    qa, ka, va, oa = arrays["q"], arrays["k"], arrays["v"], arrays["o"]
    B, Hq, Sq, Dqk = qa.shape
    _, Hkv, Skv, _ = ka.shape
    Dv = va.shape[3]
    for name, got, want in (("k", ka.shape, (B, Hkv, Skv, Dqk)), ("v", va.shape, (B, Hkv, Skv, Dv)),
                            ("o", oa.shape, (B, Hq, Sq, Dv))):
        if tuple(got) != want:
            raise ValueError(f"{name} has shape {tuple(got)} (as BHSD), expected {want} from q {qa.shape} and k/v")
    la = None
    if lse is not None:
        la = lse_bits(lse)
        if la.shape != (B, Hq, Sq):
            raise ValueError(f"lse has shape {la.shape}, expected {(B, Hq, Sq)}")
    p = Problem(B, Hq, Hkv, Sq, Skv, Dqk, Dv, causal=causal, dtype=kinds["q"], scale=scale)
    opt = _lib.init(_lib.CheckOptions)
    opt.lse_base = _lib.LSE_BASES[lse_base]
    opt.empty_row_lse = _lib.EMPTY_ROW_LSE[empty_row_lse]
    opt.max_rows, opt.tile_q, opt.tile_kv = whole("max_rows", max_rows), whole("tile_q", tile_q), whole("tile_kv", tile_kv)
    opt.allow_nonfinite_inputs = int(bool(allow_nonfinite_inputs))
    opt.error_maps = int(html is not None)
    handle = ctypes.c_void_p()
    a = p._to_c()
    _lib.ok(_lib.lib().fc_check(ctypes.byref(a), qa.ctypes.data, ka.ctypes.data, va.ctypes.data, oa.ctypes.data,
                                None if la is None else la.ctypes.data, ctypes.byref(opt), ctypes.byref(handle)),
            "flashcheck.check")
    report = Report(handle.value)
    if html is not None:
        report.save_html(html)
    return report


def assert_close(q, k, v, o, lse=None, **kwargs):
    """check(...) for tests: raises AssertionError with the report's text unless every criterion
    passes; returns the report otherwise."""
    report = check(q, k, v, o, lse, **kwargs)
    if not report:
        raise AssertionError("flashcheck: the output fails " + ", ".join(report.failed) + "\n" + str(report))
    return report


def _as_problem(problem):
    return problem if isinstance(problem, Problem) else Problem.parse(problem)


def make_inputs(problem, dist="normal", seed=0, *, backend="numpy", device=None, layout="bhsd"):
    """(q, k, v) exactly as flashcheck draws them for (problem, dist, seed): what fuzz handed the
    kernel for that case. numpy backend: float32/float16 arrays, bf16 as uint16 bit patterns; torch:
    tensors on `device`."""
    p = _as_problem(problem)
    if dist not in _lib.DISTS:
        raise ValueError(f"dist must be one of {_lib.DISTS}, got {dist!r}")
    dt = NUMPY_DTYPES[p.dtype]
    q, k, v = np.empty(p.q_shape, dt), np.empty(p.k_shape, dt), np.empty(p.v_shape, dt)
    a = p._to_c()
    _lib.ok(_lib.lib().fc_make_inputs(ctypes.byref(a), _lib.DISTS.index(dist), whole("seed", seed, 0, UINT64_MAX), q.ctypes.data,
                                      k.ctypes.data, v.ctypes.data), "make_inputs")
    return tuple(deliver(x, p.dtype, backend, device, layout) for x in (q, k, v))


def resolve_backend(backend, device):
    if backend not in ("numpy", "torch"):
        raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
    if backend == "torch":
        import torch  # noqa: F401  (the torch backend needs it; numpy alone does not)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
    return backend, device


def deliver(bits, kind, backend, device, layout):
    """A BHSD numpy array of raw values/bits as the kernel receives it."""
    backend, device = resolve_backend(backend, device)
    if layout == "bshd":
        bits = np.ascontiguousarray(bits.transpose(0, 2, 1, 3))
    elif layout != "bhsd":
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


def replay(kernel, problem, dist="normal", seed=0, *, lse_base="e", empty_row_lse="-inf", backend="numpy",
           device=None, layout="bhsd", max_rows=4096, tile_q=128, tile_kv=128, html=None):
    """Runs kernel(q, k, v, problem) on the inputs flashcheck draws for (problem, dist, seed) and
    judges its output: one failing fuzz case, again. Returns the Report."""
    p = _as_problem(problem)
    q, k, v = make_inputs(p, dist, seed, backend=backend, device=device, layout=layout)
    o, lse = split_output(kernel(q, k, v, p))
    if lse_base is None:  # declared without LSE: whatever it returns there is not judged
        lse, lse_base = None, "e"
    return check(q, k, v, o, lse, causal=p.causal, scale=p._custom_scale, lse_base=lse_base,
                 empty_row_lse=empty_row_lse, max_rows=max_rows, layout=layout, tile_q=tile_q, tile_kv=tile_kv,
                 html=html)


def read_buffer(ptr, shape, kind):
    return buffer(ptr, shape, NUMPY_DTYPES[kind])
