"""``matmul(a, b, *, bias=None, activation=None, out_dtype=None, out=None)``: the compiled
warp-specialized GEMM as a PyTorch call (docs/guide/matmul.md).

torch's semantics: ``a [M, K] @ b [K, N]`` for any M, N, K, bf16 or fp16 in (fp32 accumulate),
bf16 / fp16 / fp32 out, any strides, with a fused per-column bias and relu / gelu (tanh) /
silu.  Each operand is read where it lies, row- or column-major, wherever TMA can read it; one
it cannot, and an ``out`` the kernel cannot write, goes through an aligned copy made on the
call's stream (``gemm_staging``; docs/guide/matmul.md, "Layouts TMA cannot read").  The kernel
is the schedule ``warpspecialized-gemm`` compiled (and proven) with the call's variant as
``-p`` parameters and written by the ``cuda-wgmma`` emitter; each variant is compiled and built
once per process, its cubin kept on disk (``kernel_cache``).  It launches on torch's current
stream, allocates nothing but the output and those copies (torch's caching allocator), and
never syncs, so it can be captured in a CUDA graph; it is registered as the torch custom ops
``pipeline_core::matmul`` / ``matmul_out`` with fake implementations, so ``torch.compile``
traces it.  torch and CuPy are imported when the call runs, never at import.
``scaled_mm`` (fp8 e4m3, torch._scaled_mm's semantics, planned by ``gemm_scaled``) and batched
3-D operands share all of it (``pipeline_core::scaled_mm``).
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import attrs

from pipeline_core_nvidia_h100 import autotune, decompose
from pipeline_core_nvidia_h100.autotune import Candidate
from pipeline_core_nvidia_h100.gemm_call import (CallPlan, MatmulArgumentError,
                                                 MatmulTypeError, OperandMap, TensorInfo,
                                                 TileShape, Tuning, plan_call)
from pipeline_core_nvidia_h100.gemm_grouped import plan_grouped
from pipeline_core_nvidia_h100.gemm_scaled import plan_scaled
from pipeline_core_nvidia_h100.gemm_signature import KERNEL_NAME, gemm_signature
from pipeline_core_nvidia_h100.gemm_staging import Staging
from pipeline_core_nvidia_h100.kit.call import (Built, HostCall, Launch, Op, Recipe, load_kernel,
                                                split_workspace,
                                                sm_count, tensor_map)
from pipeline_core_nvidia_h100.launch_cache import current_stream, describe
from pipeline_core_nvidia_h100.launch_cache import eager as _eager
from pipeline_core_nvidia_h100.runtime import _require
from pipeline_core_nvidia_h100 import group_maps
from pipeline_core_nvidia_h100.warpspecialized import (GROUPED, GROUPED_K, KERNEL_FAMILY,
                                                       SCHEDULE_NAME, STORE_BUFFERS,
                                                       GemmVariant, WsGeometry, describe_variant,
                                                       k_tile)

__all__ = ["matmul", "scaled_mm", "grouped_mm", "scaled_grouped_mm", "MatmulArgumentError", "MatmulTypeError", "CALL_TILE",
           "CALL_STAGES", "schedule_params"]

#: The tile and ring depth the call's kernels are compiled with (the benchmark's ws-s4).
CALL_TILE = TileShape(bm=128, bn=256, bk=64)
CALL_STAGES = 4
#: The launch techniques calls use (docs/guide/matmul.md, "Speed"); the benchmark's ablation
#: turns each off in turn (``attrs.evolve``; the launch cache is keyed by it).
TUNING = Tuning()
_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "e4m3",
          "int32": "int32"}  # int32: grouped_mm's offs


def schedule_params(v: GemmVariant, c: Candidate = autotune.DEFAULT) -> dict[str, str]:
    """The ``-p`` parameters that compile the call's kernel for variant ``v``: the untuned
    call's tile, or a tuned candidate's geometry (autotune.Candidate.params)."""
    if c == autotune.DEFAULT:
        tile = {"BM": str(CALL_TILE.bm), "BN": str(CALL_TILE.bn), "BK": str(k_tile(v.dtype))}
        return {**tile, **{k: str(val).lower() for k, val in attrs.asdict(v).items()}}
    return c.params(v)


@attrs.frozen(kw_only=True, eq=False)
class GemmKernel(Built):
    """A variant's kernel: what the recipe and the packer read besides the launch's."""

    #: the fewest K tiles the agents' split is valid for (and proven at): shorter K is padded
    #: with zero-filled tiles up to it
    min_k_tiles: int
    #: BM x BN, the elements of one split-K workspace slice
    tile: int


def kernel_source(v: GemmVariant, c: Candidate) -> tuple[Any, str]:
    """Variant ``v``'s schedule for candidate ``c`` compiled (and proven), and its CUDA (the
    benchmarks' prebuild builds the same text into the disk cache)."""
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma

    compiled = CALL.compile(schedule_params(v, c),
                            CALL_STAGES if c == autotune.DEFAULT else c.stages)
    return compiled, emit_wgmma(compiled)


