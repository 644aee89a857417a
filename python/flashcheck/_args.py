"""check()'s and reference()'s arguments as the C API's problem model 2: the problem struct (its
per-sequence lengths FlashAttention's int32 arrays) and a view of every tensor, as its own bits and
strides. The shapes given here only say which dimension is which; the C side checks every shape,
length, stride and value against the problem and names the argument that is wrong."""
import math

import numpy as np

from . import _lib
from ._tensors import FP8, float_side, int_side, plain_view, tensor_view

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Each layout's dimensions of q (k, v, o alike), by name, for messages.
FORMS = {"bhsd": "[B, H, S, D]", "bshd": "[B, S, H, D]", "thd": "[T, H, D]"}


class Call:
    """One C call's problem and tensors, and every object their pointers point into."""

    def __init__(self):
        self.problem = _lib.init(_lib.Attention2)
        self.tensors = _lib.init(_lib.Tensors)
        self.keep = []
        self.tokens_q = None  # thd: rows of q, padding included
        self.batch = self.heads_q = self.seq_q = self.head_dim_v = None

    def attach(self, name, view, owner):
        setattr(self.tensors, name, view)
        self.keep.append(owner)


def _dims(x, name, n, form):
    shape = tuple(x.shape)
    if len(shape) != n:
        raise ValueError(f"{name} has shape {shape}; expected {n} dimensions {form}")
    return shape


def _bound(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must hold whole numbers, got {value!r}")
    value = int(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} holds {value}, outside int64")
    return value


def window_pair(window, window_size=None):
    """(left, right); None is no window. -1 is unbounded; the C side refuses anything below.
    window_size is FlashAttention's name for the same pair."""
    if window is not None and window_size is not None:
        raise TypeError("window and window_size are one argument (window_size is FlashAttention's name): pass one")
    if window is None:
        window = window_size
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise TypeError(f"window must be a pair (left, right), got {window!r}") from None
    return _bound("window", left), _bound("window", right)


def _scale(scale):
    if scale is None:
        return math.nan
    if isinstance(scale, bool):
        raise TypeError(f"scale must be a number, got {scale!r}")
    f = float(scale)
    if not math.isfinite(f) or f == 0:
        raise ValueError(f"scale must be a finite non-zero number, got {f}")
    return f


def _softcap(softcap):
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool):
        raise TypeError(f"softcap must be a number, got {softcap!r}")
    f = float(softcap)
    if math.isnan(f):
        raise ValueError("softcap must be a finite number >= 0 (0: no cap), got nan")
    return f  # the C side refuses negative and infinite caps, naming softcap


def _lengths(call, x, name, count):
    """A length array of exactly `count` entries (the C side reads that many), as int32."""
    a = int_side(x, name)
    if a.ndim != 1 or a.shape[0] != count:
        raise ValueError(f"{name} has shape {a.shape}; the batch needs {count} entries")
    call.keep.append(a)
    return a.ctypes.data_as(_lib.I32P)


def _longest(name, given, lengths, what):
    """FlashAttention's max_seqlen_* is an upper bound on the lengths (it sizes the kernel's grid): one
    below the longest sequence is a caller's error that would make a kernel skip rows or keys."""
    if given is None or lengths is None or len(lengths) == 0:
        return
    m = _bound(name, given)
    b = int(np.argmax(lengths))
    if m < lengths[b]:
        raise ValueError(f"{name} is {m} but sequence {b} has {int(lengths[b])} {what}")


def _spans(cu):
    """Per-sequence lengths of offsets that start at 0 and never decrease; None otherwise (the C side
    then names what is wrong with them)."""
    cu = np.asarray(cu, dtype=np.int64)
    d = np.diff(cu)
    return d if cu.size and cu[0] == 0 and (d >= 0).all() else None


