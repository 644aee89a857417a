"""ctypes bindings of libflashcheck.so (capi/flashcheck.h). Nothing here is compiled against Python:
any Python 3 with ctypes loads it.

The library is looked up in $FLASHCHECK_LIB, then beside this package (_native/, where an installed
wheel carries the one built with it), then in the repository's build directory (build/, as the
README's commands make it), then wherever the dynamic loader finds `libflashcheck`.
"""
import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

API_VERSION = 6  # FLASHCHECK_API_VERSION of the header these bindings mirror (3: problem model 2; 4: declared limits;
                 # 5: the backward pass; 6: backward fuzzing and the backward report's page)

FC_OK, FC_ERR_INVALID, FC_ERR_CANNOT_TEST, FC_ERR_ABORTED, FC_ERR_INTERNAL = 0, 1, 2, 3, 4
FC_F32, FC_F16, FC_BF16, FC_E4M3, FC_E5M2, FC_I32, FC_I64, FC_F64 = 0, 1, 2, 3, 4, 5, 6, 7
FC_BHSD, FC_BSHD, FC_THD = 0, 1, 2
FC_BIAS_NONE, FC_BIAS_ALIBI_SYMMETRIC, FC_BIAS_ALIBI_SIGNED = 0, 1, 2
FC_LSE_ALIBI_EXACT, FC_LSE_ALIBI_KEY_OFFSET = 0, 1
FC_NO_DESCALE, FC_DESCALE_PER_TENSOR, FC_DESCALE_PER_HEAD = 0, 1, 2
FC_PAGES_IN_ORDER, FC_PAGES_SHUFFLED, FC_PAGES_SHARED = 0, 1, 2
FC_MASK_NONE, FC_MASK_TOP_LEFT, FC_MASK_BOTTOM_RIGHT = 0, 1, 2
FC_LSE_LOG_E, FC_LSE_LOG_2, FC_LSE_ABSENT = 0, 1, 2
FC_EMPTY_NEG_INF, FC_EMPTY_POS_INF = 0, 1
FC_CALLBACK_ABORT, FC_CALLBACK_DECLINE = -1, -2

DTYPES = {"f32": FC_F32, "f16": FC_F16, "bf16": FC_BF16, "e4m3": FC_E4M3, "e5m2": FC_E5M2}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
PLAIN_DTYPES = ("f32", "f16", "bf16")
LAYOUTS = {"bhsd": FC_BHSD, "bshd": FC_BSHD, "thd": FC_THD}
LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}
ALIBIS = {"none": FC_BIAS_NONE, "symmetric": FC_BIAS_ALIBI_SYMMETRIC, "signed": FC_BIAS_ALIBI_SIGNED}
ALIBI_NAMES = {v: k for k, v in ALIBIS.items()}
ALIBI_LSE = {"exact": FC_LSE_ALIBI_EXACT, "key_offset": FC_LSE_ALIBI_KEY_OFFSET}
DESCALES = {"none": FC_NO_DESCALE, "tensor": FC_DESCALE_PER_TENSOR, "head": FC_DESCALE_PER_HEAD}
DESCALE_NAMES = {v: k for k, v in DESCALES.items()}
PAGE_ORDERS = {"identity": FC_PAGES_IN_ORDER, "shuffled": FC_PAGES_SHUFFLED, "shared": FC_PAGES_SHARED}
PAGE_ORDER_NAMES = {v: k for k, v in PAGE_ORDERS.items()}
CAUSALS = {"none": FC_MASK_NONE, "top_left": FC_MASK_TOP_LEFT, "bottom_right": FC_MASK_BOTTOM_RIGHT}
CAUSAL_NAMES = {v: k for k, v in CAUSALS.items()}
LSE_BASES = {"e": FC_LSE_LOG_E, "2": FC_LSE_LOG_2, None: FC_LSE_ABSENT}
EMPTY_ROW_LSE = {"-inf": FC_EMPTY_NEG_INF, "+inf": FC_EMPTY_POS_INF}
DISTS = ["normal", "uniform", "large", "outlier_keys", "constant_rows", "equal_scores", "nonfinite"]  # FC_DIST_* order

i32, u32, i64, u64, f64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double
vp = ctypes.c_void_p


class Attention(ctypes.Structure):
    _fields_ = [("batch", i64), ("heads_q", i64), ("heads_kv", i64), ("seq_q", i64), ("seq_kv", i64),
                ("head_dim_qk", i64), ("head_dim_v", i64), ("dtype", i32), ("causal", i32), ("scale", f64)]


