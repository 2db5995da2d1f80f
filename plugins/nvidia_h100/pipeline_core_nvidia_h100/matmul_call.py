"""``matmul(a, b, *, bias=None, activation=None, out_dtype=None, out=None)``: the compiled
warp-specialized GEMM as a PyTorch call (docs/guide/matmul.md).

torch's semantics: ``a [M, K] @ b [K, N]`` for any M, N, K, bf16 or fp16 in (fp32 accumulate),
bf16 / fp16 / fp32 out, each operand row- or column-major wherever TMA can read it, with a fused
per-column bias and relu / gelu (tanh) / silu.  The kernel is the schedule
``warpspecialized-gemm`` compiled (and proven) with the call's variant as ``-p`` parameters and
written by the ``cuda-wgmma`` emitter; each variant is compiled and built once per process, its
cubin kept on disk (``kernel_cache``).  It launches on torch's current stream, allocates nothing
but the output, and never syncs, so it can be captured in a CUDA graph; it is registered as the
torch custom ops ``pipeline_core::matmul`` / ``matmul_out`` with fake implementations, so
``torch.compile`` traces it.  torch and CuPy are imported when the call runs, never at import.
``scaled_mm`` (fp8 e4m3, torch._scaled_mm's semantics, planned by ``gemm_scaled``) and batched
3-D operands share all of it (``pipeline_core::scaled_mm``).
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import attrs

from pipeline_core_nvidia_h100 import autotune
from pipeline_core_nvidia_h100.autotune import Candidate
from pipeline_core_nvidia_h100.gemm_call import (CallPlan, MatmulArgumentError,
                                                 MatmulTypeError, OperandMap, TensorInfo,
                                                 TileShape, Tuning, plan_call)
from pipeline_core_nvidia_h100.gemm_scaled import plan_scaled
from pipeline_core_nvidia_h100.launch_cache import Bounded, describe, launch
from pipeline_core_nvidia_h100.launch_cache import eager as _eager
from pipeline_core_nvidia_h100.runtime import _require
from pipeline_core_nvidia_h100.warpspecialized import (KERNEL_FAMILY, SCHEDULE_NAME, GemmVariant,
                                                       WsGeometry, describe_variant, k_tile)

__all__ = ["matmul", "scaled_mm", "MatmulArgumentError", "MatmulTypeError", "CALL_TILE",
           "CALL_STAGES", "schedule_params"]

#: The tile and ring depth the call's kernels are compiled with (the benchmark's ws-s4).
CALL_TILE = TileShape(bm=128, bn=256, bk=64)
CALL_STAGES = 4
#: Host-side tensor maps kept per process (an entry is 128 bytes; the oldest go first).
MAP_CACHE_SIZE = 4096
#: The launch techniques calls use (docs/guide/matmul.md, "Speed"); the benchmark's ablation
#: turns each off in turn (``attrs.evolve``; the launch cache is keyed by it).
TUNING = Tuning()
#: Launch recipes kept per process (one per distinct argument description; the oldest go first).
RECIPE_CACHE_SIZE = 1024
_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "e4m3"}


def schedule_params(v: GemmVariant, c: Candidate = autotune.DEFAULT) -> dict[str, str]:
    """The ``-p`` parameters that compile the call's kernel for variant ``v``: the untuned
    call's tile, or a tuned candidate's geometry (autotune.Candidate.params)."""
    if c == autotune.DEFAULT:
        tile = {"BM": str(CALL_TILE.bm), "BN": str(CALL_TILE.bn), "BK": str(k_tile(v.dtype))}
        return {**tile, **{k: str(val).lower() for k, val in attrs.asdict(v).items()}}
    return c.params(v)


def _host() -> Any:
    """The installed plugins, or, from a checkout on PYTHONPATH (no entry points), this plugin
    loaded by module."""
    from pipeline_core.plugin_api import PluginHost, default_host

    host = default_host()
    if SCHEDULE_NAME in host.schedules:
        return host
    return PluginHost(extra_modules=["pipeline_core_nvidia_h100.plugin"])


@attrs.frozen(kw_only=True)
class _Built:
    kernel: Any
    smem: int
    threads: int
    min_k_tiles: int


class _Kernels:
    """Each variant's kernel, compiled, emitted and built once per process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[GemmVariant, Candidate, int], _Built] = {}
        self._maps: dict[tuple[int | str, ...], Any] = {}
        self._sms: dict[int, int] = {}
        self._workspaces: dict[tuple[int, int, int], tuple[Any, Any]] = {}

    def get(self, v: GemmVariant, device: int, c: Candidate = autotune.DEFAULT) -> _Built:
        key = (v, c, device)
        found = self._built.get(key)
        if found is None:
            with self._lock:
                found = self._built.get(key) or self._build(v, c, device)
                self._built[key] = found
        return found

    @staticmethod
    def _build(v: GemmVariant, c: Candidate, device: int) -> _Built:
        from pipeline_core.plugin_api import compile_named

        from pipeline_core_nvidia_h100.emit_wgmma import KERNEL_NAME, emit_wgmma
        from pipeline_core_nvidia_h100.kernel_cache import cubin_path
        from pipeline_core_nvidia_h100.runtime import ARCH, KernelBuilder
        from pipeline_core_nvidia_h100.skeleton import declared_geometry

        stages = CALL_STAGES if c == autotune.DEFAULT else c.stages
        compiled = compile_named(SCHEDULE_NAME, target="h100", params=schedule_params(v, c),
                                 target_args={"stages": str(stages)}, host=_host())
        g = declared_geometry(compiled, KERNEL_FAMILY, WsGeometry, "matmul")
        source = emit_wgmma(compiled)
        # the fewest K tiles the agents' split is valid for (and proven at): shorter K is
        # padded with zero-filled tiles up to it
        min_k = compiled.plan.min_tiles
        cp = _require("cupy")
        with cp.cuda.Device(device):
            path = cubin_path(source, KERNEL_NAME, ("-std=c++17",), ARCH, _announce(v))
            if path is not None:
                kernel = cp.RawModule(path=str(path)).get_function(KERNEL_NAME)
            else:
                kernel = KernelBuilder().compile(source, KERNEL_NAME)
            KernelBuilder.set_max_dynamic_shared(kernel, g.smem_bytes)
        return _Built(kernel=kernel, smem=g.smem_bytes, threads=g.threads,
                      min_k_tiles=max(1, min_k))

    def sms(self, device: int) -> int:
        """The device's SM count, which the persistent grid and the split are sized by."""
        found = self._sms.get(device)
        if found is None:
            torch = _require("torch")
            found = self._sms[device] = torch.cuda.get_device_properties(
                device).multi_processor_count
        return found

    def workspace(self, device: int, stream: int, sms: int,
                  tile: int = CALL_TILE.bm * CALL_TILE.bn) -> tuple[Any, Any] | None:
        """Split-K's fp32 workspace and per-tile counters on (device, stream) for ``tile``
        (BM x BN) elements a slice, allocated once (a split grid has at most ``sms`` CTAs, so
        ``sms`` slices always suffice; the counters start at zero and each launch leaves them
        so).  None while a CUDA graph is being captured and none exists yet: the call allocates
        nothing then, and runs unsplit."""
        key = (device, stream, tile)
        found = self._workspaces.get(key)
        if found is None:
            torch = _require("torch")
            if torch.cuda.is_current_stream_capturing():
                return None
            with self._lock:
                found = self._workspaces.get(key)
                if found is None:
                    dev = torch.device("cuda", device)
                    found = (torch.empty(sms * tile, dtype=torch.float32, device=dev),
                             torch.zeros(sms, dtype=torch.int32, device=dev))
                    self._workspaces[key] = found
        return found

    def tensor_map(self, ptr: int, m: OperandMap, dtype: str) -> Any:
        """The tensor map of operand map ``m`` at ``ptr`` (A, B, or the TMA store's C), encoded
        once and kept."""
        from pipeline_core_nvidia_h100.tma import (DTYPE_BFLOAT16, DTYPE_FLOAT16, DTYPE_FLOAT32,
                                                   DTYPE_UINT8, encode_tiled_2d)

        key = (ptr, m.inner, m.outer, m.stride, m.box_inner, m.box_outer, dtype, m.batch,
               m.batch_stride)
        found = self._maps.get(key)
        if found is None:
            if len(self._maps) >= MAP_CACHE_SIZE:
                self._maps.pop(next(iter(self._maps)))
            kind = {"bf16": DTYPE_BFLOAT16, "fp16": DTYPE_FLOAT16, "fp32": DTYPE_FLOAT32,
                    "e4m3": DTYPE_UINT8}[dtype]
            found = self._maps[key] = encode_tiled_2d(
                ptr, m.outer, m.inner, m.box_outer, m.box_inner, stride=m.stride, dtype=kind,
                batch=m.batch, batch_stride=m.batch_stride)
        return found


