"""ctypes bindings of libflashcheck.so (capi/flashcheck.h). Nothing here is compiled against Python:
any Python 3 with ctypes loads it.

The library is looked up in $FLASHCHECK_LIB, then in the repository's build directory (build/, as
the README's commands make it), then wherever the dynamic loader finds `libflashcheck`.
"""
import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

API_VERSION = 2  # FLASHCHECK_API_VERSION of the header these bindings mirror (2: FC_CALLBACK_DECLINE)

FC_OK, FC_ERR_INVALID, FC_ERR_CANNOT_TEST, FC_ERR_ABORTED, FC_ERR_INTERNAL = 0, 1, 2, 3, 4
FC_F32, FC_F16, FC_BF16 = 0, 1, 2
FC_MASK_NONE, FC_MASK_TOP_LEFT, FC_MASK_BOTTOM_RIGHT = 0, 1, 2
FC_LSE_LOG_E, FC_LSE_LOG_2, FC_LSE_ABSENT = 0, 1, 2
FC_EMPTY_NEG_INF, FC_EMPTY_POS_INF = 0, 1
FC_CALLBACK_ABORT, FC_CALLBACK_DECLINE = -1, -2

DTYPES = {"f32": FC_F32, "f16": FC_F16, "bf16": FC_BF16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
CAUSALS = {"none": FC_MASK_NONE, "top_left": FC_MASK_TOP_LEFT, "bottom_right": FC_MASK_BOTTOM_RIGHT}
CAUSAL_NAMES = {v: k for k, v in CAUSALS.items()}
LSE_BASES = {"e": FC_LSE_LOG_E, "2": FC_LSE_LOG_2, None: FC_LSE_ABSENT}
EMPTY_ROW_LSE = {"-inf": FC_EMPTY_NEG_INF, "+inf": FC_EMPTY_POS_INF}
DISTS = ["normal", "uniform", "large", "outlier_keys", "constant_rows", "equal_scores"]  # FC_DIST_* order

i32, u32, i64, u64, f64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double
vp = ctypes.c_void_p


class Attention(ctypes.Structure):
    _fields_ = [("batch", i64), ("heads_q", i64), ("heads_kv", i64), ("seq_q", i64), ("seq_kv", i64),
                ("head_dim_qk", i64), ("head_dim_v", i64), ("dtype", i32), ("causal", i32), ("scale", f64)]


class CheckOptions(ctypes.Structure):
    _fields_ = [("struct_size", u32), ("lse_base", i32), ("empty_row_lse", i32), ("allow_nonfinite_inputs", i32),
                ("max_rows", i64), ("tile_q", i64), ("tile_kv", i64), ("error_maps", i32)]


class Location(ctypes.Structure):
    _fields_ = [("b", i64), ("h", i64), ("row", i64), ("col", i64), ("q_tile", i64), ("kv_tile", i64),
                ("kernel", f64), ("oracle", f64)]


class FuzzOptions(ctypes.Structure):
    _fields_ = [("struct_size", u32), ("name", ctypes.c_char_p), ("cases", i64), ("seed", u64), ("max_seq", i64),
                ("max_work", f64), ("max_rows", i64), ("dtypes", u32), ("causals", u32),
                ("head_dims", ctypes.POINTER(i64)), ("num_head_dims", i64), ("dv_ne_dqk", i32), ("gqa", i32),
                ("lse_base", i32), ("empty_row_lse", i32), ("tile_q", i64), ("tile_kv", i64), ("shrink", i32),
                ("fail_fast", i32), ("max_failures", i64), ("progress", i32)]


class Case(ctypes.Structure):
    _fields_ = [("problem", Attention), ("dist", i32), ("input_seed", u64)]


class CampaignSummary(ctypes.Structure):
    _fields_ = [("cases", i64), ("passed", i64), ("failed", i64), ("skipped", i64), ("worst_cosine", f64)]


KERNEL_CALLBACK = ctypes.CFUNCTYPE(i32, vp, ctypes.POINTER(Attention), vp, vp, vp, vp, ctypes.POINTER(ctypes.c_float))

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
}

_lib = None
_lock = threading.Lock()


def _find():
    """The library's path: $FLASHCHECK_LIB, the checkout's build/, or what the loader knows."""
    env = os.environ.get("FLASHCHECK_LIB")
    if env:
        if not Path(env).is_file():
            raise OSError(f"flashcheck: FLASHCHECK_LIB={env} is not a file")
        return env
    built = Path(__file__).resolve().parent.parent.parent / "build" / "libflashcheck.so"
    if built.is_file():
        return str(built)
    system = ctypes.util.find_library("flashcheck")
    if system:
        return system
    raise OSError(f"flashcheck: libflashcheck.so not found (FLASHCHECK_LIB unset, no {built}, none the loader "
                  "knows). Build it with `cmake -S . -B build && cmake --build build -j2` or set FLASHCHECK_LIB.")


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
        for init, struct in (("fc_check_options_init", CheckOptions), ("fc_fuzz_options_init", FuzzOptions)):
            scratch = ctypes.create_string_buffer(4096)
            getattr(handle, init)(scratch)
            size = u32.from_buffer(scratch).value
            if size != ctypes.sizeof(struct):
                raise OSError(f"flashcheck: {path} has a {size}-byte {struct.__name__}, these bindings "
                              f"{ctypes.sizeof(struct)}: rebuild the library from this checkout")
        _lib = handle
        return _lib


def init(struct):
    """A struct filled with the library's defaults."""
    s = struct()
    getattr(lib(), {CheckOptions: "fc_check_options_init", FuzzOptions: "fc_fuzz_options_init"}[struct])(
        ctypes.byref(s))
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
    n = lib().fc_attention_to_string(ctypes.byref(attention), None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib().fc_attention_to_string(ctypes.byref(attention), buf, n + 1)
    return buf.value.decode()