class CheckOptions(ctypes.Structure):
    _fields_ = [("struct_size", u32), ("lse_base", i32), ("empty_row_lse", i32), ("allow_nonfinite_inputs", i32),
                ("max_rows", i64), ("tile_q", i64), ("tile_kv", i64), ("error_maps", i32),
                ("reserved_api2_padding", i32), ("alibi_lse", i32)]


class Location(ctypes.Structure):
    _fields_ = [("b", i64), ("h", i64), ("row", i64), ("col", i64), ("q_tile", i64), ("kv_tile", i64),
                ("kernel", f64), ("oracle", f64)]


class FuzzOptions(ctypes.Structure):
    _fields_ = [("struct_size", u32), ("name", ctypes.c_char_p), ("cases", i64), ("seed", u64), ("max_seq", i64),
                ("max_work", f64), ("max_rows", i64), ("dtypes", u32), ("causals", u32),
                ("head_dims", ctypes.POINTER(i64)), ("num_head_dims", i64), ("dv_ne_dqk", i32), ("gqa", i32),
                ("lse_base", i32), ("empty_row_lse", i32), ("tile_q", i64), ("tile_kv", i64), ("shrink", i32),
                ("fail_fast", i32), ("max_failures", i64), ("progress", i32),
                ("reserved_api2_padding", i32), ("windows", i32), ("softcap", i32), ("alibi", u32),
                ("alibi_per_batch", i32), ("sinks", i32), ("layouts", u32), ("seqused", i32), ("paged", i32),
                ("page_sizes", ctypes.POINTER(i64)), ("num_page_sizes", i64), ("out_dtypes", u32), ("descales", u32),
                ("alibi_lse", i32),
                ("reserved_api3_padding", i32), ("equal_lengths", i32), ("nonfinite", i32), ("seq_multiple", i64),
                ("backward", i32), ("reserved_api6_padding", i32)]


class Case(ctypes.Structure):
    _fields_ = [("problem", Attention), ("dist", i32), ("input_seed", u64)]


class CampaignSummary(ctypes.Structure):
    _fields_ = [("cases", i64), ("passed", i64), ("failed", i64), ("skipped", i64), ("worst_cosine", f64)]


I32P = ctypes.POINTER(i32)


class Attention2(ctypes.Structure):
    _fields_ = [("struct_size", u32), ("batch", i64), ("heads_q", i64), ("heads_kv", i64), ("seq_q", i64),
                ("seq_kv", i64), ("head_dim_qk", i64), ("head_dim_v", i64), ("dtype", i32), ("out_dtype", i32),
                ("causal", i32), ("layout", i32), ("scale", f64), ("window_left", i64), ("window_right", i64),
                ("softcap", f64), ("alibi", i32), ("alibi_per_batch", i32), ("sinks", i32), ("descale", i32),
                ("page_size", i64), ("page_order", i32), ("reserved", i32), ("cu_seqlens_q", I32P),
                ("cu_seqlens_k", I32P), ("seqused_k", I32P), ("cache_seqlens", I32P)]


class TensorView(ctypes.Structure):
    _fields_ = [("data", vp), ("dtype", i32), ("ndim", i32), ("shape", i64 * 4), ("strides", i64 * 4)]


TENSOR_NAMES = ("q", "k", "v", "o", "lse", "alibi_slopes", "sinks", "descale_q", "descale_k", "descale_v", "block_table")


class Tensors(ctypes.Structure):
    _fields_ = [("struct_size", u32)] + [(n, TensorView) for n in TENSOR_NAMES]


GRADIENT_NAMES = ("d_out", "dq", "dk", "dv", "dsinks")


class Gradients(ctypes.Structure):
    _fields_ = [("struct_size", u32)] + [(n, TensorView) for n in GRADIENT_NAMES]


class Case2(ctypes.Structure):
    _fields_ = [("dist", i32), ("input_seed", u64), ("problem", Attention2)]


KERNEL_CALLBACK = ctypes.CFUNCTYPE(i32, vp, ctypes.POINTER(Attention), vp, vp, vp, vp, ctypes.POINTER(ctypes.c_float))

KERNEL_CALLBACK2 = ctypes.CFUNCTYPE(i32, vp, ctypes.POINTER(Attention2), ctypes.POINTER(Tensors))
VIEWP = ctypes.POINTER(TensorView)