def _build(key: tuple[GemmVariant, Candidate, int] | tuple[str, int]) -> GemmKernel:
    """Variant ``v``'s kernel for candidate ``c`` on ``device``: compiled (and proven),
    emitted and loaded (kit.call.load_kernel); key ``(group_maps.GROUP_MAPS, device)``: the
    pre-pass of grouped_mm's 2-D x 2-D."""
    from pipeline_core_nvidia_h100.skeleton import declared_geometry

    if key[0] == group_maps.GROUP_MAPS:
        return GemmKernel(kernel=group_maps.build(int(key[1])), smem=0,
                          threads=group_maps.THREADS, min_k_tiles=1, tile=0)
    v, c, device = key  # type: ignore[misc]  # the variant's key (the pre-pass's is above)
    compiled, source = kernel_source(v, c)
    g = declared_geometry(compiled, KERNEL_FAMILY, WsGeometry, "matmul")
    kernel = load_kernel(source, KERNEL_NAME, device=device, smem=g.smem_bytes,
                         announce=_announce(v))
    return GemmKernel(kernel=kernel, smem=g.smem_bytes, threads=g.threads,
                      min_k_tiles=max(1, compiled.plan.min_tiles), tile=g.bm * g.bn)


def _workspace(r: Recipe[CallPlan]) -> tuple[Any, ...] | None:
    """The memory a recipe's launch uses beside its operands, on its stream (or a CUDA graph
    capture's own, so the launch is keyed by its address): split-K's or stream-K's fp32
    workspace and per-tile counters, its kernel's BM x BN elements a slice (the kit's
    ``split_workspace``: a split grid has at most ``sms`` CTAs, so ``sms`` slices always
    suffice; stream-K's takes ``2 x sms`` slices, each CTA's first and last shared tile's); the
    grouped-K pre-pass's tensor maps (``group_maps.maps_memory``); None for any other."""
    v = r.plan.variant
    if v.batch == GROUPED_K:
        return (group_maps.maps_memory(r.device, r.stream, r.plan.groups),)
    if not (v.split_k or v.stream_k):
        return None
    tile = CALL.kernels.kernel(r.kernels[-1]).tile
    return split_workspace(r.device, r.stream, (2 if v.stream_k else 1) * sm_count(r.device),
                           tile)


