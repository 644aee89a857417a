"""flashcheck from Python: judge an attention forward's output in one line, fuzz a kernel with
shrinking. A ctypes binding of libflashcheck.so (capi/flashcheck.h); numpy is required, torch is
optional (CPU or CUDA tensors, bfloat16 included, never converted to another dtype).

    import flashcheck
    report = flashcheck.check(q, k, v, o, lse, causal="bottom_right")   # -> Report; bool() is the verdict
    flashcheck.assert_close(q, k, v, o, causal="top_left")              # for pytest
    o64, lse64 = flashcheck.reference(q, k, v, window=(128, 0), layout="thd",
                                      cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)   # the fp64 oracle, every variant
    dq64, dk64, dv64 = flashcheck.reference_backward(q, k, v, do, causal="bottom_right")  # the fp64 gradients
    flashcheck.check_backward(q, k, v, o, lse, do, dq, dk, dv, causal="bottom_right")  # -> BackwardReport
    flashcheck.fuzz(my_backward, backward=True)   # fn(q, k, v, do, problem) -> (dq, dk, dv), shrunk like a forward
    flashcheck.fuzz(lambda q, k, v, p: my_attention(q, k, v, p.scale), backend="torch", causal="none")
    # a kernel declines a problem it does not support with `raise flashcheck.Unsupported("why")`:
    # counted as declined, never failed; a fuzz that declined everything is falsy ("nothing tested")
"""
from ._api import Problem, Report, Worst, assert_close, check, make_case, make_inputs, reference
from ._backward import BackwardReport, GradientVerdict, check_backward, reference_backward
from ._fuzz import Failure, FuzzResult, Unsupported, fuzz
from ._fuzz_backward import make_backward_case
from ._replay import Replay, replay
from ._lib import API_VERSION, FlashcheckError
from ._tensors import bf16_to_float32, float32_to_bf16

__all__ = ["check", "assert_close", "reference", "check_backward", "reference_backward", "BackwardReport",
           "GradientVerdict", "fuzz", "replay", "make_inputs", "make_case", "make_backward_case", "Problem", "Report",
           "Worst", "Failure", "FuzzResult", "Replay", "Unsupported", "FlashcheckError", "bf16_to_float32",
           "float32_to_bf16", "API_VERSION"]