_KERNELS = _Kernels()


def _announce(v: GemmVariant) -> Callable[[str], None]:
    """A cold call's one line on stderr: which variant is being built, and where it goes."""
    def say(text: str) -> None:
        print(f"pipeline-core matmul: {describe_variant(v)}: {text}", file=sys.stderr, flush=True)
    return say


def _info(t: Any, name: str) -> TensorInfo:
    torch = _require("torch")
    if not isinstance(t, torch.Tensor):
        raise MatmulTypeError(f"{name}: a {type(t).__name__}; matmul takes torch tensors or CuPy "
                              "arrays on a CUDA device")
    fake = t.device.type == "meta" or _is_fake(t)
    if not fake and t.device.type != "cuda":
        raise MatmulArgumentError(f"{name}: on {t.device}; matmul runs on CUDA tensors: pass "
                                  f"{name}.cuda()")
    dtype = _NAMES.get(str(t.dtype).removeprefix("torch."), str(t.dtype))
    return TensorInfo(shape=tuple(t.shape), strides=tuple(t.stride()), dtype=dtype,
                      ptr=None if fake else t.data_ptr(), device=str(t.device))


def _is_fake(t: Any) -> bool:
    """A FakeTensor (torch.compile's tracing, the fake impls): shape and strides, no address."""
    return isinstance(t, _require("torch._subclasses.fake_tensor").FakeTensor)