def _operand_map(ptr: int, m: OperandMap, dtype: str) -> Any:
    """The tensor map of operand map ``m`` at ``ptr`` (A, B, or the TMA store's C)."""
    return tensor_map(ptr, m.outer, m.inner, m.box_outer, m.box_inner, dtype, stride=m.stride,
                      batch=m.batch, batch_stride=m.batch_stride)


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
    scale_b) ``scaled_mm``'s (gemm_scaled.plan_scaled): :func:`plan_infos` of the tensors'
    descriptions."""
    def info(t: Any, name: str) -> TensorInfo | None:
        return None if t is None else _info(t, name)
    return plan_infos(_info(a, "a"), _info(b, "b"), info(bias, "bias"), activation,
                      _dtype_name(out_dtype), info(out, "out"), sms, tuning, c,
                      None if scales is None else (_info(scales[0], "scale_a"),
                                                   _info(scales[1], "scale_b")))


def _candidate_tile(c: Candidate) -> TileShape:
    """The tile candidate ``c`` plans with (the call's own for the default candidate)."""
    if c == autotune.DEFAULT:
        return CALL_TILE
    return TileShape(bm=c.bm, bn=c.bn, bk=CALL_TILE.bk, consumers=c.consumers,
                     pingpong=c.pingpong)


def plan_infos(a: TensorInfo, b: TensorInfo, bias: TensorInfo | None, activation: str | None,
               out_dtype: str | None, out: TensorInfo | None, sms: int = 0,
               tuning: Tuning = Tuning(), c: Candidate = autotune.DEFAULT,
               scales: tuple[TensorInfo, TensorInfo] | None = None) -> CallPlan:
    """:func:`_plan` on tensor descriptions, with no GPU package (the benchmarks' prebuild
    plans with it what a GPU run will launch): candidate ``c``'s tile, its split only where it
    asks for one, and the direct store where its shared memory cannot take the TMA store's."""
    tile = _candidate_tile(c)
    if c != autotune.DEFAULT and not c.split_k:
        tuning = attrs.evolve(tuning, split_k=False)

    def plan(t: Tuning) -> CallPlan:
        if scales is not None:
            return plan_scaled(a, b, scales[0], scales[1], bias=bias, out_dtype=out_dtype,
                               tile=tile, sms=sms, tuning=t, stream_k=c.stream_k)
        return plan_call(a, b, bias=bias, activation=activation, out_dtype=out_dtype, out=out,
                         tile=tile, sms=sms, tuning=t, stream_k=c.stream_k)
    found = plan(tuning)
    # a tuned candidate whose shared memory cannot take the TMA store's staging stores directly
    if found.variant.store == "tma" and c != autotune.DEFAULT \
            and not autotune.takes(c, found.variant):
        found = plan(attrs.evolve(tuning, tma_store=False))
    return found


def _matmul_key(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
                stream: int, scales: tuple[Any, Any] | None = None) -> tuple[Any, ...]:
    """Everything a call's plan depends on: each tensor's shape, strides, element type, device
    and whether its address is 16-byte aligned (the only use of the address the plan makes),
    the epilogue, the stream and :data:`TUNING` (launch_cache.describe)."""
    return (describe(a), describe(b), describe(bias), activation, out_dtype, describe(out),
            stream, TUNING,
            None if scales is None else (describe(scales[0]), describe(scales[1])))


def _recipe(plan: CallPlan, device: int, stream: int,
            c: Candidate = autotune.DEFAULT) -> Recipe[CallPlan]:
    """Build candidate ``c``'s kernel of a checked, non-empty ``plan`` (planned with ``c``)."""
    key = (plan.variant, c, device)
    built = CALL.kernels.kernel(key)
    # the TMA store's box is the kernel's sub-tile: both read warpspecialized.store_cols, the
    # plan with the candidate's consumers (plan_infos' TileShape)
    if plan.c is not None and plan.c.box_inner != c.geometry(plan.variant).store_cols:
        raise RuntimeError(f"internal error: C's box of {plan.c.box_inner} columns is not "
                           f"{c.describe()}'s TMA-store sub-tile; plan it with plan_infos")
    bk = k_tile(plan.variant.dtype)
    if built.min_k_tiles * bk > plan.k_pad:
        plan = attrs.evolve(plan, k_pad=built.min_k_tiles * bk)
    # groups along K: the pre-pass writing the groups' tensor maps first (group_maps)
    more = ((group_maps.GROUP_MAPS, device),) if plan.variant.batch == GROUPED_K else ()
    return Recipe(plan=plan, device=device, stream=stream, kernels=(*more, key))


def launch_recipe(r: Recipe[CallPlan], a: Any, b: Any, bias: Any, out: Any,
                  scales: tuple[Any, Any] | None = None) -> None:
    """Launch recipe ``r`` on its stream (torch's current one): ``out`` = epilogue(a @ b).
    The kernel's arguments are packed once per (recipe, addresses, the workspace's among them)
    and kept (the oldest go first): a call repeated on the same tensors costs one lookup and
    the launch."""
    ws = _workspace(r)
    more = () if scales is None else scales
    CALL.launch(r, (r, a.data_ptr(), b.data_ptr(), 0 if bias is None else bias.data_ptr(),
                    out.data_ptr(), None if ws is None else ws[0].data_ptr(),
                    *(x.data_ptr() for x in more)), (a, b, bias, out, ws, *more))


def _gemm_arguments(r: Recipe[CallPlan], kernels: tuple[GemmKernel, ...],
                    tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The kernel's launch (gemm_signature): the tensor maps, the addresses, the sizes, the
    workspace (split-K), the scales (scaled_mm), the output's batch stride in bytes (a
    batched kernel), the groups' ends (a grouped kernel: the last tensor), C's tensor map (the
    TMA store); the grid (tiles, splits, batches)."""
    np = _require("numpy")
    (*prepass, built), (a, b, bias, out, found, *scales) = kernels, tensors
    plan = r.plan
    v = plan.variant
    values = {"tmA": _operand_map(a.data_ptr(), plan.a, v.dtype),
              "tmB": _operand_map(b.data_ptr(), plan.b, v.dtype),
              "C": out.data_ptr(), "bias": 0 if bias is None else bias.data_ptr(),
              "M": plan.m_pad, "N": plan.n_pad, "K": plan.k_pad, "m": plan.m, "n": plan.n,
              "ldc": plan.ldc}
    if v.split_k or v.stream_k:  # stream-K: each CTA's two slots, each shared tile's counter
        if found is None or len(found) != 2:
            raise RuntimeError("internal error: a split recipe launched without its workspace")
        values.update(ws=found[0].data_ptr(), counters=found[1].data_ptr())
    if v.stream_k:
        values["sk_tiles"] = plan.sk_tiles
    first: tuple[Launch, ...] = ()
    if v.batch == GROUPED_K:  # 2-D x 2-D: the groups' maps, written by the pre-pass first
        (offs,), (maps,) = scales, found
        values.update(offs=offs.data_ptr(), groups=plan.groups, maps=maps.data_ptr(), k=plan.k,
                      c_batch=plan.c_batch * out.element_size())
        first = (group_maps.prepass(prepass[0], plan, values["tmA"], values["tmB"],
                                    maps.data_ptr(), offs.data_ptr(), a.data_ptr(),
                                    b.data_ptr()),)
        scales = []
    if v.batch in GROUPED:  # grouped_mm's offs, after the scales
        *scales, offs = scales
        values.update(offs=offs.data_ptr(), groups=plan.groups)
        if v.scale != "none":
            values["scale_group"] = plan.scale_group
    if v.scale != "none":
        if not scales:
            raise RuntimeError("internal error: a scaled recipe launched without its scales")
        values.update(scale_a=scales[0].data_ptr(), scale_b=scales[1].data_ptr())
    if v.strided_batch:
        values["c_batch"] = plan.c_batch * out.element_size()
    if v.load == "cp_async":  # the cp.async producer's operands (docs/guide/matmul.md)
        elem = a.element_size()
        values.update(a_ptr=a.data_ptr(), b_ptr=b.data_ptr(), a_ld=plan.a.stride * elem,
                      b_ld=plan.b.stride * elem, k_bytes=plan.k * elem)
    if plan.c is not None:  # the TMA-store epilogue's C (docs/guide/matmul.md)
        values["tmC"] = _operand_map(out.data_ptr(), plan.c, v.out_dtype)
    return (*first, Launch.of(built, (plan.grid, plan.splits, plan.batch),
                              gemm_signature(v).pack(values, np)))


def _run(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
         scales: tuple[Any, Any] | None = None) -> Any:
    """``out`` (allocated when None) = epilogue(a @ b) on torch's current stream: the arguments
    are checked and the kernel built on the first call of each argument description, later
    calls go straight to the launch.  ``scales``: scaled_mm's (scale_a, scale_b)."""
    torch = _require("torch")
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    stream = current_stream(torch, device)
    key = _matmul_key(a, b, bias, activation, out_dtype, out, stream, scales)
    r = CALL.recipes.get(key)
    if r is None:
        plan = _plan(a, b, bias, activation, out_dtype, out, sm_count(device), TUNING,
                     scales=scales)
        if out is None:
            out = torch.empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch),
                              device=a.device)
        if 0 in plan.out_shape:
            return out
        if plan.k == 0:  # an empty sum: the epilogue of zeros, no kernel
            _epilogue_of_zeros(torch, out, bias, activation)
            return out
        c = _candidate(a, b, bias, activation, out_dtype, out, plan, device, stream,
                       sm_count(device), scales is not None)
        if c != autotune.DEFAULT:
            plan = _plan(a, b, bias, activation, out_dtype, out, sm_count(device), TUNING, c,
                         scales)
        r = CALL.recipes.put(key, _recipe(plan, device, stream, c))
    elif out is None:
        out = torch.empty(r.plan.out_shape,
                          dtype=_TORCH_OUT[r.plan.variant.out_dtype](torch), device=a.device)
    if not r.plan.staged:
        launch_recipe(r, a, b, bias, out, scales)
        return out
    a, b, bias, written = _staged(torch, r.plan.staged, a, b, bias, out)
    launch_recipe(r, a, b, bias, written, scales)
    if written is not out:
        out.copy_(written)
    return out


