"""Tensors in and out as raw bits: numpy arrays and, when installed, torch tensors (CPU or CUDA).

flashcheck judges a kernel's output in its own dtype, so nothing here ever rounds or widens a value:
bf16 travels as its 16 bits (torch's .view(torch.int16), or numpy uint16/int16 bit patterns, or
ml_dtypes' bfloat16), f16 as numpy float16, f32 as float32. Anything else is refused by name.
"""
import ctypes
import sys

import numpy as np

# numpy dtype that holds each flashcheck dtype's values (bf16: its bit patterns).
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def to_bits(x, name):
    """(contiguous numpy array of the raw values or bits, flashcheck dtype name) for a tensor."""
    if is_torch(x):
        torch = _torch()
        t = x.detach()
        kinds = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
        if t.dtype not in kinds:
            raise TypeError(f"{name} is {t.dtype}; flashcheck judges bfloat16, float16 or float32 and never "
                            "converts a tensor to another dtype")
        t = t.cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), "bf16"
        return t.numpy(), kinds[t.dtype]
    a = np.asarray(x)
    if a.dtype == np.float32:
        kind = "f32"
    elif a.dtype == np.float16:
        kind = "f16"
    elif a.dtype in (np.uint16, np.int16):
        kind = "bf16"  # numpy has float16 natively: 16-bit integers can only be bf16 bit patterns
        a = a.view(np.uint16)
    elif a.dtype.name == "bfloat16":  # ml_dtypes
        kind = "bf16"
        a = a.view(np.uint16)
    else:
        raise TypeError(f"{name} is numpy {a.dtype}; flashcheck judges float32, float16 or bf16 (as uint16 bit "
                        "patterns or ml_dtypes.bfloat16) and never converts an array to another dtype")
    return np.ascontiguousarray(a), kind


def lse_bits(x, name="lse"):
    """LSE as a contiguous float32 numpy array (it is always fp32)."""
    if is_torch(x):
        t = x.detach()
        if t.dtype != _torch().float32:
            raise TypeError(f"{name} is {t.dtype}; LSE must be float32 (flashcheck never converts it)")
        return np.ascontiguousarray(t.cpu().contiguous().numpy())
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"{name} is numpy {a.dtype}; LSE must be float32 (flashcheck never converts it)")
    return np.ascontiguousarray(a)


def from_bits(a, kind, backend, device):
    """A kernel's input: the numpy array itself, or a torch tensor of the same bits on `device`."""
    if backend == "numpy":
        return a
    torch = _torch()
    if kind == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(a).to(device)


def buffer(ptr, shape, np_dtype):
    """A copy of a C buffer as a numpy array."""
    n = int(np.prod(shape)) * np.dtype(np_dtype).itemsize
    raw = (ctypes.c_char * n).from_address(ptr)
    return np.frombuffer(raw, dtype=np_dtype).reshape(shape).copy()


def bf16_to_float32(bits):
    """bf16 bit patterns (uint16/int16) as float32 values: exact."""
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(x):
    """float32 values rounded to the nearest bf16 (ties to even), as uint16 bit patterns. NaN stays a
    quiet NaN with its sign. For a kernel's own rounding of its output: flashcheck never calls it on
    a kernel's output."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | np.uint32(0x40)).astype(np.uint16), rounded)
