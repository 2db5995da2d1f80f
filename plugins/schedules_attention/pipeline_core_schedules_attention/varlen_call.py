"""``attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)``:
the packed variable-length forward (``-p varlen``) on torch tensors, as FlashAttention's varlen
call takes them (docs/guide/attention.md, "Packed variable-length batches").

q is ``[total_q, Hq, D]``, k and v ``[total_k, Hkv, D]`` (Hkv dividing Hq: grouped-query
attention), sequence s their rows ``cu_seqlens_q[s] ..< cu_seqlens_q[s + 1]`` and
``cu_seqlens_k[s] ..< cu_seqlens_k[s + 1]`` (int32 on q's device, batch + 1 each).  The
lengths stay on the device: the kernel's tile scheduler reads them (varlen_tiles.py), so a call
never syncs and a CUDA graph captures it.  ``max_seqlen_q`` only bounds the grid (a smaller
value than the longest sequence costs CTAs, never rows) and ``max_seqlen_k`` picks the tile (the
fixed-length call's short tile where every sequence's keys are few).  The kernel is the
fixed-length call's tile for the same head dim, causality and key length (``call.call_params``
with ``-p varlen``), built and cached on disk the same way; this module keeps only the varlen
checks, plan and packing.

What is not checked (it would need the lengths on the host, a sync): that ``cu_seqlens``
start at 0 and increase.  Out-of-order ends give empty sequences, and any value stays inside
the tensors (the kernel clamps each span to them).  Rows of q outside every sequence are not
written (as FlashAttention's ``torch.empty`` output).

``window=`` and ``softcap=`` are ``attention()``'s (window_args.py), per sequence: each
sequence's rows see the keys of its own window, aligned at its own diagonal.

No backward yet: a call whose q, k or v needs a gradient is refused in one line saying how to
get one (pad and call ``attention()``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (PLUGIN_MODULE, RECIPE_CACHE_SIZE, Bounded,
                                               HostCall, Launch, Op, Recipe, current_stream,
                                               describe, require_gpu_module, sm_count)

from pipeline_core_schedules_attention.call import (DTYPES, HEAD_DIMS, LOG2E, OP_CAUSAL,
                                                    SHORT_KEYS,
                                                    SHORT_TILES, VALUE_TILES,
                                                    AttentionArgumentError,
                                                    AttentionKernel, _load, call_params,
                                                    call_stages, causal_align, check_group,
                                                    check_operands, pad_head_dims,
                                                    softmax_scale, stores_lse, value_head_dim)
from pipeline_core_schedules_attention.layout import (bhsd_map, dense_strides, empty_in_order,
                                                      in_place, order_of, readable)
from pipeline_core_schedules_attention.schedule import NAME, ValueHeadDim
from pipeline_core_schedules_attention.signature import forward_signature
from pipeline_core_schedules_attention.tile_order import TileOrder, varlen_choose
from pipeline_core_schedules_attention.window_args import (NO_WINDOW, Masking, check_softcap,
                                                           kernel_window, plan_masking)

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule


@attrs.frozen(kw_only=True)
class VarlenCall(ValueHeadDim, Masking):
    """What one varlen call runs: the packed rows of q and k, the sequences, the query and KV
    heads, the longest query and key lengths the caller gives, the head dim, the dtype, the
    folded scale, the mask (causal, its diagonal, a window, the softcap: window_args.Masking,
    per sequence), the operands copied once (layout.py's rule) and the
    output's layout, q's."""

    total_q: int
    total_k: int
    batch: int
    heads: int
    kv_heads: int
    max_q: int
    max_k: int
    head_dim: int
    dtype: str
    scale_log2: float
    copied: tuple[str, ...] = ()
    out_order: tuple[int, ...] = (0, 1, 2)
    #: v's (and the output's) head dim where it is not q's (0: the same; a pair of
    #: call.VALUE_TILES, which a kernel of its own runs)
    head_dim_v: int = 0

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def short(self) -> bool:
        """The fixed-length call's short tile where every sequence's keys are few
        (``max_seqlen_k`` at most ``call.SHORT_KEYS``)."""
        return (self.max_k <= SHORT_KEYS and not self.head_dim_v
                and (self.head_dim, self.tiles_vary) in SHORT_TILES)

    @property
    def out_strides(self) -> tuple[int, ...]:
        """The output's strides in elements ([total_q, H, D], dense in :attr:`out_order`)."""
        return dense_strides((self.total_q, self.heads, self.v_dim), self.out_order)


def _fail(name: str, why: str) -> AttentionArgumentError:
    return AttentionArgumentError(f"attention_varlen: {name}: {why}")


def _length(name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise _fail(name, f"{n!r}; pass the longest sequence's length, an int >= 0")
    return n


def plan_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                max_seqlen_q: int, max_seqlen_k: int, *, causal: bool | str = False,
                scale: float | None = None, grad_enabled: bool = True, window: object = None,
                softcap: object = None) -> VarlenCall:
    """The call's plan, or one :class:`AttentionArgumentError` naming the argument at fault
    (host-side facts only: no read of the lengths, which live on the device).
    ``grad_enabled``: torch's grad mode (a tensor needing a gradient is refused under it)."""
    check_operands(_fail, q, k, v, "packed [total_tokens, heads, D]")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if grad_enabled and getattr(t, "requires_grad", False):
            raise _fail(name, "needs a gradient, and the varlen backward is not built yet; run "
                              "under torch.no_grad(), or pad the batch to [B, H, S, D] and call "
                              "attention() for gradients")
    tq, h, d = q.shape
    if k.shape[2] != d:
        raise _fail("k", f"head dim {k.shape[2]}, q's {d}; pass one head dim")
    dv = value_head_dim(_fail, d, v.shape[2], "attention_varlen")
    hkv = k.shape[1]
    check_group(_fail, h, hkv)
    batch = None
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if str(getattr(cu, "dtype", None)) != "torch.int32":
            raise _fail(name, f"dtype {getattr(cu, 'dtype', type(cu).__name__)}; pass a "
                              "torch.int32 tensor of batch + 1 cumulative lengths")
        if len(cu.shape) != 1 or cu.shape[0] < 2:
            raise _fail(name, f"shape {tuple(cu.shape)}; pass [batch + 1] (batch >= 1), "
                              "starting at 0")
        if cu.device != q.device:
            raise _fail(name, f"on {cu.device}, q on {q.device}; the kernel reads it there: "
                              "pass it on q's device")
        if cu.stride(0) != 1:
            raise _fail(name, "not contiguous; pass .contiguous()")
        if batch is not None and cu.shape[0] != batch + 1:
            raise _fail(name, f"{cu.shape[0] - 1} sequences, cu_seqlens_q {batch}; pass one "
                              "entry per sequence in both (batch + 1)")
        batch = cu.shape[0] - 1
    assert batch is not None
    mq, mk = _length("max_seqlen_q", max_seqlen_q), _length("max_seqlen_k", max_seqlen_k)
    align = causal_align(causal)
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        raise _fail("scale", f"{scale!r}; pass a positive finite float or None (1/sqrt(D))")
    s = softmax_scale(d, scale)
    masking = plan_masking(align, window, softcap, s, _fail)
    return VarlenCall(total_q=tq, total_k=k.shape[0], batch=batch, heads=h, kv_heads=hkv,
                      max_q=min(mq, tq), max_k=min(mk, k.shape[0]), head_dim=d,
                      head_dim_v=dv,
                      dtype=DTYPES[str(q.dtype)],
                      scale_log2=masking.exponent_scale(s) * LOG2E,
                      copied=tuple(n for n, t in (("q", q), ("k", k), ("v", v))
                                   if not in_place(t)),
                      out_order=order_of(q), **attrs.asdict(masking, recurse=False))


#: the (head dim, causal) pairs whose kernels declare each tile's KV counts warp-uniform
#: (``-p uniform_tiles``; emit_varlen.UNIFORM has the session-16 figures: D 128 causal gained
#: then, D 64 causal and D 128 not causal lost).  None since session 20: with every kernel's
#: descriptors built from a warp-uniform consumer index (session 18) and the snake, D 128
#: causal runs 0.954x the fixed-length call without it against 0.87x with it on 4 x 4096, 0.967x
#: against 0.937x on 1 x 16k (H200, attention_varlen_kernels.py, 7 rounds;
#: results/attention_varlen_uniform_s20_h200.jsonl)
UNIFORM_TILES: frozenset[tuple[int, bool]] = frozenset()


def varlen_params(head_dim: int, causal: bool, align: str = "top_left",
                  short: bool = False, lse: bool = True, head_dim_v: int = 0,
                  window: tuple[int, int] = NO_WINDOW, softcap: bool = False) -> dict[str, str]:
    """The ``-p`` parameters the varlen call compiles: the fixed-length call's, with
    ``-p varlen`` (and ``-p lse=false`` for a call that does not return the LSE,
    ``-p uniform_tiles`` where :data:`UNIFORM_TILES` holds, ``-p head_dim_v`` for v's own
    head dim, a window's reaches and ``-p softcap`` where taken)."""
    return {**call_params(head_dim, causal, align, short, window, softcap, varlen=True,
                          lse=lse, head_dim_v=head_dim_v),
            **({"uniform_tiles": "true"} if (head_dim, causal) in UNIFORM_TILES else {})}


def varlen_source(head_dim: int, dtype: str, causal: bool, align: str,
                  short: bool = False, lse: bool = True, head_dim_v: int = 0,
                  window: tuple[int, int] = NO_WINDOW,
                  softcap: bool = False) -> tuple[CompiledSchedule, str]:
    """The varlen schedule compiled (and proven) for one kernel, and its CUDA."""
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    compiled = VARLEN.compile(varlen_params(head_dim, causal, align, short, lse, head_dim_v,
                                            window, softcap),
                              call_stages(head_dim, causal or window != NO_WINDOW, short,
                                          head_dim_v))
    return compiled, emit_attention(compiled, dtype=dtype)


#: every kernel the varlen call may build: (head dim, dtype, causal, alignment, short, LSE
#: stored: call.stores_lse with and without ``return_lse``; the GPU check builds each into the
#: disk cache first, benchmarks/attention_varlen.py), then each pair of call.VALUE_TILES's
#: (v's own head dim last; no short tile)
_MODES = ((False, "top_left"), (True, "top_left"), (True, "bottom_right"))
VARIANTS: tuple[tuple[Any, ...], ...] = tuple(
    (d, t, c, a, s, lse) for d in HEAD_DIMS for t in ("bf16", "fp16") for c, a in _MODES
    for s in (False, True) for lse in sorted({stores_lse(d, c, need) for need in (False, True)}))
VARIANTS += tuple((d, t, c, a, False, lse, dv) for d, dv in VALUE_TILES
                  for t in ("bf16", "fp16") for c, a in _MODES
                  for lse in sorted({stores_lse(d, c, need) for need in (False, True)}))


def _build(head_dim: int, dtype: str, causal: bool, align: str, short: bool, lse: bool,
           device: int, head_dim_v: int = 0, window: tuple[int, int] = NO_WINDOW,
           softcap: bool = False) -> AttentionKernel:
    return _load(*varlen_source(head_dim, dtype, causal, align, short, lse, head_dim_v,
                                window, softcap), device)


def _kernel_key(c: VarlenCall, device: int, lse: bool) -> tuple[Any, ...]:
    """The key of call ``c``'s kernel in ``VARLEN.kernels``, :func:`_build`'s arguments: the
    seven of every kernel, then v's own head dim, a window's reaches and the softcap, each only
    where a kernel takes it (one kernel per window)."""
    masked = c.windowed or bool(c.softcap)
    return (c.head_dim, c.dtype, c.causal, c.align, c.short, lse, device,
            *((c.head_dim_v,) if c.head_dim_v or masked else ()),
            *((c.window, bool(c.softcap)) if masked else ()))


def _packed_view(t: Any) -> Any:
    """[total, H, D] seen as [1, H, total, D]: the rank-4 map of layout.bhsd_map over the
    packed tensor's own strides (a batch of one index: the kernels' one load function)."""
    return t.unsqueeze(0).transpose(1, 2)


#: per (recipe, kernel): the causal order's head groups (:func:`_arguments`)
_ORDERS: Bounded[TileOrder] = Bounded(RECIPE_CACHE_SIZE)


def _arguments(r: Recipe[VarlenCall], kernels: tuple[AttentionKernel, ...],
               tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The persistent grid and the kernel's arguments (signature.forward_signature's varlen
    kernel's) but the output's and the LSE's addresses, packed per call.  The grid: one CTA per SM, fewer where
    the batch cannot have as many tiles (``batch x heads x ceil(max_seqlen_q / block_m)``
    bounds them; a CTA past the batch's tiles ends at once).  Causal or windowed, the order's
    head groups and snake (``hg``, ``snake``) that balance a batch of sequences all
    ``max_seqlen_q`` long (tile_order.varlen_choose); with a softcap, its scale."""
    np = require_gpu_module("numpy")
    (built,), (q, k, v, cu_q, cu_k) = kernels, tensors
    c = r.plan
    bound = c.batch * c.heads * -(-c.max_q // built.block_m)
    o_ss, o_sh, _ = c.out_strides  # [total_q, H, D]: the row (token) stride first
    grid = max(1, min(bound, sm_count(r.device)))
    order = _ORDERS.get((r, built))
    if order is None:  # once per (recipe, kernel): new addresses do not choose again
        order = TileOrder()
        if c.tiles_vary and built.bounds is not None and c.max_q > 0:  # max_seqlen_q's trips
            trips = [built.bounds.trips(i, c.max_q, c.max_k)
                     for i in range(-(-c.max_q // built.block_m))]
            order = varlen_choose(trips, heads=c.heads, batch=c.batch, grid=grid, np=np)
        order = _ORDERS.put((r, built), order)
    values = {"tmQ": bhsd_map(_packed_view(q), built.block_m, c.dtype),
              "tmK": bhsd_map(_packed_view(k), built.block_n, c.dtype),
              "tmV": bhsd_map(_packed_view(v), built.block_n, c.dtype),
              "cu_q": cu_q.data_ptr(), "cu_k": cu_k.data_ptr(), "B": c.batch,
              "TQ": c.total_q, "TK": c.total_k, "scale_log2": c.scale_log2, "group": c.group,
              "hg": order.hg, "snake": order.snake, "H": c.heads, "o_sh": o_sh,
              "o_ss": o_ss, **({"softcap_scale": c.softcap_scale} if c.softcap else {})}
    signature = forward_signature(varlen=True, softcap=bool(c.softcap))
    return (Launch.of(built, (grid,), *signature.pack_around(("O", "LSE"), values, np)),)


#: the varlen call layer (the kit's HostCall): its kernels (key: (head dim, dtype, causal,
#: alignment, short, device)), recipes, packed arguments and op
VARLEN: HostCall[VarlenCall, AttentionKernel] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_schedules_attention.plugin"),
    build=lambda key: _build(*key), pack=_arguments, ops=lambda: _varlen_ops())


def attention_varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any,
                     max_seqlen_q: int, max_seqlen_k: int, *, causal: bool | str = False,
                     scale: float | None = None, return_lse: bool = False,
                     window: tuple[int, int] | None = None, softcap: float | None = None) -> Any:
    """softmax(q . k^T * scale) . v per sequence of a packed batch: q ``[total_q, Hq, D]``,
    k and v ``[total_k, Hkv, D]`` (bf16 or fp16, Hkv dividing Hq; any head dim up to 256 and a
    v of its own head dim, zero-padded as ``attention()`` pads them, call.pad_head_dims), sequence s
    rows ``cu_seqlens_q[s]..cu_seqlens_q[s+1]`` of q and ``cu_seqlens_k[s]..`` of k and v
    (int32 on q's device, batch + 1, from 0, non-decreasing), ``max_seqlen_q`` and
    ``max_seqlen_k`` the longest (FlashAttention's varlen call; here they bound the grid and
    pick the tile only).  Returns ``[total_q, Hq, D]``
    in q's layout; with ``return_lse`` also each row's log-sum-exp, ``[Hq, total_q]`` fp32 (+inf
    for a row that sees no key, whose output is 0).  ``causal``, ``window`` and ``softcap``: as
    ``attention()``'s, per sequence (bottom-right aligns each sequence's diagonal and window to
    its own lengths).  Runs on torch's current stream, never syncs (CUDA-graph capturable),
    allocates only its outputs.  A torch custom op (``pipeline_core::attention_varlen``), so
    torch.compile traces it, a window and a softcap too."""
    if not isinstance(return_lse, bool):
        raise _fail("return_lse", f"{return_lse!r}; pass True or False")
    # their types first: the op's arguments are made of them before any plan (under tracing)
    reach = kernel_window(window, None, _fail)[0]
    cap = check_softcap(softcap, _fail)
    padded = pad_head_dims(_fail, q, k, v, rank=3, scale=scale, differentiable=False,
                           native=VALUE_TILES)
    if padded is not None:  # a head dim the kernels do not build, or v's own (call.py)
        qp, kp, vp, s, dv = padded
        got = attention_varlen(qp, kp, vp, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k, causal=causal, scale=s, return_lse=return_lse,
                               window=window, softcap=softcap)
        return (got[0][..., :dv], got[1]) if return_lse else got[..., :dv]
    out, lse = VARLEN.call("attention_varlen", _run, _check,
                           (q, k, v, cu_seqlens_q, cu_seqlens_k), max_seqlen_q, max_seqlen_k,
                           causal, scale, return_lse, window, softcap,
                           op_args=lambda: (max_seqlen_q, max_seqlen_k,
                                            causal_align(causal) or "none", scale, return_lse,
                                            *(reach if window is not None else (-2, -2)),
                                            cap if softcap is not None else None))
    return (out, lse) if return_lse else out


def _check(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
           causal: bool | str, scale: float | None, return_lse: bool = False,
           window: object = None, softcap: object = None) -> VarlenCall:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return plan_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal, scale=scale,
                       grad_enabled=torch.is_grad_enabled(), window=window, softcap=softcap)


def _run(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int,
         causal: bool | str, scale: float | None, return_lse: bool = False,
         window: object = None, softcap: object = None) -> tuple[Any, Any]:
    """The call on checked-once CUDA tensors: its recipe (kept per argument description), the
    output in q's layout and, with ``return_lse``, the LSE (else an empty tensor and a null
    LSE, to a kernel built with ``-p lse=false``, its store compiled out, but where
    call.LSE_KEPT holds: at D 128 causal the LSE kernel measured faster here too), the
    launch."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    if not q.is_cuda:  # no stream to key by: refused in one line by the checks
        _check(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window=window, softcap=softcap)
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    stream = current_stream(torch, device)
    key = (describe(q), describe(k), describe(v), describe(cu_q), describe(cu_k),
           type(max_q), max_q, type(max_k), max_k, type(causal), causal, type(scale), scale,
           return_lse, stream,
           # a window and a softcap with their types, only where given (window_args.py)
           *((type(window), tuple(window) if isinstance(window, list) else window,
              type(softcap), softcap) if window is not None or softcap is not None else ()))
    try:
        r = VARLEN.recipes.get(key)
    except TypeError:  # an unhashable argument, which the checks refuse
        r = None
    if r is None:
        c = _check(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, window=window,
                   softcap=softcap)
        r = VARLEN.recipes.put(key, Recipe(plan=c, device=device, stream=stream, kernels=(
            _kernel_key(c, device, stores_lse(c.head_dim, c.causal, return_lse)),)))
    c = r.plan
    out = empty_in_order(torch, (*q.shape[:2], c.v_dim), c.out_order, q)  # q's layout
    lse = torch.empty((c.heads, c.total_q) if return_lse else (0,), dtype=torch.float32,
                      device=q.device)
    if c.total_k == 0 and c.total_q > 0:  # no key in any sequence (and no map of 0 rows)
        out.zero_()
        lse.fill_(math.inf)
    elif c.total_q > 0:
        if c.copied:  # the operands TMA cannot read where they lie, copied once (layout.py)
            q, k, v = (readable(t) if n in c.copied else t
                       for n, t in (("q", q), ("k", k), ("v", v)))
        VARLEN.launch(r, (r, VARLEN.kernels.kernel(r.kernels[0]), q.data_ptr(), k.data_ptr(),
                          v.data_ptr(), cu_q.data_ptr(), cu_k.data_ptr()),
                      (q, k, v, cu_q, cu_k), (out, lse if return_lse else None))
    return out, lse


def _op_masking(window_left: int, window_right: int,
                softcap: float | None) -> tuple[tuple[int, int] | None, float | None]:
    """The op's ``window`` and ``softcap`` back from its schema's ints and float (-2, -2: no
    ``window=`` given; a schema has no optional pair)."""
    return (None if (window_left, window_right) == (-2, -2)
            else (window_left, window_right)), softcap


def _op(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int, causal: str,
        scale: float | None, return_lse: bool, window_left: int, window_right: int,
        softcap: float | None) -> tuple[Any, Any]:
    window, cap = _op_masking(window_left, window_right, softcap)
    return _run(q, k, v, cu_q, cu_k, max_q, max_k, OP_CAUSAL[causal], scale, return_lse,
                window, cap)


def _fake(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_q: int, max_k: int, causal: str,
          scale: float | None, return_lse: bool, window_left: int, window_right: int,
          softcap: float | None) -> tuple[Any, Any]:
    """The op's shapes (where torch.compile traces, the checks first)."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    window, cap = _op_masking(window_left, window_right, softcap)
    c = _check(q, k, v, cu_q, cu_k, max_q, max_k, OP_CAUSAL[causal], scale, window=window,
               softcap=cap)
    return (empty_in_order(torch, (*q.shape[:2], c.v_dim), c.out_order, q),
            q.new_empty((c.heads, c.total_q) if return_lse else (0,), dtype=torch.float32))


def _varlen_ops() -> tuple[Op, ...]:
    """The packed forward's custom op (no backward yet: refused in the checks)."""
    return (Op(name="pipeline_core::attention_varlen", impl=_op, fake=_fake,
               schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, "
                      "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, str causal, "
                      "float? scale, bool return_lse, int window_left, int window_right, "
                      "float? softcap) -> (Tensor, Tensor)"),)


# the ops registered now where torch is imported already (HostCall.register_if_torch_imported)
VARLEN.register_if_torch_imported()
