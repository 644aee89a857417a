"""Tensors in and out as raw bits: numpy arrays and, when installed, torch tensors (CPU or CUDA).

flashcheck judges a kernel's output in its own dtype, so nothing here ever rounds or widens a value:
bf16 travels as its 16 bits (torch's .view(torch.int16), or numpy uint16/int16 bit patterns, or
ml_dtypes' bfloat16), f16 as numpy float16, f32 as float32, fp8 (e4m3, e5m2) as its 8 bits (torch's
float8 types, ml_dtypes' float8_e4m3fn/float8_e5m2, or numpy uint8 bit patterns named by dtype=).
Anything else is refused by name. A tensor goes to the C API as its own memory and strides (a
fc_tensor_view): a strided view is never copied; a CUDA tensor is copied to the host, as it is.
"""
import ctypes
import sys

import numpy as np

from . import _lib

# numpy dtype that holds each flashcheck dtype's values (bf16 and fp8: their bit patterns).
NUMPY_DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8}
FP8 = ("e4m3", "e5m2")


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def to_bits(x, name, dtype=None):
    """(contiguous numpy array of the raw values or bits, flashcheck dtype name) for a tensor."""
    if is_torch(x):
        torch = _torch()
        t = x.detach()
        kinds = _torch_kinds(torch)
        if t.dtype not in kinds:
            raise TypeError(f"{name} is {t.dtype}; flashcheck judges float32, float16, bfloat16 or float8 and never "
                            "converts a tensor to another dtype")
        kind = kinds[t.dtype]
        t = t.cpu().contiguous()
        if kind == "bf16":
            return t.view(torch.int16).numpy().view(np.uint16), kind
        if kind in FP8:
            return t.view(torch.uint8).numpy(), kind
        return t.numpy(), kind
    a = np.asarray(x)
    kind = _numpy_kind(a, name, dtype)
    return np.ascontiguousarray(a.view(NUMPY_DTYPES[kind])), kind


def from_bits(a, kind, backend, device):
    """A kernel's input: the numpy array itself, or a torch tensor of the same bits on `device`."""
    if backend == "numpy":
        return a
    torch = _torch()
    a = np.ascontiguousarray(a)
    if kind == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(device)
    if kind in FP8:
        return torch.from_numpy(a.view(np.uint8)).view(_fp8_torch_dtype(torch, kind)).to(device)
    return torch.from_numpy(a).to(device)


def _fp8_torch_dtype(torch, kind):
    name = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[kind]
    if not hasattr(torch, name):
        raise TypeError(f"this torch has no {name}: fp8 inputs need torch >= 2.1 (or backend='numpy')")
    return getattr(torch, name)


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


def _torch_kinds(torch):
    kinds = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
    for name, kind in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")):
        if hasattr(torch, name):
            kinds[getattr(torch, name)] = kind
    return kinds