def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    return _NAMES.get(str(dtype).removeprefix("torch."), str(dtype))


def _plan(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any,
          out: Any, sms: int = 0, tuning: Tuning = Tuning(),
          c: Candidate = autotune.DEFAULT, scales: tuple[Any, Any] | None = None) -> CallPlan:
    """The call's plan: ``matmul``'s (gemm_call.plan_call), or with ``scales`` (scale_a,
    scale_b) ``scaled_mm``'s (gemm_scaled.plan_scaled)."""
    tile = CALL_TILE if c == autotune.DEFAULT else TileShape(bm=c.bm, bn=c.bn, bk=CALL_TILE.bk)
    if c != autotune.DEFAULT and not c.split_k:
        tuning = attrs.evolve(tuning, split_k=False)

    def plan(t: Tuning) -> CallPlan:
        if scales is not None:
            return plan_scaled(_info(a, "a"), _info(b, "b"), _info(scales[0], "scale_a"),
                               _info(scales[1], "scale_b"),
                               bias=None if bias is None else _info(bias, "bias"),
                               out_dtype=_dtype_name(out_dtype), tile=tile, sms=sms, tuning=t)
        return plan_call(_info(a, "a"), _info(b, "b"),
                         bias=None if bias is None else _info(bias, "bias"),
                         activation=activation, out_dtype=_dtype_name(out_dtype),
                         out=None if out is None else _info(out, "out"), tile=tile, sms=sms,
                         tuning=t)
    found = plan(tuning)
    # a tuned candidate whose shared memory cannot take the TMA store's staging stores directly
    if found.variant.store == "tma" and c != autotune.DEFAULT \
            and not autotune.takes(c, found.variant):
        found = plan(attrs.evolve(tuning, tma_store=False))
    return found