_SIGNATURES = {
    "fc_api_version": (u32, []),
    "fc_last_error": (ctypes.c_char_p, []),
    "fc_attention_to_string": (ctypes.c_size_t, [ctypes.POINTER(Attention), ctypes.c_char_p, ctypes.c_size_t]),
    "fc_attention_parse": (i32, [ctypes.c_char_p, ctypes.POINTER(Attention)]),
    "fc_make_inputs": (i32, [ctypes.POINTER(Attention), i32, u64, vp, vp, vp]),
    "fc_check_options_init": (None, [vp]),
    "fc_check": (i32, [ctypes.POINTER(Attention), vp, vp, vp, vp, vp, ctypes.POINTER(CheckOptions), ctypes.POINTER(vp)]),
    "fc_report_pass": (i32, [vp]),
    "fc_report_failed_count": (i32, [vp]),
    "fc_report_failed_name": (ctypes.c_char_p, [vp, i32]),
    "fc_report_worst": (i32, [vp, ctypes.POINTER(Location)]),
    "fc_report_problem": (i32, [vp, ctypes.POINTER(Attention)]),
    "fc_report_text": (ctypes.c_char_p, [vp]),
    "fc_report_json": (ctypes.c_char_p, [vp]),
    "fc_report_html": (ctypes.c_char_p, [vp]),
    "fc_report_set_repro": (i32, [vp, ctypes.c_char_p]),
    "fc_report_free": (None, [vp]),
    "fc_set_callback_error": (None, [ctypes.c_char_p]),
    "fc_fuzz_options_init": (None, [vp]),
    "fc_draw_case": (i32, [ctypes.POINTER(FuzzOptions), i64, ctypes.POINTER(Case)]),
    "fc_fuzz": (i32, [KERNEL_CALLBACK, vp, ctypes.POINTER(FuzzOptions), ctypes.POINTER(vp)]),
    "fc_campaign_get_summary": (None, [vp, ctypes.POINTER(CampaignSummary)]),
    "fc_campaign_failure_count": (i64, [vp]),
    "fc_campaign_failure": (i32, [vp, i64, ctypes.POINTER(Case), ctypes.POINTER(vp)]),
    "fc_campaign_json": (ctypes.c_char_p, [vp]),
    "fc_campaign_log": (ctypes.c_char_p, [vp]),
    "fc_campaign_free": (None, [vp]),
    # API 3: problem model 2.
    "fc_check_options_init2": (None, [vp]),
    "fc_fuzz_options_init2": (None, [vp]),
    "fc_attention2_init": (None, [vp]),
    "fc_tensors_init": (None, [vp]),
    "fc_attention2_to_string": (ctypes.c_size_t, [ctypes.POINTER(Attention2), ctypes.c_char_p, ctypes.c_size_t]),
    "fc_attention2_parse": (i32, [ctypes.c_char_p, ctypes.POINTER(Attention2), I32P, ctypes.c_size_t,
                                  ctypes.POINTER(ctypes.c_size_t)]),
    "fc_check2": (i32, [ctypes.POINTER(Attention2), ctypes.POINTER(Tensors), ctypes.POINTER(CheckOptions),
                        ctypes.POINTER(vp)]),
    "fc_reference": (i32, [ctypes.POINTER(Attention2), ctypes.POINTER(Tensors), VIEWP, VIEWP]),
    "fc_make_inputs2": (i32, [ctypes.POINTER(Attention2), i32, u64, ctypes.POINTER(vp)]),
    "fc_inputs_get": (i32, [vp, ctypes.POINTER(Attention2), ctypes.POINTER(Tensors)]),
    "fc_inputs_free": (None, [vp]),
    "fc_report_problem2": (i32, [vp, ctypes.POINTER(Attention2)]),
    "fc_draw_case2": (i32, [ctypes.POINTER(FuzzOptions), i64, ctypes.POINTER(Case2), I32P, ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_size_t)]),
    "fc_fuzz2": (i32, [KERNEL_CALLBACK2, vp, ctypes.POINTER(FuzzOptions), ctypes.POINTER(vp)]),
    "fc_campaign_failure2": (i32, [vp, i64, ctypes.POINTER(Case2), ctypes.POINTER(vp)]),
    # API 4: declared limits.
    "fc_fuzz_options_init3": (None, [vp]),
    # API 5: the backward pass.
    "fc_gradients_init": (None, [vp]),
    "fc_reference_backward": (i32, [ctypes.POINTER(Attention2), ctypes.POINTER(Tensors), ctypes.POINTER(Gradients)]),
    "fc_check_backward": (i32, [ctypes.POINTER(Attention2), ctypes.POINTER(Tensors), ctypes.POINTER(Gradients),
                                ctypes.POINTER(CheckOptions), ctypes.POINTER(vp)]),
    "fc_backward_report_pass": (i32, [vp]),
    "fc_backward_report_failed_count": (i32, [vp]),
    "fc_backward_report_failed_name": (ctypes.c_char_p, [vp, i32]),
    "fc_backward_report_gradient_count": (i32, [vp]),
    "fc_backward_report_gradient_name": (ctypes.c_char_p, [vp, i32]),
    "fc_backward_report_gradient_pass": (i32, [vp, i32]),
    "fc_backward_report_gradient_worst": (i32, [vp, i32, ctypes.POINTER(Location)]),
    "fc_backward_report_forward": (vp, [vp]),
    "fc_backward_report_text": (ctypes.c_char_p, [vp]),
    "fc_backward_report_json": (ctypes.c_char_p, [vp]),
    "fc_backward_report_problem2": (i32, [vp, ctypes.POINTER(Attention2)]),
    "fc_backward_report_free": (None, [vp]),
    # API 6: backward fuzzing, the backward report's page.
    "fc_fuzz_options_init4": (None, [vp]),
    "fc_callback_d_out": (i32, [VIEWP]),
    "fc_make_backward_inputs": (i32, [ctypes.POINTER(Attention2), i32, u64, ctypes.POINTER(vp)]),
    "fc_inputs_d_out": (i32, [vp, VIEWP]),
    "fc_backward_report_html": (ctypes.c_char_p, [vp]),
    "fc_backward_report_set_repro": (i32, [vp, ctypes.c_char_p]),
}