def build(q, k, v, o, lse, *, scale, window, softcap, alibi_slopes, alibi, sinks, cu_seqlens_q, cu_seqlens_k,
          seqused_k, block_table, cache_seqlens, descale_q, descale_k, descale_v, layout, dtype, causal_code,
          window_size=None, max_seqlen_q=None, max_seqlen_k=None):
    """The Call for these arguments. `o` may be None (reference()); `causal_code` is FC_MASK_*."""
    if layout not in _lib.LAYOUTS:
        raise ValueError(f"layout must be 'bhsd', 'bshd' or 'thd', got {layout!r}")
    if dtype is not None and dtype not in _lib.DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_lib.DTYPES)}, got {dtype!r}")
    call = Call()
    a = call.problem
    views = {}
    kinds = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x is None:
            raise TypeError(f"{name} is required")
        views[name], owner, kinds[name] = tensor_view(x, name, dtype)
        call.attach(name, views[name], owner)
    if len(set(kinds.values())) != 1:
        raise TypeError("q, k and v must share one dtype; got " + ", ".join(f"{n}={d}" for n, d in kinds.items()))
    kind = kinds["q"]
    out_kind = None
    if o is not None:
        view, owner, out_kind = tensor_view(o, "o")
        if kind in FP8:
            if out_kind not in ("bf16", "f16"):
                raise TypeError(f"o is {out_kind}; the output of fp8 inputs is bf16 or f16")
        elif out_kind != kind:
            raise TypeError(f"q, k, v and o must share one dtype; got q={kind}, o={out_kind}")
        call.attach("o", view, owner)
    if lse is not None:
        try:
            view, owner, lse_kind = tensor_view(lse, "lse")
        except TypeError:
            lse_kind = str(getattr(lse, "dtype", type(lse).__name__))
        if lse_kind != "f32":
            raise TypeError(f"lse is {lse_kind}; LSE must be float32 (flashcheck never converts it)")
        call.attach("lse", view, owner)

    thd, paged = layout == "thd", block_table is not None
    form = FORMS[layout]
    if thd:
        tq, hq, dqk = _dims(q, "q", 3, "[Tq, Hq, Dqk] (layout 'thd')")
        if cu_seqlens_q is None:
            raise ValueError("layout='thd' needs cu_seqlens_q (the packed sequences' offsets)")
        cu = int_side(cu_seqlens_q, "cu_seqlens_q")
        if cu.ndim != 1 or cu.shape[0] < 2:
            raise ValueError(f"cu_seqlens_q has shape {cu.shape}; it holds batch + 1 offsets, at least 2")
        batch, sq = cu.shape[0] - 1, 0
        call.tokens_q = tq
    else:
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError(f"cu_seqlens_q / cu_seqlens_k need layout='thd' (packed sequences), not {layout!r}")
        qs = _dims(q, "q", 4, f"{form} (layout {layout!r})")
        batch, hq, sq, dqk = (qs[0], qs[1], qs[2], qs[3]) if layout == "bhsd" else (qs[0], qs[2], qs[1], qs[3])
    if paged:
        if cache_seqlens is None:
            raise ValueError("block_table needs cache_seqlens (the keys each sequence holds in its pages)")
        if cu_seqlens_k is not None:
            raise ValueError("cu_seqlens_k with block_table: a paged cache's lengths are cache_seqlens")
        ks = _dims(k, "k", 4, "[num_pages, page_size, Hkv, Dqk] (a paged cache)")
        _dims(v, "v", 4, "[num_pages, page_size, Hkv, Dv] (a paged cache)")
        if ks[1] == 0:
            raise ValueError("k is a paged cache with page_size 0 (k.shape[1]); page_size must be positive")
        hkv, skv, page_size = ks[2], 0, ks[1]
    else:
        if cache_seqlens is not None:
            raise ValueError("cache_seqlens needs block_table (a paged cache)")
        page_size = 0
        if thd:
            hkv = _dims(k, "k", 3, "[Tk, Hkv, Dqk] (layout 'thd')")[1]
            _dims(v, "v", 3, "[Tk, Hkv, Dv] (layout 'thd')")
            skv = 0
            if cu_seqlens_k is None:
                raise ValueError("layout='thd' needs cu_seqlens_k (or a paged cache: block_table, cache_seqlens)")
        else:
            ks = _dims(k, "k", 4, f"{form} (layout {layout!r})")
            _dims(v, "v", 4, f"{form} (layout {layout!r})")
            hkv, skv = (ks[1], ks[2]) if layout == "bhsd" else (ks[2], ks[1])
    dv = tuple(v.shape)[-1]

    a.batch, a.heads_q, a.heads_kv, a.seq_q, a.seq_kv = batch, hq, hkv, sq, skv
    a.head_dim_qk, a.head_dim_v = dqk, dv
    a.dtype = _lib.DTYPES[kind]
    a.out_dtype = _lib.DTYPES[out_kind] if (kind in FP8 and out_kind) else -1
    a.causal = causal_code
    a.layout = _lib.LAYOUTS[layout]
    a.scale = _scale(scale)
    a.window_left, a.window_right = window_pair(window, window_size)
    a.softcap = _softcap(softcap)
    a.page_size = page_size
    q_lengths, k_lengths = [sq] * batch, [skv] * batch
    if thd:
        a.cu_seqlens_q = _lengths(call, cu_seqlens_q, "cu_seqlens_q", batch + 1)
        q_lengths = _spans(call.keep[-1])
        if not paged:
            a.cu_seqlens_k = _lengths(call, cu_seqlens_k, "cu_seqlens_k", batch + 1)
            k_lengths = _spans(call.keep[-1])
    if paged:
        a.cache_seqlens = _lengths(call, cache_seqlens, "cache_seqlens", batch)
        k_lengths = call.keep[-1]
        table = int_side(block_table, "block_table", np.int64)
        call.attach("block_table", plain_view(table, _lib.FC_I64), table)
    _longest("max_seqlen_q", max_seqlen_q, q_lengths, "queries")
    _longest("max_seqlen_k", max_seqlen_k, k_lengths, "keys")
    if seqused_k is not None:
        a.seqused_k = _lengths(call, seqused_k, "seqused_k", batch)

    # Side tensors, float32 exactly; their shapes are checked against the problem by the C side.
    if alibi not in ("symmetric", "signed", "none"):
        raise ValueError(f"alibi must be 'symmetric' or 'signed', got {alibi!r}")
    if alibi_slopes is not None:
        if alibi == "none":
            raise ValueError("alibi='none' with alibi_slopes: say which ALiBi ('symmetric' or 'signed')")
        slopes = float_side(alibi_slopes, "alibi_slopes")
        a.alibi = _lib.ALIBIS[alibi]
        a.alibi_per_batch = int(slopes.ndim == 2)
        call.attach("alibi_slopes", plain_view(slopes, _lib.FC_F32), slopes)
    elif alibi == "signed":
        raise ValueError("alibi='signed' needs alibi_slopes")
    if sinks is not None:
        s = float_side(sinks, "sinks")
        a.sinks = 1
        call.attach("sinks", plain_view(s, _lib.FC_F32), s)
    given = [(n, x) for n, x in (("descale_q", descale_q), ("descale_k", descale_k), ("descale_v", descale_v))
             if x is not None]
    if given:
        for name, x in given:
            d = float_side(x, name)
            if d.ndim == 0:
                d = d.reshape(1)
            if name == given[0][0]:
                a.descale = _lib.FC_DESCALE_PER_TENSOR if d.size == 1 and d.ndim == 1 else _lib.FC_DESCALE_PER_HEAD
            call.attach(name, plain_view(d, _lib.FC_F32), d)
    call.batch, call.heads_q, call.seq_q, call.head_dim_v = batch, hq, sq, dv
    return call


def output_views(call, layout):
    """Float64 arrays for fc_reference's O and LSE, in the input layout: O [B, Hq, Sq, Dv] (bhsd),
    [B, Sq, Hq, Dv] (bshd) or [Tq, Hq, Dv] (thd); LSE [B, Hq, Sq] or [Hq, Tq]."""
    b, hq, sq, dv = call.batch, call.heads_q, call.seq_q, call.head_dim_v
    if layout == "thd":
        o_shape, lse_shape = (call.tokens_q, hq, dv), (hq, call.tokens_q)
    elif layout == "bshd":
        o_shape, lse_shape = (b, sq, hq, dv), (b, hq, sq)
    else:
        o_shape, lse_shape = (b, hq, sq, dv), (b, hq, sq)
    o, lse = np.empty(o_shape, np.float64), np.empty(lse_shape, np.float64)
    return o, lse, plain_view(o, _lib.FC_F64), plain_view(lse, _lib.FC_F64)