@attrs.frozen(kw_only=True)
class _Recipe:
    """What one call launches, planned and built once per argument description (:func:`_key`):
    the plan (``k_pad`` at least the kernel's fewest K tiles), the built kernel, the device and
    the stream (a split plan's workspace is the stream's own)."""

    plan: CallPlan
    built: _Built
    device: int
    stream: int
    #: the kernel's geometry (autotune.DEFAULT untuned); its tile sizes the split workspace
    candidate: Candidate = autotune.DEFAULT


def _key(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
         stream: int, scales: tuple[Any, Any] | None = None) -> tuple[Any, ...]:
    """Everything a call's plan depends on: each tensor's shape, strides, element type, device
    and whether its address is 16-byte aligned (the only use of the address the plan makes),
    the epilogue, the stream and :data:`TUNING` (launch_cache.describe)."""
    return (describe(a), describe(b), describe(bias), activation, out_dtype, describe(out),
            stream, TUNING,
            None if scales is None else (describe(scales[0]), describe(scales[1])))


_RECIPES: Bounded[_Recipe] = Bounded(RECIPE_CACHE_SIZE)


def _recipe(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
            plan: CallPlan, device: int, stream: int,
            c: Candidate = autotune.DEFAULT, scales: tuple[Any, Any] | None = None) -> _Recipe:
    """Build candidate ``c``'s kernel of a checked, non-empty ``plan`` (planned with ``c``); a
    split plan whose workspace cannot be made now (a CUDA graph being captured on a stream
    that has none) is planned unsplit."""
    if plan.splits > 1 and _KERNELS.workspace(device, stream, _KERNELS.sms(device),
                                              c.bm * c.bn) is None:
        plan = _plan(a, b, bias, activation, out_dtype, out, _KERNELS.sms(device),
                     attrs.evolve(TUNING, split_k=False), c, scales)
    built = _KERNELS.get(plan.variant, device, c)
    bk = k_tile(plan.variant.dtype)
    if built.min_k_tiles * bk > plan.k_pad:
        plan = attrs.evolve(plan, k_pad=built.min_k_tiles * bk)
    return _Recipe(plan=plan, built=built, device=device, stream=stream, candidate=c)


_ARGS: Bounded[tuple[Any, ...]] = Bounded(MAP_CACHE_SIZE)


def _launch(r: _Recipe, a: Any, b: Any, bias: Any, out: Any,
            scales: tuple[Any, Any] | None = None) -> None:
    """Launch recipe ``r`` on its stream (torch's current one): ``out`` = epilogue(a @ b).
    The kernel's arguments are packed once per (recipe, addresses) and kept (the oldest go
    first): a call repeated on the same tensors costs one lookup and the launch."""
    key = (r, a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(),
           out.data_ptr(), *(() if scales is None else (scales[0].data_ptr(),
                                                         scales[1].data_ptr())))
    args = _ARGS.get(key)
    if args is None:
        args = _ARGS.put(key, _pack(r, a, b, bias, out, scales))
    launch(r.built.kernel, r.device, r.stream, (r.plan.grid, r.plan.splits, r.plan.batch),
           (r.built.threads,), args, r.built.smem)


