"""The eager launch path the torch calls share (``matmul``, ``scaled_mm``, and the attention
plugin's ``attention``): whether a call may skip the custom op's dispatch, the description of a
tensor a launch recipe is keyed by, bounded per-process caches, CuPy's view of torch's stream,
and the launch on it (docs/guide/matmul.md, "Speed"; docs/guide/attention.md, "The launch
path").

A call checks and plans its arguments once per description and keeps the result; a repeated
call with the same description costs a dictionary lookup and the launch.  So a description must
hold everything a call's checks read: a cached call never skips a check that would refuse.
Nothing here imports torch or CuPy at import time.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import attrs

from pipeline_core_nvidia_h100.runtime import _require

V = TypeVar("V")


def plain(torch: Any, *tensors: Any) -> bool:
    """Plain CUDA tensors (``None`` for an absent optional one) outside torch.compile's tracing
    and any dispatch mode (fake tensors, a profiler's mode): what the call layer may hand to its
    own code rather than to the custom op, whose fake and dispatch those need."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False
    return all(t is None or (type(t) is torch.Tensor and t.is_cuda) for t in tensors)


def needs_gradient(torch: Any, *tensors: Any) -> bool:
    """Whether autograd must record a call on ``tensors``: grad mode is on (not
    ``torch.no_grad()``, inference mode or a backward) and one of them requires grad."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def eager(torch: Any, *tensors: Any) -> bool:
    """Whether a call may skip the custom op's dispatch and autograd: :func:`plain` tensors
    none of which needs a gradient (:func:`needs_gradient`); anything else goes through the
    op, or its eager autograd twin (``kit.call``), which do the same work."""
    return plain(torch, *tensors) and not needs_gradient(torch, *tensors)


def describe(t: Any) -> tuple[Any, ...] | None:
    """What a launch recipe knows of tensor ``t`` (None for an absent one): its shape, strides
    (so its contiguity and layout), element type, device (so whether it is on CUDA) and whether
    its address is 16-byte aligned (what TMA needs; the only use of the address a plan makes)."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


class Bounded(Generic[V]):
    """A per-process cache of at most ``size`` entries; the oldest go first (a long-running
    process with ever-new shapes or addresses keeps a bounded amount)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[Hashable, V] = {}

    def get(self, key: Hashable) -> V | None:
        return self._items.get(key)

    def put(self, key: Hashable, value: V) -> V:
        if key not in self._items and len(self._items) >= self.size:
            self._items.pop(next(iter(self._items)))
        self._items[key] = value
        return value

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()


_STREAMS: dict[int, Any] = {}


def external_stream(handle: int) -> Any:
    """CuPy's view of torch's stream ``handle``, made once per stream."""
    found = _STREAMS.get(handle)
    if found is None:
        import warnings

        cp = _require("cupy")
        with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream
            warnings.simplefilter("ignore", DeprecationWarning)
            found = _STREAMS[handle] = cp.cuda.ExternalStream(handle)
    return found


def current_stream(torch: Any, device: int) -> int:
    """torch's current stream on ``device``, as the raw handle a launch takes: read without
    making a ``torch.cuda.Stream`` object (an eager call's host time is what small GEMMs wait
    on), through torch's own accessor where it has one."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


class PackedArgs(tuple):  # type: ignore[type-arg, unused-ignore]
    """A launch's arguments packed once and kept by the call layer (``kit.call.Launch``): the
    launch builds the driver's parameter array for them once (on first launch) and later
    launches hand it to ``cuLaunchKernel`` directly, without CuPy converting each argument
    again (an eager small GEMM waits on the host: CuPy's conversion measured 9 us a launch on
    an H200, the driver call alone about 3).

    :meth:`around` gives the arguments of one call whose kernel takes values that change every
    call (an output allocated per call) between kept ones: those share this tuple's parameter
    array, the changing slots rewritten before each launch."""

    def around(self, late: tuple[Any, ...], tail: tuple[Any, ...]) -> PackedArgs:
        """This call's arguments: the kept ones, ``late`` (this call's), then ``tail``."""
        full = PackedArgs((*self, *late, *tail))
        full.template = self  # type: ignore[attr-defined]
        full.late = (len(self), len(self) + len(late))  # type: ignore[attr-defined]
        return full


def function_handle(kernel: Any) -> int | None:
    """The ``CUfunction`` a launch hands the driver: CuPy's ``Function`` holds it as ``ptr``;
    a ``RawKernel`` (what ``RawModule.get_function`` returns, and so what the kit loads) holds
    its ``Function`` for the current device as ``kernel``.  None for anything else (a test's
    stand-in), which CuPy then launches."""
    handle = getattr(kernel, "ptr", None)
    if handle is None:
        handle = getattr(getattr(kernel, "kernel", None), "ptr", None)
    return handle if isinstance(handle, int) and handle else None


@attrs.frozen(kw_only=True, eq=False)
class DriverParams:
    """The ``void*[]`` ``cuLaunchKernel`` reads for one set of packed arguments: each
    argument's bytes in a kept 0-d array (``kept``, in order), ``address`` the array of their
    addresses.  A late slot is rewritten in place (:meth:`fill`) before its launch."""

    kept: tuple[Any, ...]
    pointers: Any
    address: int

    @classmethod
    def of(cls, args: tuple[Any, ...]) -> DriverParams | None:
        """Built from ``args``; None when one is not a NumPy value (CuPy then converts them)."""
        np = _require("numpy")
        if not all(isinstance(a, (np.generic, np.ndarray)) for a in args):
            return None
        kept = tuple(np.array(a) for a in args)
        pointers = (ctypes.c_void_p * max(1, len(kept)))(*[k.ctypes.data for k in kept])
        return cls(kept=kept, pointers=pointers, address=ctypes.addressof(pointers))

    def fill(self, args: tuple[Any, ...], start: int, stop: int) -> None:
        """Rewrite slots ``start`` to ``stop`` with ``args``' values there (a late call's)."""
        for i in range(start, stop):
            self.kept[i][()] = args[i]


_LATE = threading.Lock()  # a late launch's fill and launch, one step across threads


def _driver(kernel: Any, args: PackedArgs) -> tuple[int, DriverParams] | None:
    """``kernel``'s handle and ``args``' parameter array, found on first use and kept on the
    tuple that owns the array (a late call's template; its kernel is the same every call);
    None where the driver cannot take them (CuPy launches)."""
    owner: Any = getattr(args, "template", args)
    found = owner.__dict__.get("driver")
    if found is None:
        handle = function_handle(kernel)
        params = DriverParams.of(args) if handle is not None else None
        found = owner.driver = (handle, params) if handle is not None and params is not None \
            else False
    return found or None


def launch(kernel: Any, device: int, stream: int, grid: tuple[int, ...],
           block: tuple[int, ...], args: tuple[Any, ...], shared_mem: int) -> None:
    """Launch ``kernel`` with packed ``args`` on ``device``'s stream ``stream`` (torch's
    current one): no allocation, no sync, so a CUDA graph can capture it.  The stream is
    passed to the launch, not made current, and the device switched only when it is not the
    current one (each context manager costs microseconds an eager small GEMM waits on);
    :class:`PackedArgs` go to the driver as their kept parameter array."""
    cp = _require("cupy")
    if cp.cuda.runtime.getDevice() != device:
        with cp.cuda.Device(device):
            launch(kernel, device, stream, grid, block, args, shared_mem)
        return
    found = _driver(kernel, args) if isinstance(args, PackedArgs) else None
    if found is None:
        kernel(grid, block, args, shared_mem=shared_mem, stream=external_stream(stream))
        return
    handle, params = found
    g = (*grid, 1, 1)[:3]
    b = (*block, 1, 1)[:3]
    late = getattr(args, "late", None)
    # a late call's fill and launch under one lock: the driver copies the array during the
    # call, so no other thread's fill may come between
    with _LATE if late is not None else contextlib.nullcontext():
        if late is not None:
            params.fill(args, *late)
        cp.cuda.driver.launchKernel(handle, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem,
                                    stream, params.address, 0)
