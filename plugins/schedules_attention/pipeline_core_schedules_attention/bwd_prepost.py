"""The attention backward's preprocess and postprocess kernels (``bwd_prepost.cuh``) on the kit:
their parameters from one ``KernelSignature`` each, their source written here, their build,
recipes, packed arguments and launch on torch's current stream by the kit's ``HostCall``
(:data:`PREPOST`), the way the forward's kernel is (``call.py``).

Why two kernels of their own (FlashAttention-3's cut; docs/guide/attention.md, "Backward and
training"): the main kernel (``bwd_call.attention_bwd_main``, the schedule
``flash-attention-bwd``) owns a KV block and visits every query block, so each query row's
``delta = rowsum(dO * O)`` is needed by many CTAs: computed once before it, it is one fp32 read
per row there.  And dQ is summed across KV blocks in an fp32 accumulator in global memory,
which must start at zero and end in Q's dtype: the preprocess zeroes it (one launch fewer than
a separate fill), the postprocess casts it.  Both are memory-bound and not pipelined (no
schedule: nothing to prove but their bounds, which the tests and the sanitizer run check).
Every address is packed per call (``pack_around`` of all four), so the packed arguments are
kept per recipe, not per address: autograd hands a new dO each step.
"""
from __future__ import annotations

from typing import Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (PLUGIN_MODULE, Built, HostCall, KernelSignature,
                                               Launch, Recipe, current_stream, describe,
                                               gemm_call_header_source, header_source,
                                               kernel_params, load_kernel, pasted,
                                               require_gpu_module,
                                               wgmma_header_source)

from pipeline_core_schedules_attention.bwd_call import padded_rows
from pipeline_core_schedules_attention.layout import empty_like_layout, strides
from pipeline_core_schedules_attention.schedule import NAME

PRE_NAME = "pc_attention_bwd_pre"
POST_NAME = "pc_attention_bwd_post"
#: threads per block of both kernels (``pcap::THREADS``)
THREADS = 256
#: the dtypes the kernels are written for, as the forward's call names them
ELEMS = {"bf16": "pcap::Bf16", "fp16": "pcap::Fp16"}
_PTR = "const unsigned short* __restrict__"
PRE_SIGNATURE = KernelSignature(kernel=PRE_NAME, params=kernel_params(
    ((_PTR, "O", "pointer"), (_PTR, "dO", "pointer"),
     ("const float* __restrict__", "lse", "pointer")),
    (("float* __restrict__", "lse_pad", "pointer"), ("float* __restrict__", "delta", "pointer"),
     ("float* __restrict__", "dq_accum", "pointer")),
    (("long long", "rows", "int64"), ("int", "sq", "int32"), ("int", "sq_rows", "int32"),
     ("long long", "zero4", "int64"), ("int", "heads", "int32")),
    (("long long", "o_sb", "int64"), ("long long", "o_sh", "int64"),
     ("long long", "o_ss", "int64"), ("long long", "do_sb", "int64"),
     ("long long", "do_sh", "int64"), ("long long", "do_ss", "int64"))))
POST_SIGNATURE = KernelSignature(kernel=POST_NAME, params=kernel_params(
    (("const float* __restrict__", "dq_accum", "pointer"),
     ("unsigned short* __restrict__", "dQ", "pointer")),
    (("long long", "rows", "int64"), ("int", "sq", "int32"), ("int", "sq_rows", "int32"),
     ("int", "heads", "int32")),
    (("long long", "dq_sb", "int64"), ("long long", "dq_sh", "int64"),
     ("long long", "dq_ss", "int64"))))


@attrs.frozen(kw_only=True)
class PrepostCall:
    """What one preprocess or postprocess launch runs: the rows (B * H * Sq), Sq, the
    accumulator's rows per (batch, head), the head dim, the dtype, the heads and the strides
    (batch, head, position; elements) of the tensors it reads or writes at theirs: O's and
    dO's (preprocess), dQ's (postprocess: q's layout)."""

    rows: int
    sq: int
    sq_rows: int
    head_dim: int
    dtype: str
    heads: int = 1
    strides: tuple[tuple[int, ...], ...] = ()


def source(head_dim: int, dtype: str) -> str:
    """The CUDA of both kernels for one head dim and dtype: the kit's headers (their element
    conversions), ``bwd_prepost.cuh``, and the two entry points."""
    device = "\n".join(pasted(__package__, f) for f in ("dq_layout.cuh", "bwd_prepost.cuh"))
    elem = ELEMS[dtype]
    return "\n".join([
        f"// The attention backward's preprocess and postprocess (head dim {head_dim}, {dtype}): "
        "bwd_prepost.py.",
        header_source(), wgmma_header_source(), gemm_call_header_source(), device,
        'extern "C" __global__ void __launch_bounds__(pcap::THREADS)',
        f"{PRE_NAME}({PRE_SIGNATURE.render()}) {{",
        f"    pcap::preprocess<{head_dim}, {elem}>(O, dO, lse, lse_pad, delta, dq_accum, rows, sq, "
        "sq_rows, zero4, heads, pcap::Rows{o_sb, o_sh, o_ss}, pcap::Rows{do_sb, do_sh, do_ss});",
        "}",
        'extern "C" __global__ void __launch_bounds__(pcap::THREADS)',
        f"{POST_NAME}({POST_SIGNATURE.render()}) {{",
        f"    pcap::postprocess<{head_dim}, {elem}>(dq_accum, dQ, rows, sq, sq_rows, heads, "
        "pcap::Rows{dq_sb, dq_sh, dq_ss});", "}", ""])