def _pack(r: _Recipe, a: Any, b: Any, bias: Any, out: Any,
          scales: tuple[Any, Any] | None = None) -> tuple[Any, ...]:
    """The kernel's arguments: the tensor maps, the addresses, the sizes, the workspace, the
    scales (scaled_mm), the output's batch stride in bytes (a batched kernel)."""
    np = _require("numpy")
    plan = r.plan
    v = plan.variant
    args: tuple[Any, ...] = (
        _KERNELS.tensor_map(a.data_ptr(), plan.a, v.dtype),
        _KERNELS.tensor_map(b.data_ptr(), plan.b, v.dtype),
        np.uint64(out.data_ptr()), np.uint64(0 if bias is None else bias.data_ptr()),
        np.int32(plan.m_pad), np.int32(plan.n_pad), np.int32(plan.k_pad),
        np.int32(plan.m), np.int32(plan.n), np.int64(plan.ldc))
    if v.split_k:
        found = _KERNELS.workspace(r.device, r.stream, _KERNELS.sms(r.device),
                                   r.candidate.bm * r.candidate.bn)
        if found is None:
            raise RuntimeError("internal error: a split-K recipe without its stream's workspace")
        ws, counters = found
        args += (np.uint64(ws.data_ptr()), np.uint64(counters.data_ptr()))
    if v.scale != "none":
        if scales is None:
            raise RuntimeError("internal error: a scaled recipe launched without its scales")
        args += (np.uint64(scales[0].data_ptr()), np.uint64(scales[1].data_ptr()))
    if v.batch != "none":
        args += (np.int64(plan.c_batch * out.element_size()),)
    if plan.c is not None:  # the TMA-store epilogue's C (docs/guide/matmul.md)
        args += (_KERNELS.tensor_map(out.data_ptr(), plan.c, v.out_dtype),)
    return args


def _call(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
          scales: tuple[Any, Any] | None = None) -> Any:
    """``out`` (allocated when None) = epilogue(a @ b) on torch's current stream: the arguments
    are checked and the kernel built on the first call of each argument description, later
    calls go straight to the launch.  ``scales``: scaled_mm's (scale_a, scale_b)."""
    torch = _require("torch")
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(device).cuda_stream
    key = _key(a, b, bias, activation, out_dtype, out, stream, scales)
    r = _RECIPES.get(key)
    if r is None:
        plan = _plan(a, b, bias, activation, out_dtype, out, _KERNELS.sms(device), TUNING,
                     scales=scales)
        if out is None:
            out = torch.empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch),
                              device=a.device)
        if 0 in plan.out_shape:
            return out
        if plan.k == 0:  # an empty sum: the epilogue of zeros, no kernel
            _epilogue_of_zeros(torch, out, bias, activation)
            return out
        c = autotune.DEFAULT
        if scales is None and plan.batch == 1:  # scaled and batched kernels are not tuned yet
            c = _tuned(a, b, bias, activation, out_dtype, out, plan, device, stream)
        if c != autotune.DEFAULT:
            plan = _plan(a, b, bias, activation, out_dtype, out, _KERNELS.sms(device), TUNING, c)
        r = _RECIPES.put(key, _recipe(a, b, bias, activation, out_dtype, out, plan, device,
                                      stream, c, scales))
    elif out is None:
        out = torch.empty(r.plan.out_shape,
                          dtype=_TORCH_OUT[r.plan.variant.out_dtype](torch), device=a.device)
    _launch(r, a, b, bias, out, scales)
    return out


#: Launches a tuning times per candidate (after one untimed launch that builds and warms it).
TUNE_LAUNCHES = 10


