"""Build CUDA source at run time and launch it on torch or CuPy arrays.

The GPU packages are optional extras of this plugin (``pip install pipeline-core-nvidia-h100[cuda]``):
nothing here imports CuPy or torch until a kernel is built or launched, and a missing package is
one clear error naming the extra.  Builds go through NVRTC (CuPy's ``RawModule``) for sm_90a and
are cached per builder by a hash of the source, the name and the options, so a second build of
the same text costs nothing (CuPy also keeps its own on-disk cache).
"""
from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any

#: The architecture a kernel is built for: sm_90a enables the Hopper-only instructions, and is
#: what the mma.sync / ldmatrix / cp.async helpers were checked against.
ARCH = "sm_90a"
DEFAULT_OPTIONS: tuple[str, ...] = (f"--gpu-architecture={ARCH}", "-std=c++17")
EXTRA = "cuda"
DISTRIBUTION = "pipeline-core-nvidia-h100"


class MissingGPUPackage(RuntimeError):
    """A GPU package this call needs is not installed."""


def _require(module: str) -> Any:
    """GPU package ``module``, imported on first use (never at import: the CLI needs none);
    once imported, read from ``sys.modules`` (an eager call's per-launch lookups cost a
    dictionary read, not importlib's machinery)."""
    found = sys.modules.get(module)
    if found is not None:
        return found
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingGPUPackage(
            f"{module} is needed to build or launch CUDA kernels; install the extra: "
            f"pip install '{DISTRIBUTION}[{EXTRA}]' ({exc})") from None


def source_key(source: str, name: str, options: Sequence[str]) -> str:
    """The cache key of one build: sha256 over the source, the kernel name and the options."""
    h = hashlib.sha256()
    for part in (source, name, *options):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


class KernelBuilder:
    """Compiles kernels with NVRTC (through CuPy) and launches them; one cache per builder.

    ``compile(source, name)`` takes a kernel's ``__global__`` name or, for a template, its
    instantiation (``"gemm<128, 256>"``) and returns a CuPy ``RawKernel``.
    """

    def __init__(self, options: Sequence[str] = DEFAULT_OPTIONS) -> None:
        self.options = tuple(options)
        self._cache: dict[str, Any] = {}

    def compile(self, source: str, name: str) -> Any:
        key = source_key(source, name, self.options)
        kernel = self._cache.get(key)
        if kernel is None:
            cp = _require("cupy")
            module = cp.RawModule(code=source, options=self.options, name_expressions=[name])
            kernel = module.get_function(name)
            self._cache[key] = kernel
        return kernel

    @property
    def cached(self) -> int:
        return len(self._cache)

    @staticmethod
    def set_max_dynamic_shared(kernel: Any, nbytes: int) -> None:
        """Allow ``nbytes`` of dynamic shared memory (above 48 KB this must be raised first)."""
        if nbytes > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = nbytes

    def launch(self, kernel: Any, grid: tuple[int, ...], block: tuple[int, ...],
               args: Sequence[Any], *, shared_mem: int = 0, stream: Any = None) -> None:
        """Launch on ``stream`` (default: torch's current stream when an argument is a torch tensor).

        Arrays pass as device pointers read from ``__cuda_array_interface__`` (torch and CuPy
        both expose it; bf16 torch tensors are viewed as int16 first, which CuPy's interface
        understands); Python ints pass as 32-bit ints, floats as fp32.
        """
        cp = _require("cupy")
        np = _require("numpy")
        packed = []
        torch_stream = None
        for i, arg in enumerate(args):
            if isinstance(arg, bool):
                packed.append(np.int32(arg))
            elif isinstance(arg, int):
                packed.append(np.int32(arg))
            elif isinstance(arg, float):
                packed.append(np.float32(arg))
            elif isinstance(arg, (np.generic,)):
                packed.append(arg)
            else:
                ptr, is_torch = _device_pointer(arg, i)
                packed.append(np.uint64(ptr))
                if is_torch and torch_stream is None:
                    torch_stream = _torch_stream()
        use = stream if stream is not None else torch_stream
        if use is None:
            kernel(grid, block, tuple(packed), shared_mem=shared_mem)
            return
        import warnings

        with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream; CuPy 13 lacks its successor
            warnings.simplefilter("ignore", DeprecationWarning)
            external = cp.cuda.ExternalStream(int(use))
        with external:
            kernel(grid, block, tuple(packed), shared_mem=shared_mem)


def _device_pointer(arg: Any, index: int) -> tuple[int, bool]:
    """The device address of a contiguous array argument, and whether it is a torch tensor."""
    is_torch = type(arg).__module__.startswith("torch")
    obj = arg
    if is_torch:
        if not arg.is_cuda:
            raise ValueError(f"launch argument {index}: a CPU tensor; kernels need CUDA tensors")
        if not arg.is_contiguous():
            raise ValueError(f"launch argument {index}: a non-contiguous tensor; pass .contiguous()")
        torch = _require("torch")
        if arg.dtype == torch.bfloat16:  # CuPy's interface has no bf16 type string
            obj = arg.view(torch.int16)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is None:
        raise ValueError(f"launch argument {index}: {type(arg).__name__} is neither a number nor an "
                         "array with __cuda_array_interface__")
    strides = iface.get("strides")
    if strides is not None and not _c_contiguous(iface["shape"], strides, iface["typestr"]):
        raise ValueError(f"launch argument {index}: a non-contiguous array")
    return int(iface["data"][0]), is_torch


def _c_contiguous(shape: Sequence[int], strides: Sequence[int], typestr: str) -> bool:
    expect = int(typestr[2:])
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expect:
            return False
        expect *= dim
    return True


def _torch_stream() -> int:
    torch = _require("torch")
    return int(torch.cuda.current_stream().cuda_stream)