def _build(key: tuple[str, int, str, int]) -> Built:
    name, head_dim, dtype, device = key
    return Built(kernel=load_kernel(source(head_dim, dtype), name, device=device, smem=0),
                 smem=0, threads=THREADS)


def _prepost_arguments(r: Recipe[PrepostCall], kernels: tuple[Built, ...],
          tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """One launch, every address late (packed per call): the preprocess's grid covers every
    row's lanes (the zeroing strides over it), the postprocess's every 8 floats of the
    accumulator (its pad rows' threads store nothing)."""
    np = require_gpu_module("numpy")
    (built,), c = kernels, r.plan
    pre = r.kernels[0] == (PRE_NAME, c.head_dim, c.dtype, r.device)
    lanes = (c.rows if pre else c.rows // c.sq * c.sq_rows) * (c.head_dim // 8)
    grid = (max(1, -(-lanes // THREADS)),)
    sizes = {"rows": c.rows, "sq": c.sq, "sq_rows": c.sq_rows, "heads": c.heads}
    if pre:
        zero4 = c.rows // c.sq * c.sq_rows * c.head_dim // 4
        (o_sb, o_sh, o_ss), (do_sb, do_sh, do_ss) = c.strides
        return (Launch.of(built, grid, *PRE_SIGNATURE.pack_around(
            ("O", "dO", "lse", "lse_pad", "delta", "dq_accum"),
            {**sizes, "zero4": zero4, "o_sb": o_sb, "o_sh": o_sh, "o_ss": o_ss, "do_sb": do_sb,
             "do_sh": do_sh, "do_ss": do_ss}, np)),)
    (dq_sb, dq_sh, dq_ss), = c.strides
    return (Launch.of(built, grid, *POST_SIGNATURE.pack_around(
        ("dq_accum", "dQ"), {**sizes, "dq_sb": dq_sb, "dq_sh": dq_sh, "dq_ss": dq_ss}, np)),)


#: the two kernels' call layer (the kit's HostCall; key ``(kernel name, head dim, dtype,
#: device)``), a recipe per (kernel, argument description, stream)
PREPOST: HostCall[PrepostCall, Built] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_schedules_attention.plugin"),
    build=_build, pack=_prepost_arguments)


def _recipe(name: str, strided: tuple[Any, ...], stream: int,
            device: int) -> Recipe[PrepostCall]:
    """The recipe of kernel ``name`` on the [B, H, Sq, D] tensors ``strided`` (Q's dtype; the
    kernel reads or writes them at their own strides), made once per description and
    stream."""
    key = (name, *(describe(t) for t in strided), stream)
    found = PREPOST.recipes.get(key)
    if found is None:
        like = strided[0]
        b, h, sq, d = like.shape
        dtype = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}[str(like.dtype)]
        c = PrepostCall(rows=b * h * sq, sq=sq, sq_rows=padded_rows(sq), head_dim=d, dtype=dtype,
                        heads=h, strides=tuple(strides(t)[:3] for t in strided))
        found = PREPOST.recipes.put(key, Recipe(plan=c, device=device, stream=stream,
                                                kernels=((name, d, dtype, device),)))
    return found


def _where(torch: Any, t: Any) -> tuple[int, int]:
    device = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return device, current_stream(torch, device)


def preprocess(o: Any, do: Any, lse: Any) -> tuple[Any, Any, Any]:
    """``(lse_pad, delta, dq_accum)`` for the forward's output ``o``, its gradient ``do`` (both
    [B, H, Sq, D], one dtype, any strides layout.py's rule reads in place: the kernel reads
    them at theirs) and its saved ``lse`` ([B, H, Sq] fp32): lse_pad and
    delta [B, H, :func:`padded_rows` (Sq)] fp32 (each head's rows padded, as the main kernel's
    TMA loads them; pad rows +inf and 0), dq_accum [B, H, padded rows, D] fp32 zeroed; one
    launch on torch's current stream."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    device, stream = _where(torch, o)
    r = _recipe(PRE_NAME, (o, do), stream, device)
    b, h, sq, d = o.shape
    rows = r.plan.sq_rows
    lse_pad = torch.empty((b, h, rows), dtype=torch.float32, device=o.device)
    delta = torch.empty((b, h, rows), dtype=torch.float32, device=o.device)
    dq_accum = torch.empty((b, h, rows, d), dtype=torch.float32, device=o.device)
    PREPOST.launch(r, r, (), (o, do, lse, lse_pad, delta, dq_accum))
    return lse_pad, delta, dq_accum


def postprocess(dq_accum: Any, q: Any) -> Any:
    """dQ in ``q``'s dtype, shape and layout (layout.py) from the accumulator (its first Sq
    rows per (batch, head)); one launch on torch's current stream."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    device, stream = _where(torch, q)
    dq = empty_like_layout(torch, q)
    r = _recipe(POST_NAME, (dq,), stream, device)
    PREPOST.launch(r, r, (), (dq_accum, dq))
    return dq