def _tuned(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
           plan: CallPlan, device: int, stream: int) -> Candidate:
    """The candidate this shape launches (docs/guide/matmul.md, "Autotuning"): autotune.DEFAULT
    unless ``$PIPELINE_CORE_AUTOTUNE=1``; then the tuning cache's winner for the shape's bucket,
    or a cold tuning that times the model's best few here, on the call's own tensors (``out``
    is written and then overwritten by the call).  Never while a CUDA graph is captured: timing
    syncs, so a capture launches the untuned variant unless the bucket is cached."""
    if not autotune.enabled(None):
        return autotune.DEFAULT
    torch = _require("torch")
    from pipeline_core_nvidia_h100.kernel_cache import toolkit_version

    sms = _KERNELS.sms(device)
    name = torch.cuda.get_device_name(device)
    if torch.cuda.is_current_stream_capturing():
        return autotune.cached(plan.m, plan.n, plan.k, plan.variant, device=name,
                               toolkit=toolkit_version()) or autotune.DEFAULT

    def timer(c: Candidate) -> float:
        r = _recipe(a, b, bias, activation, out_dtype, out,
                    _plan(a, b, bias, activation, out_dtype, out, sms, TUNING, c), device,
                    stream, c)
        _launch(r, a, b, bias, out)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(TUNE_LAUNCHES):
            _launch(r, a, b, bias, out)
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3 / TUNE_LAUNCHES

    return autotune.tune(plan.m, plan.n, plan.k, plan.variant, device=name, sms=sms,
                         toolkit=toolkit_version(), timer=timer)


def _epilogue_of_zeros(torch: Any, out: Any, bias: Any, activation: str | None) -> None:
    value = torch.zeros_like(out, dtype=torch.float32)
    if bias is not None:
        value = value + bias.float()
    act = {"relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
    if activation is not None:
        value = act[activation](value)
    out.copy_(value)


_REGISTERED: dict[str, Any] = {}


def _ops() -> Any:
    """The custom ops, registered on first use (torch imported only then)."""
    if _REGISTERED:
        return _REGISTERED["ns"]
    import torch  # type: ignore[import-not-found, unused-ignore]  # traceable (see matmul)

    def op(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any) -> Any:
        return _call(a, b, bias, activation, out_dtype, None)

    def fake(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any) -> Any:
        plan = _plan(a, b, bias, activation, out_dtype, None)
        return a.new_empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch))

    def op_scaled(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any,
                  out_dtype: Any) -> Any:
        return _call(a, b, bias, None, out_dtype, None, (scale_a, scale_b))

    def fake_scaled(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any,
                    out_dtype: Any) -> Any:
        plan = _plan(a, b, bias, None, out_dtype, None, scales=(scale_a, scale_b))
        return a.new_empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch))

    def op_out(a: Any, b: Any, bias: Any, activation: str | None, out: Any) -> None:
        _call(a, b, bias, activation, None, out)

    def fake_out(a: Any, b: Any, bias: Any, activation: str | None, out: Any) -> None:
        _plan(a, b, bias, activation, None, out)

    lib = torch.library
    mm = lib.custom_op("pipeline_core::matmul", op, mutates_args=(),
                       schema="(Tensor a, Tensor b, Tensor? bias, str? activation, "
                              "ScalarType? out_dtype) -> Tensor")
    mm.register_fake(fake)
    mo = lib.custom_op("pipeline_core::matmul_out", op_out, mutates_args=("out",),
                       schema="(Tensor a, Tensor b, Tensor? bias, str? activation, "
                              "Tensor(a!) out) -> ()")
    mo.register_fake(fake_out)
    sm = lib.custom_op("pipeline_core::scaled_mm", op_scaled, mutates_args=(),
                       schema="(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
                              "ScalarType? out_dtype) -> Tensor")
    sm.register_fake(fake_scaled)
    _REGISTERED["ns"] = torch.ops.pipeline_core
    return _REGISTERED["ns"]


_TORCH_OUT = {"bf16": lambda t: t.bfloat16, "fp16": lambda t: t.float16,
              "fp32": lambda t: t.float32}


def _as_torch(x: Any, name: str) -> tuple[Any, bool]:
    """``x`` as a torch tensor (a CuPy array through DLPack, no copy) and whether it was CuPy."""
    if x is None or type(x).__module__.startswith("torch"):
        return x, False
    if type(x).__module__.startswith("cupy"):
        return _require("torch").from_dlpack(x), True
    raise MatmulTypeError(f"{name}: a {type(x).__name__}; matmul takes torch tensors or CuPy "
                          "arrays on a CUDA device")