def _numpy_kind(a, name, dtype):
    """The flashcheck dtype of a numpy array's bits; `dtype` names it where numpy cannot (fp8)."""
    named = {"bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}  # ml_dtypes
    if a.dtype == np.float32:
        kind = "f32"
    elif a.dtype == np.float16:
        kind = "f16"
    elif a.dtype in (np.uint16, np.int16):
        kind = "bf16"  # numpy has float16 natively: 16-bit integers can only be bf16 bit patterns
    elif a.dtype.name in named:
        kind = named[a.dtype.name]
    elif a.dtype in (np.uint8, np.int8):
        if dtype not in FP8:
            raise TypeError(f"{name} is numpy {a.dtype}: numpy has no fp8 type, so 8-bit integers are fp8 bit patterns "
                            "only when dtype='e4m3' or dtype='e5m2' says which")
        return dtype
    else:
        raise TypeError(f"{name} is numpy {a.dtype}; flashcheck judges float32, float16, bf16 (uint16 bit patterns or "
                        "ml_dtypes.bfloat16) or fp8 (uint8 bit patterns with dtype=, or ml_dtypes' float8) and never "
                        "converts an array to another dtype")
    if dtype is not None and dtype != kind:
        raise TypeError(f"{name} holds {kind} (numpy {a.dtype}) but dtype={dtype!r}")
    return kind


def kind_of(x, name, dtype=None):
    """A tensor's flashcheck dtype, by tensor_view's rules, without copying it anywhere."""
    if is_torch(x):
        kinds = _torch_kinds(_torch())
        if x.dtype not in kinds:
            raise TypeError(f"{name} is {x.dtype}; flashcheck judges float32, float16, bfloat16 or float8 (e4m3fn, e5m2) "
                            "and never converts a tensor to another dtype")
        return kinds[x.dtype]
    return _numpy_kind(np.asarray(x), name, dtype)


def tensor_view(x, name, dtype=None):
    """(fc_tensor_view, the object that owns its memory, flashcheck dtype) of a q/k/v/o/lse tensor:
    its own bits, shape and strides. A CUDA tensor is copied to the host (torch keeps its strides
    when they are dense); nothing else is copied."""
    view = _lib.TensorView()
    if is_torch(x):
        torch = _torch()
        t = x.detach()
        kinds = _torch_kinds(torch)
        if t.dtype not in kinds:
            raise TypeError(f"{name} is {t.dtype}; flashcheck judges float32, float16, bfloat16 or float8 (e4m3fn, e5m2) "
                            "and never converts a tensor to another dtype")
        kind = kinds[t.dtype]
        if dtype is not None and dtype != kind:
            raise TypeError(f"{name} is {t.dtype} but dtype={dtype!r}")
        if t.device.type != "cpu":
            t = t.cpu()
        shape, strides, data, owner = tuple(t.shape), tuple(t.stride()), t.data_ptr(), t
    else:
        a = np.asarray(x)
        kind = _numpy_kind(a, name, dtype)
        item = a.dtype.itemsize
        if any(st % item for st in a.strides):
            raise ValueError(f"{name}'s strides {a.strides} are not whole elements of {item} bytes")
        shape, strides, data, owner = a.shape, tuple(st // item for st in a.strides), a.ctypes.data, a
    if not 1 <= len(shape) <= 4:
        raise ValueError(f"{name} has {len(shape)} dimensions, shape {tuple(shape)}; flashcheck's tensors have 1 to 4")
    view.data = data or None
    view.dtype = _lib.DTYPES[kind]
    view.ndim = len(shape)
    for i, (n, st) in enumerate(zip(shape, strides)):
        view.shape[i], view.strides[i] = n, st
    return view, owner, kind


def _host_numpy(x):
    """A side tensor (numpy, torch on any device, a list, a number) as a host numpy array."""
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (_torch().bfloat16, _torch().float16):
            t = t.float()  # exact
        return t.numpy()
    return np.asarray(x)


def float_side(x, name):
    """A side tensor (ALiBi slopes, sinks, descales) as a contiguous float32 array. Other float and
    integer types are taken only when float32 holds their values exactly: a slope must not change
    on its way in."""
    a = _host_numpy(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} is {a.dtype}; expected floating-point values")
    f = np.ascontiguousarray(a, dtype=np.float32)
    same = f.astype(np.float64) == a.astype(np.float64)
    if not np.all(same | (np.isnan(f) & np.isnan(a.astype(np.float64)))):
        raise ValueError(f"{name} holds values float32 cannot hold exactly (its dtype is {a.dtype}); pass float32")
    return f


def int_side(x, name, dtype=np.int32):
    """An integer side tensor (cu_seqlens, seqused, cache lengths, block tables) as a contiguous
    array of `dtype`; a value that does not fit is refused by name."""
    a = _host_numpy(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} is {a.dtype}; expected integers (int32 as FlashAttention takes them)")
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError(f"{name} holds {int(a.min()) if a.min() < info.min else int(a.max())}, outside {np.dtype(dtype).name}")
    return np.ascontiguousarray(a, dtype=dtype)


def array_view(view, np_dtype):
    """A numpy array aliasing the memory a C fc_tensor_view describes (no copy; writable)."""
    shape = tuple(view.shape[i] for i in range(view.ndim))
    if not view.data or any(n == 0 for n in shape):
        return np.zeros(shape, dtype=np_dtype)
    item = np.dtype(np_dtype).itemsize
    elems = 1 + sum((n - 1) * view.strides[i] for i, n in enumerate(shape))
    raw = (ctypes.c_char * (elems * item)).from_address(view.data)
    base = np.frombuffer(raw, dtype=np_dtype)
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=tuple(view.strides[i] * item for i in range(view.ndim)))


def plain_view(array, kind):
    """A fc_tensor_view of a contiguous numpy array the caller keeps alive."""
    view = _lib.TensorView()
    view.data = array.ctypes.data or None
    view.dtype = _lib.DTYPES[kind] if isinstance(kind, str) else kind
    view.ndim = array.ndim
    for i, n in enumerate(array.shape):
        view.shape[i], view.strides[i] = n, array.strides[i] // array.dtype.itemsize
    return view