# The struct each init function fills, with every field of this API version.
_INITS = {CheckOptions: "fc_check_options_init2", FuzzOptions: "fc_fuzz_options_init4",
          Attention2: "fc_attention2_init", Tensors: "fc_tensors_init", Gradients: "fc_gradients_init"}

_lib = None
_lock = threading.Lock()


def _find():
    """The library's path: $FLASHCHECK_LIB, the installed package's, the checkout's build/, or what
    the loader knows."""
    env = os.environ.get("FLASHCHECK_LIB")
    if env:
        if not Path(env).is_file():
            raise OSError(f"flashcheck: FLASHCHECK_LIB={env} is not a file")
        return env
    bundled = Path(__file__).resolve().parent / "_native" / "libflashcheck.so"
    if bundled.is_file():
        return str(bundled)
    built = Path(__file__).resolve().parent.parent.parent / "build" / "libflashcheck.so"
    if built.is_file():
        return str(built)
    system = ctypes.util.find_library("flashcheck")
    if system:
        return system
    raise OSError(f"flashcheck: libflashcheck.so not found (FLASHCHECK_LIB unset, no {bundled}, no {built}, none "
                  "the loader knows). Install the package with `pip install --no-build-isolation .`, build it with "
                  "`cmake -S . -B build && cmake --build build -j2`, or set FLASHCHECK_LIB.")


def lib():
    """The loaded library, its functions typed; loaded on first use."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = _find()
        handle = ctypes.CDLL(str(path))
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.restype, fn.argtypes = res, args
        version = handle.fc_api_version()
        if version != API_VERSION:
            raise OSError(f"flashcheck: {path} speaks C API version {version}, this package version {API_VERSION}")
        # The structs must be the library's size: an init function writes the whole struct, so it
        # writes into an oversized scratch buffer first, and the sizes are compared before use.
        for struct, init in _INITS.items():
            scratch = ctypes.create_string_buffer(4096)
            getattr(handle, init)(scratch)
            size = u32.from_buffer(scratch).value
            if size != ctypes.sizeof(struct):
                raise OSError(f"flashcheck: {path} has a {size}-byte {struct.__name__}, these bindings "
                              f"{ctypes.sizeof(struct)}: rebuild the library from this checkout")
        _lib = handle
        return _lib


def init(struct):
    """A struct filled with the library's defaults (every field of this API version)."""
    s = struct()
    getattr(lib(), _INITS[struct])(ctypes.byref(s))
    return s


class FlashcheckError(RuntimeError):
    """A C API call failed; `status` is its fc_status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def ok(status, what):
    """Raises for a failed call: ValueError for bad arguments, FlashcheckError otherwise."""
    if status == FC_OK:
        return
    message = f"{what}: {lib().fc_last_error().decode(errors='replace')}"
    if status == FC_ERR_INVALID:
        raise ValueError(message)
    raise FlashcheckError(status, message)


def problem_line(attention):
    """The one-line form of an Attention (API 1-2) or Attention2 struct."""
    fn = lib().fc_attention2_to_string if isinstance(attention, Attention2) else lib().fc_attention_to_string
    n = fn(ctypes.byref(attention), None, 0)
    if n == 0 and isinstance(attention, Attention2):
        raise ValueError(f"problem: {lib().fc_last_error().decode(errors='replace')}")
    buf = ctypes.create_string_buffer(n + 1)
    fn(ctypes.byref(attention), buf, n + 1)
    return buf.value.decode()