def matmul(a: Any, b: Any, *, bias: Any = None, activation: str | None = None,
           out_dtype: Any = None, out: Any = None) -> Any:
    """``epilogue(a @ b)``: a [M, K] and b [K, N] torch tensors (or CuPy arrays), bf16 or fp16;
    or batched, a [B, M, K] @ b [B, K, N] with one side 2-D (or a batch of 1) broadcast, giving
    [B, M, N] (docs/guide/matmul.md, "Batched matmul").  fp8 e4m3: :func:`scaled_mm`.

    ``bias``: [N], added per column (bf16, fp16 or fp32); ``activation``: ``"relu"``,
    ``"gelu"`` (tanh approximation) or ``"silu"``, after the bias; ``out_dtype``: bf16, fp16 or
    fp32 (default a's); ``out``: a row-major [M, N] tensor to write, returned.  Bad arguments
    raise :class:`MatmulArgumentError` (a ValueError) or :class:`MatmulTypeError` (a
    TypeError) with one line naming the argument.
    """
    a, cupy_in = _as_torch(a, "a")
    b, _ = _as_torch(b, "b")
    bias, _ = _as_torch(bias, "bias")
    out, _ = _as_torch(out, "out")
    if a is None or b is None:
        raise MatmulTypeError(f"{'a' if a is None else 'b'}: None; matmul takes torch tensors or "
                              "CuPy arrays on a CUDA device")
    # a is a torch tensor by now, so torch is imported; a plain import (not _require's
    # importlib) is what torch.compile can trace
    import torch  # type: ignore[import-not-found, unused-ignore]

    ops = _ops()  # registered before any torch.compile traces this call
    if _eager(torch, a, b, bias, out):
        result = _call(a, b, bias, activation, out_dtype, out)
    elif out is not None:
        if out_dtype is not None:  # the out op takes no out_dtype: judge the pair here
            _plan(a, b, bias, activation, out_dtype, out)
        ops.matmul_out(a, b, bias, activation, out)
        result = out
    else:
        result = ops.matmul(a, b, bias, activation, out_dtype)
    if cupy_in:
        return _require("cupy").from_dlpack(result)
    return result


def scaled_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None,
              bias: Any = None) -> Any:
    """``(a @ b) * scale_a * scale_b (+ bias)`` cast to ``out_dtype`` (default bf16), as
    ``torch._scaled_mm``: a [M, K] row-major and b [K, N] column-major, both
    ``torch.float8_e4m3fn``; fp32 scales per tensor (one element each) or row-wise (scale_a
    [M, 1], scale_b [1, N]); bias [N] (bf16, fp16 or fp32); out bf16, fp16 or fp32.  K a
    multiple of 16 (TMA steps fp8 rows in 16 bytes).  Bad arguments raise
    :class:`MatmulArgumentError` / :class:`MatmulTypeError`, one line naming the argument.
    docs/guide/matmul.md, "scaled_mm".
    """
    a, cupy_in = _as_torch(a, "a")
    b, _ = _as_torch(b, "b")
    scale_a, _ = _as_torch(scale_a, "scale_a")
    scale_b, _ = _as_torch(scale_b, "scale_b")
    bias, _ = _as_torch(bias, "bias")
    for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if x is None:
            raise MatmulTypeError(f"{name}: None; scaled_mm takes torch tensors or CuPy arrays "
                                  "on a CUDA device")
    import torch  # type: ignore[import-not-found, unused-ignore]  # traceable (see matmul)

    ops = _ops()
    if _eager(torch, a, b, scale_a, scale_b, bias):
        result = _call(a, b, bias, None, out_dtype, None, (scale_a, scale_b))
    else:
        result = ops.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)
    if cupy_in:
        return _require("cupy").from_dlpack(result)
    return result
