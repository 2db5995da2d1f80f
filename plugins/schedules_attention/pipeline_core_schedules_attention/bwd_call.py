"""``attention_bwd_main``: the attention backward's main kernel (the emitted
``flash-attention-bwd``) called on torch tensors, as the backward op calls it between its
preprocess (delta, the zeroed dQ accumulator) and its postprocess (dQ cast to the input's type).

The host side is the kit's (``HostCall``: the plugin host, the build cache, the recipes and
packed arguments, the tensor maps, the launch on torch's current stream) and the kernel's
signature ``bwd_signature.py``; this module keeps the family's own: the checks
(:func:`plan_bwd`, one line naming the argument at fault), the kernel's parameters and the
arguments it packs.  A kernel is compiled (and proven) once per (head dim, dtype, causal,
alignment, device) on a persistent grid; a call allocates dK and dV (two tensors: the backward
op's outputs may not alias each other) and nothing else: grouped-query heads run inside the kernel's output tile, so dK and
dV sum over a group with no workspace.  ``deterministic=True`` runs the kernel compiled with
``-p deterministic=true`` (dQ's adds ordered, proven by compile: bwd_schedule.py) on turn
counters it allocates per call, zeroed on the current stream (one int32 per (batch, query head,
query block): a memset, no host sync, so a CUDA graph captures it).  Zeroed per call rather
than reset by each part's last adder: the preprocess kernel, which zeroes the dQ accumulator,
stays the default's bit for bit, and the last adder of a query block is a fact of the launch
(the causal diagonal) the kernel would compute again for nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (ARCH, BUILD_OPTIONS, PLUGIN_MODULE,
                                               RECIPE_CACHE_SIZE, Bounded, Built,
                                               HostCall, Launch, Recipe, current_stream,
                                               cubin_path, describe, load_kernel,
                                               require_gpu_module, sm_count, tensor_map)

from pipeline_core_schedules_attention.layout import (bhsd_map, dense_strides, empty_in_order,
                                                      in_place, order_of, readable)

from pipeline_core_schedules_attention.bwd_schedule import BWD_HEAD_DIMS, DEFAULT_STAGES, NAME
from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
from pipeline_core_schedules_attention.bwd_signature import (KERNEL_NAME, ORDERED_SIGNATURE,
                                                             SIGNATURE)
from pipeline_core_schedules_attention.call import (LOG2E, AttentionArgumentError, no_backward,
                                                    plan_attention)
from pipeline_core_schedules_attention.tile_order import TileOrder, choose

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule

#: the dQ accumulator's rows per head are a multiple of this (the kernel reduces whole query
#: blocks, up to DQ_ROWS rows, past Sq)
DQ_ROWS = 128
#: the ring depth the call compiles (``-T stages``): the schedule's default
CALL_STAGES = DEFAULT_STAGES
FN = "attention_bwd_main"


@attrs.frozen(kw_only=True)
class BwdCall:
    """What one call runs: batch x KV heads, the query heads per KV head, the lengths, the dQ
    accumulator's rows per head, the head dim, dtype, scale, the causal alignment, the KV
    heads, the operands copied once because TMA cannot read them where they lie (``copied``:
    names among q, k, v, do; layout.py's rule) and dK's and dV's layouts, k's and v's
    (dimensions outermost first)."""

    bhk: int
    group: int
    sq: int
    sk: int
    sqp: int
    head_dim: int
    dtype: str
    scale: float
    causal: bool
    align: str = "top_left"
    deterministic: bool = False
    kv_heads: int = 1
    copied: tuple[str, ...] = ()
    dk_order: tuple[int, ...] = (0, 1, 2, 3)
    dv_order: tuple[int, ...] = (0, 1, 2, 3)

    def grad_strides(self, order: tuple[int, ...]) -> tuple[int, ...]:
        """The strides in elements of dK or dV ([B, Hkv, Sk, D], dense in ``order``)."""
        return dense_strides((self.bhk // self.kv_heads, self.kv_heads, self.sk,
                              self.head_dim), order)


def padded_rows(sq: int) -> int:
    """Sq rounded up to :data:`DQ_ROWS`: the rows per (batch, head) of the dQ accumulator and of
    the padded LSE and delta (the preprocess writes them so; the kernel reads them so)."""
    return -(-sq // DQ_ROWS) * DQ_ROWS


def _fail(name: str, why: str) -> AttentionArgumentError:
    return AttentionArgumentError(f"{FN}: {name}: {why}")


def plan_bwd(q: Any, k: Any, v: Any, do: Any, lse: Any, delta: Any, dq_accum: Any, *,
             causal: bool | str, scale: float | None, deterministic: bool = False) -> BwdCall:
    """The call's plan, or one :class:`AttentionArgumentError` naming the argument at fault:
    q, k, v and causal as the forward checks them (``call.plan_attention``, one statement of
    those rules), then dO, the saved rows and the dQ accumulator against them."""
    if not isinstance(deterministic, bool):
        raise _fail("deterministic", f"{deterministic!r}; pass True or False")
    try:
        fwd = plan_attention(q, k, v, causal=causal, scale=scale)
    except AttentionArgumentError as e:  # the forward's rules, named as this function's
        raise AttentionArgumentError(str(e).replace("attention:", f"{FN}:", 1)) from None
    b, h, sq, d = q.shape
    why = no_backward(d)
    if why is not None:
        raise _fail("q", why)
    if tuple(do.shape) != tuple(q.shape) or do.dtype != q.dtype:
        raise _fail("do", f"{do.dtype} {tuple(do.shape)} differs from q's {q.dtype} "
                          f"{tuple(q.shape)}; pass the output's gradient")
    sqp = padded_rows(sq)
    if do.device != q.device:
        raise _fail("do", f"on {do.device}, q on {q.device}; put them on one device")
    for name, t, shape, dtype in (("lse", lse, (b, h, sqp), "torch.float32"),
                                  ("delta", delta, (b, h, sqp), "torch.float32"),
                                  ("dq_accum", dq_accum, (b, h, sqp, d), "torch.float32")):
        if tuple(t.shape) != shape or str(t.dtype) != dtype:
            raise _fail(name, f"{t.dtype} {tuple(t.shape)}; pass {dtype} {shape}"
                              + f" (rows rounded up to bwd_call.DQ_ROWS = {DQ_ROWS})")
        if t.device != q.device or not t.is_contiguous() or t.data_ptr() % 16:
            raise _fail(name, "not a contiguous, 16-byte aligned tensor on q's device; pass "
                              ".contiguous() on q's device")
    # q, k, v and dO of any strides: read in place where TMA can, else copied once (layout.py)
    return BwdCall(bhk=fwd.bh // fwd.group, group=fwd.group, sq=sq, sk=fwd.sk, sqp=sqp,
                   head_dim=d, dtype=fwd.dtype, scale=fwd.scale_log2 / LOG2E,
                   causal=fwd.causal, align=fwd.align, deterministic=deterministic,
                   kv_heads=k.shape[1],
                   copied=(*fwd.copied, *(("do",) if not in_place(do) else ())),
                   dk_order=order_of(k), dv_order=order_of(v))


#: How each head dim's kernel cuts dQ = dS K between its two consumers (``-p`` parameters),
#: causal or not, default or deterministic: FlashAttention-3's cuts, each consumer its own 64
#: head columns over every key at D 128 (``dq_cut=columns``; at D 64 two consumers would hold 32
#: columns each, which the swizzled K box does not give), its own 64 query rows of 128-row query
#: blocks at D 64 (``dq_cut=rows``); the consumers' dS and dQ exchanged through joins
#: (docs/guide/attention.md, "dQ cut by columns").  Measured on the H200 (main kernel, one
#: process, five rounds, per-round medians): columns over the keys cut at D 128 0.99 / 1.04 /
#: 1.03 at S 1k / 4k / 16k, causal 1.09 / 1.10 / 1.08 (``attention_bwd_columns_s15_h200.jsonl``);
#: rows over the per-consumer keys cut at D 64 1.08 / 1.09 / 1.10
#: (``attention_bwd_rows_s15_h200.jsonl``).  D 64 causal kept the per-consumer keys cut
#: (``-p shared_dq=false``; rows measured 1.02 / 0.99 / 1.00 there) until the rows cut read dS
#: from registers and tested its mask once per query block: then rows ran 1.18 / 1.14 / 1.16
#: over it (``attention_bwd_d64_rows_causal_s19_h200.jsonl``).
DQ_CUT = {64: {"dq_cut": "rows", "block_m": "128"}, 128: {"dq_cut": "columns"}}
#: Every call kernel reads dS from registers for dK (``-p dk_rs``, FlashAttention-3's order:
#: dK's wgmma after dQ's, the dQ staging beside it; both cuts' joins publish dS to the dQ
#: wgmmas).  Measured on the H200 (main kernel, one process, five rounds, per-round medians
#: over the kernel without it; ``attention_bwd_dk_rs_s19_h200.jsonl``): D 128 1.040 / 1.117 /
#: 1.034 at S 1k / 4k / 16k, causal 1.030 / 1.054 / 1.020; D 64 without the mask 1.033 / 1.063
#: / 1.018; deterministic 1.00-1.07 (``attention_bwd_rowpairs_det_s19_h200.jsonl``).  No call
#: kernel splits the gradient step (``-p split_grad``, which session 18's call took at D 128
#: without the mask, 1.03 over the one step): beside dK from registers the one step ran 1.040
#: / 1.117 / 1.034 against the split step's 1.024 / 1.101 / 1.023, and the split step spilled
#: 4 bytes at its 24 / 240 split.
DK_RS = {"dk_rs": "true"}


def call_params(head_dim: int, causal: bool, align: str = "top_left",
                deterministic: bool = False) -> dict[str, str]:
    """The schedule parameters (``-p``) the call compiles."""
    return {"head_dim": str(head_dim), "causal": str(causal).lower(),
            **({"align": align} if causal else {}),
            **({"deterministic": "true"} if deterministic else {}),
            **DQ_CUT[head_dim], **DK_RS}


@attrs.frozen(kw_only=True, eq=False)
class BwdKernel(Built):
    """A built backward kernel and its tile."""

    block_m: int
    block_n: int
    #: the plan's trip rule (the tile order's costs: a KV block's query blocks)
    bounds: BackwardTrips | None = None


def source(head_dim: int, dtype: str, causal: bool, align: str,
           deterministic: bool = False) -> tuple[CompiledSchedule, str]:
    """The call's schedule compiled (and proven) for one kernel, and its CUDA."""
    from pipeline_core_schedules_attention.emit_attention_bwd import emit_attention_bwd

    compiled = CALL.compile(call_params(head_dim, causal, align, deterministic), CALL_STAGES)
    return compiled, emit_attention_bwd(compiled, dtype=dtype)


#: every default kernel the call may build: (head dim, dtype, causal, alignment)
VARIANTS = tuple((d, t, c, a) for d in BWD_HEAD_DIMS for t in ("bf16", "fp16")
                 for c, a in ((False, "top_left"), (True, "top_left"), (True, "bottom_right")))
#: every deterministic kernel: (head dim, dtype, causal, alignment, True)
DETERMINISTIC_VARIANTS = tuple((*v, True) for v in VARIANTS)


def prebuild(variants: tuple[tuple, ...] = VARIANTS + DETERMINISTIC_VARIANTS) -> list[str]:
    """Every variant's cubin built into the kernel cache (``PIPELINE_CORE_CACHE_DIR``) with
    nvcc, no GPU needed: a later process loads them."""
    out = []
    for variant in variants:
        _, src = source(*variant)
        path = cubin_path(src, KERNEL_NAME, BUILD_OPTIONS, ARCH)
        if path is None:
            raise RuntimeError("prebuild needs nvcc on PATH (or CUDA_HOME)")
        out.append(str(path))
    return out


def _build(key: tuple[int, str, bool, str, bool, int]) -> BwdKernel:
    from pipeline_core_nvidia_h100.kit_api import declared_geometry

    from pipeline_core_schedules_attention.bwd_schedule import KERNEL_FAMILY, BackwardGeometry

    head_dim, dtype, causal, align, deterministic, device = key
    compiled, src = source(head_dim, dtype, causal, align, deterministic)
    g = declared_geometry(compiled, KERNEL_FAMILY, BackwardGeometry, FN)
    kernel = load_kernel(src, KERNEL_NAME, device=device, smem=g.smem_bytes,
                         options=BUILD_OPTIONS)
    rule = compiled.plan.trip_rule
    return BwdKernel(kernel=kernel, smem=g.smem_bytes, threads=g.threads, block_m=g.block_m,
                     block_n=g.block_n, bounds=rule if isinstance(rule, BackwardTrips) else None)


#: the tile order chosen per (recipe, kernel), kept apart from the packed arguments so a call
#: with new addresses does not choose it again
_ORDERS: Bounded[TileOrder] = Bounded(RECIPE_CACHE_SIZE)


def _order(r: Recipe[BwdCall], built: BwdKernel, grid: int, np: Any,
           keep: TileOrder | None = None) -> TileOrder:
    """The order of the output tiles (the kernel's ``hg`` and ``snake``; bwd_tiles.BackwardTrips
    .grouped says why): a head's KV blocks back to back without the mask; causal, the groups
    of heads and snake whose busiest CTA has the least work (tile_order.choose over each KV
    block's query blocks, heaviest first), among orders that tie the one with the fewest heads
    in flight; the deterministic kernel reads neither.

    Why the fewest heads among ties, not the forward's default (groups of 8, no snake): a
    head's KV-block CTAs all read its Q, dO, LSE and delta and add into its dQ rows, so fewer
    heads in flight keep those in L2 (why the unmasked order takes one head at a time).  On an
    H200 (main kernel alone, CUDA-graph replays, 7 interleaved rounds; benchmarks/results/
    attention_bwd_order_s24_h200.jsonl) it ran 1.175x the default at D 128 S 1k (where the
    op had trailed cuDNN, 0.89), 1.048x at D 64 S 16k, 0.988x at D 64 S 1k and 0.966x at
    D 64 S 4k; D 128 at S 4k and 16k pick as before.  Orders the balance model calls equal
    measured up to 1.36x apart there (D 64 S 16k): what it misses is open.  ``keep``: the
    order kept among ties instead (``TileOrder()``: the forward's rule, which
    benchmarks/attention_bwd_main_check.py's ``order=forward_ties`` times beside this one)."""
    c = r.plan
    if c.deterministic or built.bounds is None:
        return TileOrder(hg=c.bhk)
    if not c.causal:
        return TileOrder(hg=1)
    found = _ORDERS.get((r, built))
    if found is None:
        nb = built.bounds.kv_blocks(c.sk)
        # choose() costs block NB - 1 - rank at rank's place: the forward's heaviest-last index
        trips = [built.bounds.trips(nb - 1 - i, c.sq, c.sk, c.group) for i in range(nb)]
        found = _ORDERS.put((r, built), choose(trips, bh=c.bhk, grid=grid, np=np, keep=keep))
    return found


def _arguments(r: Recipe[BwdCall], kernels: tuple[BwdKernel, ...],
               tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The persistent grid (one CTA per output tile, at most one per SM) and the kernel's
    arguments (bwd_signature.SIGNATURE) but dK's and dV's addresses, packed per call: Q's,
    K's, V's and dO's tensor maps through their own strides (layout.bhsd_map), LSE's and
    delta's, the sizes, the scale, the KV heads and dK's and dV's strides."""
    np = require_gpu_module("numpy")
    (built,), (q, k, v, do, lse, delta, dq_accum) = kernels, tensors
    c = r.plan
    tiles = c.bhk * -(-c.sk // built.block_n)
    grid = min(tiles, sm_count(r.device))
    rows_padded = c.bhk * c.group * c.sqp  # LSE's and delta's rows, padded per head

    def flat(t: Any) -> Any:  # one row of every padded query row's fp32: a stride never used
        return tensor_map(t.data_ptr(), 1, rows_padded, 1, built.block_m, "fp32",
                          stride=rows_padded, swizzle=False)

    order = _order(r, built, grid, np)
    dk_sb, dk_sh, dk_ss, _ = c.grad_strides(c.dk_order)
    dv_sb, dv_sh, dv_ss, _ = c.grad_strides(c.dv_order)
    values = {"tmQ": bhsd_map(q, built.block_m, c.dtype),
              "tmK": bhsd_map(k, built.block_n, c.dtype),
              "tmV": bhsd_map(v, built.block_n, c.dtype),
              "tmDO": bhsd_map(do, built.block_m, c.dtype),
              "tmLSE": flat(lse), "tmDelta": flat(delta), "dQacc": dq_accum.data_ptr(),
              "BHK": c.bhk, "Sq": c.sq, "Sk": c.sk, "SQP": c.sqp, "group": c.group,
              "scale": c.scale, "scale_log2": c.scale * LOG2E, "HKV": c.kv_heads,
              "hg": order.hg, "snake": int(order.snake),
              "dk_sb": dk_sb, "dk_sh": dk_sh, "dk_ss": dk_ss, "dv_sb": dv_sb, "dv_sh": dv_sh,
              "dv_ss": dv_ss}
    if c.deterministic:  # the turn counters, allocated per call, packed beside dK and dV
        return (Launch.of(built, (grid,), *ORDERED_SIGNATURE.pack_around(("dQsem", "dK", "dV"),
                                                                          values, np)),)
    return (Launch.of(built, (grid,), *SIGNATURE.pack_around(("dK", "dV"), values, np)),)


#: the call layer of the backward's main kernel (the kit's HostCall); key of a kernel:
#: (head dim, dtype, causal, alignment, deterministic, device)
CALL: HostCall[BwdCall, BwdKernel] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_schedules_attention.plugin"),
    build=_build, pack=_arguments)


def attention_bwd_main(q: Any, k: Any, v: Any, do: Any, lse: Any, delta: Any, dq_accum: Any, *,
                       causal: bool | str, scale: float | None,
                       deterministic: bool = False) -> tuple[Any, Any]:
    """q, do: [B, Hq, Sq, D]; k, v: [B, Hkv, Sk, D] (Hq % Hkv == 0), bf16 or fp16, any strides
    (read in place where TMA can, else copied once: layout.py);
    lse, delta: float32 [B, Hq, round_up(Sq, DQ_ROWS)] (each head's rows padded, as the
    preprocess writes them: the kernel loads them by TMA, whose boxes start on 16 bytes; a pad
    row's LSE +inf and delta 0); dq_accum: float32 [B, Hq, round_up(Sq, DQ_ROWS), D], zeroed by
    the caller.  Adds dQ (scale applied) into dq_accum in place, on torch's current
    stream (capturable in a CUDA graph), and returns (dk, dv), new tensors shaped, typed and
    laid out like k and v (summed over the query heads of each KV head's group).
    ``deterministic``: dQ's adds in one fixed order (the module says how), the same bits every
    run."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    tensors = (q, k, v, do, lse, delta, dq_accum)
    if not q.is_cuda:  # no stream to key by: the checks refuse it in one line
        plan_bwd(*tensors, causal=causal, scale=scale, deterministic=deterministic)
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    stream = current_stream(torch, device)
    key = (*(describe(t) for t in tensors), type(causal), causal, type(scale), scale,
           bool(deterministic), stream)
    try:
        r = CALL.recipes.get(key)
    except TypeError:  # an unhashable causal or scale, which the checks refuse
        r = None
    if r is None:
        c = plan_bwd(*tensors, causal=causal, scale=scale, deterministic=deterministic)
        r = CALL.recipes.put(key, Recipe(plan=c, device=device, stream=stream, kernels=(
            (c.head_dim, c.dtype, c.causal, c.align, c.deterministic, device),)))
    # two allocations, not two views of one: the backward op's outputs may not alias each other
    c = r.plan
    dk = empty_in_order(torch, k.shape, c.dk_order, k)  # k's layout, as torch's gradients
    dv = empty_in_order(torch, v.shape, c.dv_order, v)
    if c.copied:  # the operands TMA cannot read where they lie, copied once (layout.py)
        tensors = tuple(readable(t) if n in c.copied else t
                        for n, t in zip(("q", "k", "v", "do"), tensors[:4])) + tensors[4:]
    kernel = CALL.kernels.kernel(r.kernels[0])
    late: tuple[Any, ...] = (dk, dv)
    if c.deterministic:  # a memset on the current stream: captured with the launch
        late = (torch.zeros(c.bhk * c.group * -(-c.sq // kernel.block_m), dtype=torch.int32,
                            device=q.device), dk, dv)
    CALL.launch(r, (r, kernel, *(t.data_ptr() for t in tensors)), tensors, late)
    return dk, dv