def _staged(torch: Any, staged: tuple[Staging, ...], a: Any, b: Any, bias: Any,
            out: Any) -> tuple[Any, Any, Any, Any]:
    """The tensors the kernel takes for (a, b, bias, out): each the plan stages
    (gemm_staging; docs/guide/matmul.md, "Layouts TMA cannot read") is an aligned copy,
    allocated per call by torch's caching allocator and copied on torch's current stream (so
    a CUDA graph captures it); ``out``'s is an unfilled temporary the caller copies back."""
    found = {s.operand: s for s in staged}

    def copy(x: Any, name: str) -> Any:
        s = found.get(name)
        if x is None or s is None:
            return x
        y = torch.empty_strided(s.shape, s.strides, dtype=x.dtype, device=x.device)
        if name == "out":
            return y
        return y.copy_(x[0] if len(s.shape) < x.dim() else x)  # a broadcast batch: one matrix
    return copy(a, "a"), copy(b, "b"), copy(bias, "bias"), copy(out, "out")


#: Launches a tuning times per candidate (after one untimed launch that builds and warms it).
TUNE_LAUNCHES = 10


def _candidate(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
               plan: CallPlan, device: int, stream: int, sms: int, scaled: bool) -> Candidate:
    """The candidate a call launches: the tuned one (:func:`_tuned`) under
    ``$PIPELINE_CORE_AUTOTUNE=1``, else the shape's decomposition (decompose.choose); scaled
    and batched kernels are not tuned yet and always take the decomposition."""
    if not scaled and plan.batch == 1 and autotune.enabled(None):
        # tuning times the kernel on the copies the plan stages
        ta, tb, tbias, tout = _staged(_require("torch"), plan.staged, a, b, bias, out)
        return _tuned(ta, tb, tbias, activation, out_dtype, tout, plan, device, stream)
    return decomposition(plan, sms)


def decomposition(plan: CallPlan, sms: int) -> Candidate:
    """The untuned call's candidate for ``plan`` (planned with the default tile) on ``sms``
    SMs under :data:`TUNING` (decompose.for_plan): what the call launches, and what the
    benchmarks' prebuilds build."""
    return decompose.for_plan(plan, sms, TUNING.stream_k, TUNING.wave_model, TUNING.pingpong)


def _tuned(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any, out: Any,
           plan: CallPlan, device: int, stream: int) -> Candidate:
    """The candidate a tuned call (``$PIPELINE_CORE_AUTOTUNE=1``; docs/guide/matmul.md,
    "Autotuning") launches for this shape: the tuning cache's winner for the shape's bucket,
    or a cold tuning that times the model's best few here, on the call's own tensors (``out``
    is written and then overwritten by the call).  Never while a CUDA graph is captured: timing
    syncs, so a capture launches the untuned decomposition unless the bucket is cached."""
    torch = _require("torch")
    from pipeline_core_nvidia_h100.kernel_cache import toolkit_version

    sms = sm_count(device)
    name = torch.cuda.get_device_name(device)
    if torch.cuda.is_current_stream_capturing():
        return autotune.cached(plan.m, plan.n, plan.k, plan.variant, device=name,
                               toolkit=toolkit_version()) \
            or decomposition(plan, sms)

    def timer(c: Candidate) -> float:
        r = _recipe(_plan(a, b, bias, activation, out_dtype, out, sms, TUNING, c), device,
                    stream, c)
        launch_recipe(r, a, b, bias, out)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(TUNE_LAUNCHES):
            launch_recipe(r, a, b, bias, out)
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3 / TUNE_LAUNCHES

    # the untuned pick timed too: the model cannot rank ping-pong (wave_cost.RATES can)
    return autotune.tune(plan.m, plan.n, plan.k, plan.variant, device=name, sms=sms,
                         toolkit=toolkit_version(), timer=timer,
                         also=(decomposition(plan, sms),))


def _epilogue_of_zeros(torch: Any, out: Any, bias: Any, activation: str | None) -> None:
    value = torch.zeros_like(out, dtype=torch.float32)
    if bias is not None:
        value = value + bias.float()
    act = {"relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
    if activation is not None:
        value = act[activation](value)
    out.copy_(value)


def _matmul_ops() -> tuple[Op, ...]:
    """The custom ops ``pipeline_core::matmul``, ``matmul_out``, ``scaled_mm``, ``grouped_mm``
    and ``scaled_grouped_mm`` with their fakes (registered by ``CALL.ops()`` on first use, torch imported only then)."""
    import torch  # type: ignore[import-not-found, unused-ignore]  # traceable (see matmul)

    def op(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any) -> Any:
        return _run(a, b, bias, activation, out_dtype, None)

    def fake(a: Any, b: Any, bias: Any, activation: str | None, out_dtype: Any) -> Any:
        plan = _plan(a, b, bias, activation, out_dtype, None)
        return a.new_empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch))

    def op_scaled(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any,
                  out_dtype: Any) -> Any:
        return _run(a, b, bias, None, out_dtype, None, (scale_a, scale_b))

    def fake_scaled(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any,
                    out_dtype: Any) -> Any:
        plan = _plan(a, b, bias, None, out_dtype, None, scales=(scale_a, scale_b))
        return a.new_empty(plan.out_shape, dtype=_TORCH_OUT[plan.variant.out_dtype](torch))

    def op_out(a: Any, b: Any, bias: Any, activation: str | None, out: Any) -> None:
        _run(a, b, bias, activation, None, out)

    def fake_out(a: Any, b: Any, bias: Any, activation: str | None, out: Any) -> None:
        _plan(a, b, bias, activation, None, out)

    def op_grouped(a: Any, b: Any, offs: Any, out_dtype: Any) -> Any:
        return _run_grouped(a, b, offs, out_dtype)

    def fake_grouped(a: Any, b: Any, offs: Any, out_dtype: Any) -> Any:
        return _grouped_out(torch, a, _plan_grouped(a, b, offs, None, out_dtype))

    def op_scaled_grouped(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any,
                          out_dtype: Any) -> Any:
        return _run_grouped(a, b, offs, out_dtype, (scale_a, scale_b))

    def fake_scaled_grouped(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any,
                            out_dtype: Any) -> Any:
        return _grouped_out(torch, a, _plan_grouped(a, b, offs, None, out_dtype,
                                                    scales=(scale_a, scale_b)))

    return (Op(name="pipeline_core::grouped_mm", impl=op_grouped, fake=fake_grouped,
               schema="(Tensor a, Tensor b, Tensor? offs, ScalarType? out_dtype) -> Tensor"),
            Op(name="pipeline_core::scaled_grouped_mm", impl=op_scaled_grouped,
               fake=fake_scaled_grouped,
               schema="(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? offs, "
                      "ScalarType? out_dtype) -> Tensor"),
            Op(name="pipeline_core::matmul", impl=op, fake=fake,
               schema="(Tensor a, Tensor b, Tensor? bias, str? activation, "
                      "ScalarType? out_dtype) -> Tensor"),
            Op(name="pipeline_core::matmul_out", impl=op_out, fake=fake_out, mutates=("out",),
               schema="(Tensor a, Tensor b, Tensor? bias, str? activation, "
                      "Tensor(a!) out) -> ()"),
            Op(name="pipeline_core::scaled_mm", impl=op_scaled, fake=fake_scaled,
               schema="(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias, "
                      "ScalarType? out_dtype) -> Tensor"))


#: the call layer of the GEMM family (kit.call.HostCall): its kernels (key: variant, tuned
#: candidate, device), recipes, packed arguments and ops
CALL: HostCall[CallPlan, GemmKernel] = HostCall(
    schedule=SCHEDULE_NAME, plugins=("pipeline_core_nvidia_h100.plugin",), build=_build,
    pack=_gemm_arguments, ops=_matmul_ops)


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
    fp32 (default a's); ``out``: an [M, N] tensor to write (any strides but 0), returned.  Any
    layout is taken: what TMA cannot read is copied first (docs/guide/matmul.md, "Layouts TMA
    cannot read").  Bad arguments raise :class:`MatmulArgumentError` (a ValueError) or
    :class:`MatmulTypeError` (a TypeError) with one line naming the argument.
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

    ops = CALL.ops()  # registered before any torch.compile traces this call
    if _eager(torch, a, b, bias, out):
        result = _run(a, b, bias, activation, out_dtype, out)
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
    multiple of 16, as torch._scaled_mm; rows TMA cannot step are copied first.  Bad arguments
    raise :class:`MatmulArgumentError` / :class:`MatmulTypeError`, one line naming the argument.
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

    ops = CALL.ops()
    if _eager(torch, a, b, scale_a, scale_b, bias):
        result = _run(a, b, bias, None, out_dtype, None, (scale_a, scale_b))
    else:
        result = ops.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)
    if cupy_in:
        return _require("cupy").from_dlpack(result)
    return result


# --- grouped_mm: a mixture of experts' GEMMs in one launch (gemm_grouped) -----------------------

def _grouped_candidate(a: Any, b: Any) -> Candidate:
    """The tile a grouped call runs (decompose.grouped): by its rows and groups, known on the
    host from the shapes (2-D a [T, K] by a 3-D b [G, K, N]: groups along M)."""
    along_m = a.dim() == 2 and b.dim() == 3
    return decompose.grouped(a.shape[0], b.shape[0] if along_m else 0,
                             _dtype_name(a.dtype) or "", not along_m)


def _plan_grouped(a: Any, b: Any, offs: Any, bias: Any, out_dtype: Any, sms: int = 0,
                  scales: tuple[Any, Any] | None = None) -> CallPlan:
    """grouped_mm's plan (gemm_grouped.plan_grouped), or with ``scales`` scaled_grouped_mm's,
    with the tile of :func:`_grouped_candidate` (:func:`plan_grouped_infos`)."""
    return plan_grouped_infos(
        _info(a, "a"), _info(b, "b"), None if offs is None else _info(offs, "offs"),
        None if bias is None else _info(bias, "bias"), _dtype_name(out_dtype), sms,
        None if scales is None else (_info(scales[0], "scale_a"), _info(scales[1], "scale_b")),
        _grouped_candidate(a, b))


#: Whether a grouped call along M / N takes the TMA store where its staging fits one buffer per
#: consumer only beside the groups' table (128x256 at 4 stages: ``WsGeometry.store_buffers``),
#: each sub-tile then waiting for the last one's store to have read its buffer.  On: the H200
#: (benchmarks/grouped_mm_call.py --store-timing, one process, 7 rounds; median per-round
#: ratio over the direct store) ran it 1.06-1.35x on the MoE rows it serves (Mixtral,
#: DeepSeek-64, Qwen3-30B, up and down, bf16 and fp8 row-wise), and ahead of 3 stages with two
#: buffers (``tma-s3``) on all but Qwen3 down fp8 (0.99); the TMA store with two buffers, along
#: K and on 64-row tiles, is the call's default too.
ONE_BUFFER_STORE = True


def plan_grouped_infos(a: TensorInfo, b: TensorInfo, offs: TensorInfo | None,
                       bias: TensorInfo | None, out_dtype: str | None, sms: int,
                       scales: tuple[TensorInfo, TensorInfo] | None, c: Candidate,
                       tuning: Tuning = TUNING, one_buffer: bool = ONE_BUFFER_STORE
                       ) -> CallPlan:
    """A grouped plan on tensor descriptions, with no GPU package (the benchmark plans its
    variants with it): candidate ``c``'s tile, and the direct store where its shared memory
    cannot take the TMA store's staging beside the groups' table, or (unless ``one_buffer``)
    takes only one buffer per consumer of it."""
    # a grouped kernel's consumers share tiles: never ping-pong
    tile = attrs.evolve(_candidate_tile(c), pingpong=False)

    def plan(t: Tuning) -> CallPlan:
        return plan_grouped(a, b, offs, bias=bias, out_dtype=out_dtype, tile=tile, sms=sms,
                            tuning=t, scales=scales)
    found = plan(tuning)
    v = found.variant
    if v.store == "tma" and not (autotune.takes(c, v) and (
            one_buffer or c.geometry(v).store_buffers == STORE_BUFFERS)):
        found = plan(attrs.evolve(tuning, tma_store=False))
    return found


def _grouped_out(torch: Any, a: Any, plan: CallPlan) -> Any:
    """A grouped plan's output, as torch's: rows padded to 16 bytes (``plan.ldc``); a batched
    plan's (3-D x 3-D) contiguous."""
    dtype = _TORCH_OUT[plan.variant.out_dtype](torch)
    if plan.variant.batch == GROUPED_K:  # [G, M, N], each group's rows padded
        return a.new_empty_strided(plan.out_shape, (plan.m * plan.ldc, plan.ldc, 1), dtype=dtype)
    if plan.variant.batch not in GROUPED:
        return a.new_empty(plan.out_shape, dtype=dtype)
    return a.new_empty_strided(plan.out_shape, (plan.ldc, 1), dtype=dtype)


def _run_grouped(a: Any, b: Any, offs: Any, out_dtype: Any,
                 scales: tuple[Any, Any] | None = None) -> Any:
    """grouped_mm (with ``scales``: scaled_grouped_mm) on torch's current stream: checked,
    planned and built on the first call of each argument description, then one launch; the
    groups' ends stay on the device (nothing syncs).  3-D x 3-D is a batched matmul."""
    torch = _require("torch")
    device = a.device.index if a.device.index is not None else torch.cuda.current_device()
    stream = current_stream(torch, device)
    key = ("grouped", describe(a), describe(b), describe(offs), out_dtype, stream, TUNING,
           None if scales is None else (describe(scales[0]), describe(scales[1])))
    r = CALL.recipes.get(key)
    if r is None:
        plan = _plan_grouped(a, b, offs, None, out_dtype, sm_count(device), scales)
        if not plan.variant.grouped:  # 3-D x 3-D: matmul's batched one
            CALL.recipes.put(key, Recipe(plan=plan, device=device, stream=stream, kernels=()))
            return _run(a, b, None, None, out_dtype, None)
        out = _grouped_out(torch, a, plan)
        if 0 in plan.out_shape or plan.groups == 0:
            return out
        if plan.k == 0:  # empty sums: zeros, no kernel
            return out.zero_()
        r = CALL.recipes.put(key, _recipe(plan, device, stream, _grouped_candidate(a, b)))
    elif not r.plan.variant.grouped:
        return _run(a, b, None, None, out_dtype, None)
    else:
        out = _grouped_out(torch, a, r.plan)
    more = () if scales is None else scales
    ws = _workspace(r)  # the grouped-K pre-pass's maps
    CALL.launch(r, (r, a.data_ptr(), b.data_ptr(), out.data_ptr(), offs.data_ptr(),
                    None if ws is None else ws[0].data_ptr(), *(x.data_ptr() for x in more)),
                (a, b, None, out, ws, *more, offs))
    return out


def _torch_args(call: str, args: dict[str, Any],
                required: tuple[str, ...]) -> tuple[list[Any], bool]:
    """``call``'s arguments as torch tensors (CuPy arrays through DLPack, :func:`_as_torch`) and
    whether ``a`` was CuPy; a ``required`` one that is None is refused in one line."""
    out, cupy_in = [], False
    for name, x in args.items():
        found, was_cupy = _as_torch(x, name)
        if found is None and name in required:
            raise MatmulTypeError(f"{name}: None; {call} takes torch tensors or CuPy arrays on "
                                  "a CUDA device")
        cupy_in |= was_cupy and name == "a"
        out.append(found)
    return out, cupy_in


def grouped_mm(a: Any, b: Any, *, offs: Any = None, bias: Any = None,
               out_dtype: Any = None) -> Any:
    """A grouped matmul, ``torch.nn.functional.grouped_mm``'s semantics (docs/guide/matmul.md,
    "Grouped GEMM"): ``a [T, K]`` (rows sorted by group) @ ``b [G, K, N]`` with ``offs`` (int32
    [G], the groups' cumulative row ends, on the device) gives ``[T, N]``, group g's rows times
    ``b[g]`` (a mixture of experts' forward); ``a [G, M, K]`` @ ``b [K, N_total]`` with offs
    along N gives ``[M, N_total]``; 3-D @ 3-D without offs is a batched matmul.  bf16 or fp16
    in, fp32 accumulate; ``out_dtype`` bf16, fp16 or fp32 (default a's).  One launch, no host
    sync: capturable in a CUDA graph, traceable by torch.compile (``pipeline_core::
    grouped_mm``).  Rows past ``offs[-1]`` are left unwritten, as torch's.  ``bias`` is refused,
    as torch refuses it.  Bad arguments raise :class:`MatmulArgumentError` /
    :class:`MatmulTypeError`, one line naming the argument."""
    (a, b, offs, bias), cupy_in = _torch_args("grouped_mm", dict(a=a, b=b, offs=offs, bias=bias),
                                              ("a", "b"))
    if bias is not None:  # refused with the other checks' order (the op takes no bias)
        _plan_grouped(a, b, offs, bias, out_dtype)
    result = CALL.call("grouped_mm", _run_grouped, _check_grouped, (a, b, offs), out_dtype)
    return _require("cupy").from_dlpack(result) if cupy_in else result


def _check_grouped(a: Any, b: Any, offs: Any, out_dtype: Any) -> None:
    _plan_grouped(a, b, offs, None, out_dtype)


def scaled_grouped_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, *, offs: Any = None,
                      bias: Any = None, out_dtype: Any = None) -> Any:
    """``grouped_mm`` of fp8 e4m3 operands with row-wise fp32 scales, torch._scaled_grouped_mm's
    semantics: 2-D ``a [T, K]`` row-major, 3-D ``b [G, K, N]`` column-major (K contiguous),
    ``scale_a [T]``, ``scale_b [G, N]``; or 3-D ``a [G, M, K]``, 2-D ``b [K, N_total]``,
    ``scale_a [G, M]``, ``scale_b [N_total]``; ``offs`` as grouped_mm's; out bf16 (default),
    fp16 or fp32.  Each group's product is scaled per row and column, as scaled_mm's
    (docs/guide/matmul.md, "Grouped GEMM")."""
    (a, b, scale_a, scale_b, offs, bias), cupy_in = _torch_args(
        "scaled_grouped_mm", dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b, offs=offs,
                                  bias=bias), ("a", "b", "scale_a", "scale_b"))
    if bias is not None:
        _plan_grouped(a, b, offs, bias, out_dtype, scales=(scale_a, scale_b))
    result = CALL.call("scaled_grouped_mm", _run_scaled_grouped, _check_scaled_grouped,
                       (a, b, scale_a, scale_b, offs), out_dtype)
    return _require("cupy").from_dlpack(result) if cupy_in else result


def _run_scaled_grouped(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any,
                        out_dtype: Any) -> Any:
    return _run_grouped(a, b, offs, out_dtype, (scale_a, scale_b))


def _check_scaled_grouped(a: Any, b: Any, scale_a: Any, scale_b: Any, offs: Any,
                          out_dtype: Any) -> None:
    _plan_grouped(a, b, offs, None, out_dtype, scales=(scale_a, scale_b))


# the ops registered now where torch is imported already (HostCall.register_if_torch_imported)
CALL.register_if_torch_imported()
