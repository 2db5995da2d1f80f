"""``attention(q, k, v, *, causal=False, scale=None)``: the emitted flash-attention-fwd kernel
called on torch tensors (docs/guide/attention.md, "Emitting and calling it").

It lives in this plugin, not beside ``matmul`` in ``pipeline_core_nvidia_h100``, because this
plugin owns the kernel family's device code (``emit_attention.py``) and its schedule; the H100
plugin's kit gives the host side it shares with the GEMM (``kit_api``): the call layer
(``HostCall``, here :data:`CALL`: the plugin host, the build cache, the recipes and packed
arguments, the tensor maps, the launch on torch's current stream, the custom op; the checks
and the plan run once per argument description, as ``matmul``'s) and the kernel's signature
(``signature.py``: one list writes the parameter list and packs the arguments).  This module
keeps the family's own: its checks (:func:`plan_attention`), tile tables and tile order.  The
kernel is compiled (and proven) once per (head dim, dtype, causal, alignment, short or long
keys, device), launched on a persistent grid, and allocates nothing but the output.
``causal=True`` compiles the schedule with ``-p causal=true`` (top-left aligned, as torch's
``is_causal``): the plan's loop bounds skip the KV blocks above the diagonal and mask the
diagonal's; ``causal="bottom_right"`` adds ``-p align=bottom_right`` (FlashAttention's diagonal
when Sq != Sk).  K and V may have fewer heads than Q (grouped-query attention): the kernel's
``group`` argument maps query head h to KV head h // group in K's and V's TMA coordinates, so
the plan is the same.  The tile and the overlaps it compiles are the fastest measured per head
dim and causal (``CALL_TILES``, ``CALL_OVERLAPS``; benchmarks/results/attention_speed2_h100.jsonl,
docs/guide/attention.md "Speed: the FA3 softmax and the tiles"), and for few keys per head
(``SHORT_TILES``; docs/guide/attention.md, "Short sequences: a double-buffered Q").
"""
from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (BUILD_OPTIONS, PLUGIN_MODULE, RECIPE_CACHE_SIZE,
                                               Bounded, Built, HostCall, Launch, Op, Recipe,
                                               current_stream, describe, load_kernel,
                                               require_gpu_module, sm_count)

from pipeline_core_schedules_attention.layout import (bhsd_map, dense_strides, empty_in_order,
                                                      in_place, order_of, readable)
from pipeline_core_schedules_attention.bwd_schedule import BWD_HEAD_DIMS
from pipeline_core_schedules_attention.schedule import HEAD_DIMS, NAME, ValueHeadDim
from pipeline_core_schedules_attention.signature import KERNEL_NAME, forward_signature
from pipeline_core_schedules_attention.tile_order import TileOrder, choose
from pipeline_core_schedules_attention.tiles import LoopBounds, plan_bounds
from pipeline_core_schedules_attention.window_args import (NO_WINDOW, Masking,
                                                           plan_masking, refuse_gradient)

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule

DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}
#: parameters over the call's own choice, empty unless a benchmark's ablation sets them: ``-p``
#: parameters of the schedule, and ``stages`` for ``-T stages``
CALL_PARAMS: dict[str, str] = {}
#: the tile per (head dim, causal), the fastest measured on the H100 (bf16, benchmarks/results/
#: attention_speed2_h100.jsonl), FA3's choices: not causal, D=128 on KV blocks of 176 keys and
#: D=64 on 3 consumer warp groups (block_m 192, 160 registers each, so that 3 x 128 x 160 +
#: 128 x 24 fit the SM's 65536); causal, 2 consumers of 64 rows on KV blocks of 128 (the
#: diagonal then masks one KV block per query block).  At D=64, causal or not, the 3 consumers
#: take turns issuing S_j and PV_{j-1} (``-p pingpong`` under the intra-warpgroup overlap: FA3's
#: and FA4's scheduler barrier; FA4's 192 x 128 tile there): on the H200 1.06-1.12x the 3
#: consumers without turns not causal, 1.02-1.13x the 2 consumers causal, at S 4k and 16k
#: (benchmarks/results/attention_turns_s20_h200.jsonl); at D=128 the turns measured 0.96-1.01x
#: and are not taken.  An entry's ``stages`` is the ring depth
#: (``-T stages``, :data:`CALL_STAGES` where absent); the others are ``-p`` parameters.
#: D=96 takes D=128's tiles: its shared-memory rows and O are D=128's (two TMA boxes, the
#: second half V's zeros: schedule.AttentionGeometry.box_cols), S runs over its 96 columns.
#: D=192 and D=256 take FA3's (hopper/tile_size.h), causal or not: 2 consumers of 64 rows on
#: KV blocks of 112 and 80 keys, the most whose 2 stages of K and V fit beside Q in a CTA's
#: 227 KB (D=192: 48 KB + 4 x 42 KB; D=256: 64 KB + 4 x 40 KB), both overlaps' registers under
#: 240 (O 96 / 128, S 56 / 40 and P 28 / 20 per thread).
_TWO = {"block_m": "128", "consumers": "2", "block_n": "128"}
_THREE_IN_TURN = {"block_m": "192", "consumers": "3", "consumer_registers": "160",
                  "block_n": "128", "pingpong": "true"}
CALL_TILES = {(64, False): _THREE_IN_TURN,
              (64, True): _THREE_IN_TURN,
              (96, False): {**_TWO, "block_n": "176"},
              (96, True): _TWO,
              (128, False): {**_TWO, "block_n": "176"},
              (128, True): _TWO,
              (192, False): {**_TWO, "block_n": "112"},
              (192, True): {**_TWO, "block_n": "112"},
              (256, False): {**_TWO, "block_n": "80"},
              (256, True): {**_TWO, "block_n": "80"}}
#: the (q's and k's head dim, v's) pairs a kernel of its own runs (``-p head_dim_v``), and
#: their tiles, causal or not: DeepSeek's MLA prefill, 192 / 128, on FA3's tile for it
#: (hopper/tile_size.h: 128 x 128 where V's head dim is at most 128): O 64 and S 64 and P 32
#: registers per thread, 48 KB of Q and 2 stages of 48 + 32 KB of K and V (209 KB).  Other
#: pairs are zero-padded to one head dim (:func:`pad_head_dims`).
VALUE_TILES = {(192, 128): _TWO}
#: the tile's changes per head dim where the kernel holds more than the plain call's state (the
#: softcap's scale, varlen's sequence spans and cursor): at D=256 KV blocks of 64 keys (FA3's
#: local tile there, hopper/tile_size.h), where those of 80 spill 16-52 bytes (softcap; varlen
#: causal)
LEAN_TILES = {256: {"block_n": "64"}}
#: key lengths up to which a call takes :data:`SHORT_TILES` (measured at Sk = 1024, where they
#: win, and 4096, where the long tiles do; docs/guide/attention.md, "Short sequences: a
#: double-buffered Q")
SHORT_KEYS = 2048
#: the tile per (head dim, causal) for short sequences, where an output tile runs few KV blocks
#: and what each tile pays at its start weighs: Q double-buffered (``-p q_stages=2``: the next
#: tile's Q, and the K and V blocks behind it, load while this tile runs) and a ring of 3 on
#: 2 consumers at D=64 (benchmarks/results/attention_short_h100.jsonl); at D=128 causal a ring
#: of 3 alone (a second Q beside it does not fit; 1.018x at S=1024); at D=128 not causal KV
#: blocks of 128 with Q double-buffered (a second Q does not fit beside blocks of 176; 1.044x);
#: D=96 D=128's (its shared memory); D=192 and D=256 none (a second Q or a third stage does not
#: fit beside their K and V)
SHORT_TILES = {(64, False): {**_TWO, "q_stages": "2", "stages": "3"},
               (64, True): {**_TWO, "q_stages": "2", "stages": "3"},
               (96, False): {**_TWO, "q_stages": "2"},
               (96, True): {**_TWO, "stages": "3"},
               (128, False): {**_TWO, "q_stages": "2"},
               (128, True): {**_TWO, "stages": "3"}}
#: the overlaps per head dim, the fastest on the H100 (bf16, benchmarks/results/
#: attention_speed2_h100.jsonl): the intra-warpgroup overlap alone, at both head dims, causal
#: or not (D=128 S=4096: 681 TFLOPS vs 584 without either; ping-pong, whose turns then covered
#: S_j alone, cost: 641 with it); at D=96, 192 and 256 alike (FA3's IntraWGOverlap at every head
#: dim), at every head dim the call compiles (schedule.HEAD_DIMS).  A tile's own ``pingpong``
#: (CALL_TILES) wins over these, and an entry of CALL_PARAMS over both (the benchmark's
#: ablations).
CALL_OVERLAPS = {d: {"intra_overlap": "true", "pingpong": "false"} for d in HEAD_DIMS}
#: the ring depth of a tile that names none
CALL_STAGES = 2
LOG2E = 1.4426950408889634
#: the (head dim, causal) pairs whose calls with no gradient keep the LSE kernel (a null LSE)
#: rather than one with the store compiled out (``-p lse=false``): the one pair where that
#: measured slower on the H200 (0.985-0.99x; D 64 not causal gained 5.4-5.7%, the others
#: 0.4-1.4%: benchmarks/attention_nolse.py, results/attention_nolse_s16_h200.jsonl)
LSE_KEPT = {(128, True)}


def stores_lse(head_dim: int, causal: bool, needed: bool) -> bool:
    """Whether a call's kernel is built with the LSE store: where the call needs the LSE (a
    gradient, ``return_lse``), or where :data:`LSE_KEPT` holds (then it takes a null LSE); the
    one rule of the fixed-length and the packed calls."""
    return needed or (head_dim, causal) in LSE_KEPT
#: the causal tile order every call takes instead of its own choice (tile_order.choose), None
#: unless a benchmark's ablation sets it; read when a call's arguments are packed, so arguments
#: packed before it was set keep their order
ORDER: TileOrder | None = None
#: ``causal=``: what each accepted value means, as the schedule's ``-p align`` (None: no mask).
#: One argument, not a second keyword, so no combination means nothing (an alignment without
#: the mask); the names are LoopBounds.align's (torch's CausalVariant UPPER_LEFT / LOWER_RIGHT).
CAUSAL_ALIGN: dict[object, str | None] = {False: None, True: "top_left",
                                          "top_left": "top_left", "bottom_right": "bottom_right"}


#: a custom op's causal (a schema has no bool-or-str: "none" or an alignment) as the calls take
#: it (the differentiable op's, autograd.py; the packed forward's, varlen_call.py)
OP_CAUSAL: dict[str, bool | str] = {"none": False, "top_left": True,
                                    "bottom_right": "bottom_right"}


class AttentionArgumentError(ValueError):
    """An argument ``attention`` cannot run on (the message names it and the fix)."""


@attrs.frozen(kw_only=True)
class AttentionCall(ValueHeadDim, Masking):
    """What one call runs: the batch x heads, the query and key lengths, the head dim, the
    dtype, the softmax scale folded with log2(e) (the kernel's exp2), the mask (causal, its
    diagonal's alignment, a window, the softcap: :class:`Masking`), the query heads per KV head (``group``, grouped-query attention), the query
    heads, the operands copied once because TMA cannot read them where they lie (``copied``:
    names among q, k, v; layout.py's rule) and the output's layout, q's (``out_order``: its
    dimensions outermost first)."""

    bh: int
    sq: int
    sk: int
    head_dim: int
    dtype: str
    scale_log2: float
    group: int = 1
    heads: int = 1
    copied: tuple[str, ...] = ()
    out_order: tuple[int, ...] = (0, 1, 2, 3)
    #: v's (and the output's) head dim where it is not q's (0: the same; a pair of
    #: :data:`VALUE_TILES`, which a kernel of its own runs)
    head_dim_v: int = 0

    @property
    def out_strides(self) -> tuple[int, ...]:
        """The output's strides in elements ([B, H, Sq, D], dense in :attr:`out_order`)."""
        return dense_strides((self.bh // self.heads, self.heads, self.sq, self.v_dim),
                             self.out_order)

    @property
    def short(self) -> bool:
        """Whether the call takes :data:`SHORT_TILES`: few keys (at most :data:`SHORT_KEYS`)
        at a head dim and causality that has a short tile (elsewhere both lengths share one
        kernel)."""
        return (self.sk <= SHORT_KEYS and not self.head_dim_v
                and (self.head_dim, self.tiles_vary) in SHORT_TILES)


def causal_align(causal: object) -> str | None:
    """The alignment ``causal=`` asks for (None: no mask), or one error line naming it."""
    key = causal if isinstance(causal, (bool, str)) else None
    if key not in CAUSAL_ALIGN:
        raise AttentionArgumentError(f"attention: causal: {causal!r}; pass False, True "
                                     f"(top-left, torch's is_causal), 'top_left' or "
                                     f"'bottom_right'")
    return CAUSAL_ALIGN[key]


def softmax_scale(head_dim: int, scale: float | None) -> float:
    """The scores' scale the forward applies and the backward must use alike: ``scale``, or
    1/sqrt(D) (torch's default) when None."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def check_operands(fail: Any, q: Any, k: Any, v: Any, layout: str) -> None:
    """What every attention call checks of q, k and v alike (``attention()``'s [B, H, S, D],
    ``attention_varlen``'s packed [total, heads, D]: ``layout``, whose rank it asks): each of
    that rank, on the GPU, bf16 or fp16; q's head dim (the last) one the call compiles; k and v
    of q's dtype and device, and of one shape but for v's head dim (the last), which each call
    checks (:data:`VALUE_TILES`).  ``fail(name, why)`` makes the one-line error."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != layout.count(",") + 1:
            raise fail(name, f"shape {tuple(t.shape)}; pass {layout}")
        if not t.is_cuda:
            raise fail(name, "a CPU tensor; move it to the GPU with .cuda()")
        if str(t.dtype) not in DTYPES:
            raise fail(name, f"dtype {t.dtype}; pass torch.bfloat16 or torch.float16")
    d = q.shape[-1]
    if d not in HEAD_DIMS:
        raise fail("q", f"head dim {d}; supported: {', '.join(map(str, HEAD_DIMS))}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise fail(name, f"dtype {t.dtype} differs from q's {q.dtype}; cast it")
        if t.device != q.device:
            raise fail(name, f"on {t.device}, q on {q.device}; put them on one device")
    if tuple(k.shape[:-1]) != tuple(v.shape[:-1]):
        raise fail("v", f"shape {tuple(v.shape)} differs from k's {tuple(k.shape)}")


def value_head_dim(fail: Any, d: int, dv: int, call: str) -> int:
    """The head dim of v a call's plan keeps (0: q's ``d``), or one error naming v: a v of its
    own head dim runs only on a pair of :data:`VALUE_TILES`; ``call`` (``attention``,
    ``attention_varlen``) zero-pads the others first (:func:`pad_head_dims`).  Read as ints:
    under torch.compile a dimension may be a SymInt, which a lookup cannot hash."""
    d, dv = int(d), int(dv)
    if dv == d:
        return 0
    if (d, dv) not in VALUE_TILES:
        pairs = ", ".join(f"{a} / {c}" for a, c in VALUE_TILES)
        raise fail("v", f"head dim {dv}, q's {d}: a kernel takes v's own head dim at {pairs} "
                        f"(q / v); call {call}(), which zero-pads the others, or pass v with "
                        "q's head dim")
    return dv


def kernel_head_dim(dq: int, dv: int, grad: bool) -> int | None:
    """The head dim ``attention()`` runs a call at whose q and k have ``dq`` columns and v
    ``dv``: the smallest the kernels take (HEAD_DIMS; with a gradient to be had, one of the
    backward's, BWD_HEAD_DIMS, where one holds both) of at least both, q, k and v zero-padded to
    it: zero columns add nothing to q . k^T, and V's give output columns of zeros, sliced off
    (:func:`padded_attention`).  So head dims the kernels do not build (Phi-2's 80, 32, 160)
    and differing ones (DeepSeek's MLA, 192 for q and k, 128 for v) run, as torch's SDPA takes
    them, and a gradient at 96 runs the backward at 128.  None past the largest (256)."""
    need = max(dq, dv)
    if grad:
        fit = [d for d in BWD_HEAD_DIMS if d >= need]
        if fit:
            return fit[0]
    fit = [d for d in HEAD_DIMS if d >= need]
    return fit[0] if fit else None


def no_backward(head_dim: int) -> str | None:
    """Why a gradient at ``head_dim`` cannot be had (None where the backward is built for it,
    bwd_schedule.BWD_HEAD_DIMS), and the way round: one line for the forward's refusal
    (:func:`attention`, before its forward runs) and the backward's (bwd_call.plan_bwd)."""
    if head_dim in BWD_HEAD_DIMS:
        return None
    pad = (f"pad q, k and v to D=128 with zeros, pass scale={head_dim} ** -0.5 and keep the "
           f"output's first {head_dim} columns" if head_dim < 128
           else "train with torch's scaled_dot_product_attention")
    return (f"head dim {head_dim} has no backward yet (built for "
            f"{', '.join(map(str, BWD_HEAD_DIMS))}); run the forward under torch.no_grad(), "
            f"or for gradients {pad}")


def check_group(fail: Any, heads: int, kv_heads: int) -> None:
    """Grouped-query attention's rule: k's and v's heads divide q's."""
    if kv_heads < 1 or heads % kv_heads:
        raise fail("k", f"{kv_heads} heads for q's {heads}: grouped-query attention needs q's "
                        f"heads a multiple of k's and v's; pass k and v with a divisor of "
                        f"{heads} heads")


def _attention_error(name: str, why: str) -> AttentionArgumentError:
    """The one-line error naming ``attention()``'s argument ``name``."""
    return AttentionArgumentError(f"attention: {name}: {why}")


def plan_attention(q: Any, k: Any, v: Any, *, causal: bool | str = False,
                   scale: float | None = None, window: object = None,
                   softcap: object = None) -> AttentionCall:
    """The call's plan, or one :class:`AttentionArgumentError` naming the argument at fault."""
    fail = _attention_error  # the checks shared with attention_varlen take the error's maker
    check_operands(fail, q, k, v, "[B, H, S, D]")
    b, h, sq, d = q.shape
    if (k.shape[0], k.shape[3]) != (b, d):
        raise fail("k", f"shape {tuple(k.shape)}: batch and head dim must be q's ({b}, {d})")
    dv = value_head_dim(fail, d, v.shape[3], "attention")
    hkv = k.shape[1]
    check_group(fail, h, hkv)
    mask = causal_align(causal)
    if sq < 1 or k.shape[2] < 1:
        raise fail("q" if sq < 1 else "k", "sequence length 0; pass S >= 1")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        # the kernel takes the row max of the raw scores and folds the scale into the exponent's
        # FFMA (FA3's softmax), which holds for a positive scale only (docs/guide/attention.md)
        raise fail("scale", f"{scale!r}; pass a positive finite float or None (1/sqrt(D))")
    s = softmax_scale(d, scale)
    masking = plan_masking(mask, window, softcap, s, fail)
    # any strides: read in place where TMA can, else copied once (layout.py), never refused
    return AttentionCall(bh=b * h, sq=sq, sk=k.shape[2], head_dim=d,
                         dtype=DTYPES[str(q.dtype)],
                         scale_log2=masking.exponent_scale(s) * LOG2E, group=h // hkv,
                         heads=h, copied=tuple(name for name, t in (("q", q), ("k", k), ("v", v))
                                               if not in_place(t)),
                         out_order=order_of(q), head_dim_v=dv,
                         **attrs.asdict(masking, recurse=False))


def _tile(head_dim: int, causal: bool, short: bool, lean: bool = False,
          head_dim_v: int = 0) -> dict[str, str]:
    """The tile, overlaps and ring depth the call compiles (CALL_PARAMS winning; ``lean``: a
    kernel of more state, :data:`LEAN_TILES`; ``head_dim_v``: v's own head dim, the pair's
    :data:`VALUE_TILES`)."""
    tile = (VALUE_TILES[head_dim, head_dim_v] if head_dim_v
            else (SHORT_TILES.get((head_dim, causal)) if short else None)
            or CALL_TILES[head_dim, causal])
    return {**CALL_OVERLAPS[head_dim], **tile, **(LEAN_TILES.get(head_dim, {}) if lean else {}),
            **CALL_PARAMS}


def call_params(head_dim: int, causal: bool, align: str = "top_left",
                short: bool = False, window: tuple[int, int] = NO_WINDOW,
                softcap: bool = False, varlen: bool = False,
                lse: bool = True, head_dim_v: int = 0) -> dict[str, str]:
    """The schedule parameters (``-p``) the call compiles for one head dim, causal or not,
    where the causal diagonal sits (``-p align``, given only when causal or windowed), and
    whether the keys are few (:data:`SHORT_KEYS`); a window's reaches, the softcap and
    ``-p varlen`` (varlen_call.py) only where taken (a windowed call takes the causal tiles: its
    tiles' KV blocks vary alike; the softcap and varlen :data:`LEAN_TILES`); ``-p lse=false``
    for a call that needs no LSE (the store compiled out); ``-p head_dim_v`` for v's own head
    dim (:data:`VALUE_TILES`)."""
    vary = causal or window != NO_WINDOW
    params = {k: v for k, v in _tile(head_dim, vary, short, softcap or varlen,
                                     head_dim_v).items() if k != "stages"}
    reaches = ({"window_left": str(window[0]), "window_right": str(window[1])}
               if window != NO_WINDOW else {})
    return {**params, "head_dim": str(head_dim), "causal": str(causal).lower(),
            **({"align": align} if vary else {}), **reaches,
            **({"softcap": "true"} if softcap else {}), **({"varlen": "true"} if varlen else {}),
            **({} if lse else {"lse": "false"}),
            **({"head_dim_v": str(head_dim_v)} if head_dim_v else {})}


def call_stages(head_dim: int, causal: bool, short: bool = False, head_dim_v: int = 0) -> int:
    """The ring depth (``-T stages``) the call compiles with :func:`call_params`."""
    return int(_tile(head_dim, causal, short, head_dim_v=head_dim_v).get("stages",
                                                                         CALL_STAGES))


@attrs.frozen(kw_only=True, eq=False)
class AttentionKernel(Built):
    """A built attention kernel: its tile, and the plan's loop bounds (the causal order's tile
    costs, tile_order.choose)."""

    block_m: int
    block_n: int
    #: the plan's loop bounds (the causal order's tile costs, tile_order.choose)
    bounds: LoopBounds | None = None


def _source(head_dim: int, dtype: str, causal: bool, align: str, short: bool = False,
            window: tuple[int, int] = NO_WINDOW, softcap: bool = False,
            lse: bool = True, head_dim_v: int = 0) -> tuple[CompiledSchedule, str]:
    """The call's schedule compiled (and proven) for one kernel, and its CUDA."""
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    compiled = CALL.compile(call_params(head_dim, causal, align, short, window, softcap,
                                        lse=lse, head_dim_v=head_dim_v),
                            call_stages(head_dim, causal or window != NO_WINDOW, short,
                                        head_dim_v))
    return compiled, emit_attention(compiled, dtype=dtype)


def _build(head_dim: int, dtype: str, causal: bool, align: str, short: bool, device: int,
           window: tuple[int, int] = NO_WINDOW, softcap: bool = False,
           lse: bool = True, head_dim_v: int = 0) -> AttentionKernel:
    return _load(*_source(head_dim, dtype, causal, align, short, window, softcap, lse,
                          head_dim_v), device)


def _load(compiled: CompiledSchedule, source: str, device: int) -> AttentionKernel:
    """``source`` (emitted from ``compiled``) built, or read from the disk cache, and loaded on
    ``device``: the call's kernels, and the GPU checks' variants and mutants
    (benchmarks/attention_checks.py) put in ``CALL.kernels`` to run through the call."""
    from pipeline_core_nvidia_h100.kit_api import declared_geometry

    from pipeline_core_schedules_attention.schedule import KERNEL_FAMILY, AttentionGeometry

    g = declared_geometry(compiled, KERNEL_FAMILY, AttentionGeometry, "attention")
    kernel = load_kernel(source, KERNEL_NAME, device=device, smem=g.smem_bytes,
                         options=BUILD_OPTIONS)
    return AttentionKernel(kernel=kernel, smem=g.smem_bytes, threads=g.threads,
                           block_m=g.block_m, block_n=g.block_n, bounds=plan_bounds(compiled))


def _kernel_key(c: AttentionCall, device: int, lse: bool = True) -> tuple[Any, ...]:
    """The key of call ``c``'s kernel in ``CALL.kernels`` (a window's reaches and the softcap
    after the six of every kernel, only where taken: one kernel per window; then False where
    the kernel stores no LSE, the call needing none; then v's own head dim, only where the
    call has one), :func:`_build`'s arguments."""
    value = c.head_dim_v != 0
    extra = ((c.window, bool(c.softcap)) if c.windowed or c.softcap or not lse or value
             else ())
    return (c.head_dim, c.dtype, c.causal, c.align, c.short, device, *extra,
            *((lse,) if not lse or value else ()), *((c.head_dim_v,) if value else ()))


def _attention_key(q: Any, k: Any, v: Any, causal: object, scale: object,
                   stream: int, window: object = None, softcap: object = None) -> tuple[Any, ...]:
    """Everything :func:`plan_attention` and the launch read of one call: each tensor's
    description (launch_cache.describe: shape, so the head dim, lengths and GQA group; strides,
    so what is copied and the output's layout; dtype; device, so whether on CUDA and on one
    device; TMA's 16-byte alignment), ``causal`` and ``scale`` with their types (``1 == True`` and hashes alike, but
    ``causal=1`` is refused), and the stream; a window and a softcap with their types, only
    where given (every other call's key as before)."""
    extra = ((type(window), window if not isinstance(window, list) else tuple(window),
              type(softcap), softcap) if window is not None or softcap is not None else ())
    return (describe(q), describe(k), describe(v), type(causal), causal, type(scale), scale,
            stream, *extra)


#: per (recipe, kernel): the causal tile order (:func:`_order`), kept apart from the packed
#: arguments so a call with new addresses does not choose it again
_ORDERS: Bounded[TileOrder] = Bounded(RECIPE_CACHE_SIZE)


def _run(q: Any, k: Any, v: Any, causal: bool | str, scale: float | None,
         lse: bool = False, window: object = None, softcap: object = None) -> Any:
    """The output of one call, launched on torch's current stream (docs/guide/attention.md,
    "The launch path"): the arguments are checked and planned on the first call of each
    argument description, later calls go straight to the launch (the recipe's kernel is
    looked up in ``CALL.kernels`` at each launch, so the benchmarks' ablations and mutants,
    which swap its entries, run through the cached recipe).  With ``lse`` (a gradient is
    needed: the op's forward), ``(output, lse)``: each row's log-sum-exp too, [B, H, Sq] fp32;
    without, a null LSE, to a kernel built with the store compiled out (``-p lse=false``; but
    where :data:`LSE_KEPT` holds)."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    if not q.is_cuda:  # no stream to key by: the checks refuse it in one line
        plan_attention(q, k, v, causal=causal, scale=scale, window=window, softcap=softcap)
    device = q.device.index if q.device.index is not None else torch.cuda.current_device()
    stream = current_stream(torch, device)
    key = (*_attention_key(q, k, v, causal, scale, stream, window, softcap), lse)
    try:
        r = CALL.recipes.get(key)
    except TypeError:  # an unhashable causal or scale, which the checks refuse
        r = None
    if r is None:
        c = plan_attention(q, k, v, causal=causal, scale=scale, window=window,
                           softcap=softcap)
        r = CALL.recipes.put(key, Recipe(plan=c, device=device, stream=stream, kernels=(
            _kernel_key(c, device, stores_lse(c.head_dim, c.causal, lse)),)))
    c = r.plan
    # q's layout, as SDPA's output, of v's head dim
    out = empty_in_order(torch, (*q.shape[:3], c.v_dim), c.out_order, q)
    saved = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device) if lse else None
    if c.copied:  # the operands TMA cannot read where they lie, copied once (layout.py)
        q, k, v = (readable(t) if n in c.copied else t for n, t in (("q", q), ("k", k), ("v", v)))
    # the kernel in the key: a benchmark's swapped kernel gets arguments packed for it
    CALL.launch(r, (r, CALL.kernels.kernel(r.kernels[0]), q.data_ptr(), k.data_ptr(),
                    v.data_ptr()), (q, k, v), (out, saved))
    return (out, saved) if lse else out


def _attention_arguments(r: Recipe[AttentionCall], kernels: tuple[AttentionKernel, ...],
                         tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The persistent grid (one CTA per query tile, at most one per SM) and the kernel's
    arguments (signature.SIGNATURE) but the output's and the LSE's addresses, which are packed
    per call: Q's, K's and V's tensor maps through their own strides (layout.bhsd_map); the
    sizes, the folded scale, the GQA group, (causal) the tile order that balances the CTAs'
    work (tile_order.choose over the plan's trips), the query heads and the output's strides."""
    np = require_gpu_module("numpy")
    (built,), (q, k, v) = kernels, tensors
    c = r.plan
    mt = -(-c.sq // built.block_m)
    grid = min(c.bh * mt, sm_count(r.device))
    order = ORDER if ORDER is not None else _order(r, built, mt, grid, np)
    o_sb, o_sh, o_ss, _ = c.out_strides
    values = {"tmQ": bhsd_map(q, built.block_m, c.dtype),
              "tmK": bhsd_map(k, built.block_n, c.dtype),
              "tmV": bhsd_map(v, built.block_n, c.dtype),
              "BH": c.bh, "Sq": c.sq, "Sk": c.sk, "scale_log2": c.scale_log2, "group": c.group,
              "hg": order.hg, "snake": order.snake, "H": c.heads, "o_sb": o_sb, "o_sh": o_sh,
              "o_ss": o_ss, **({"softcap_scale": c.softcap_scale} if c.softcap else {})}
    signature = forward_signature(varlen=False, softcap=bool(c.softcap))
    return (Launch.of(built, (grid,), *signature.pack_around(("O", "LSE"), values, np)),)


def _order(r: Recipe[AttentionCall], built: AttentionKernel, mt: int, grid: int,
           np: Any) -> TileOrder:
    """The causal tile order of recipe ``r`` on ``built`` (tile_order.choose over the plan's
    trips), chosen once per (recipe, kernel) and kept; not causal, the default, which the
    kernel does not read."""
    if not r.plan.tiles_vary or built.bounds is None:
        return TileOrder()
    found = _ORDERS.get((r, built))
    if found is None:
        c, bounds = r.plan, built.bounds
        trips = [bounds.trips(i, c.sq, c.sk) for i in range(mt)]
        found = _ORDERS.put((r, built), choose(trips, bh=c.bh, grid=grid, np=np))
    return found


def _family_ops() -> tuple[Op, ...]:
    """The family's custom ops, differentiable (autograd.py)."""
    from pipeline_core_schedules_attention.autograd import attention_ops

    return attention_ops()


#: the call layer of the attention family (the kit's HostCall): its kernels (key:
#: :func:`_kernel_key`), recipes, packed arguments and op
CALL: HostCall[AttentionCall, AttentionKernel] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_schedules_attention.plugin"),
    build=lambda key: _build(*key), pack=_attention_arguments, ops=_family_ops)


def attention(q: Any, k: Any, v: Any, *, causal: bool | str = False,
              scale: float | None = None, deterministic: bool = False,
              window: tuple[int, int] | None = None, softcap: float | None = None) -> Any:
    """softmax(q . k^T * scale) . v for torch tensors [B, H, S, D] (bf16 or fp16; the kernels'
    head dims 64, 96, 128, 192 and 256, any other up to 256 and a v of another head dim than q's
    and k's zero-padded to one of them, padded_attention; the backward at 64 and 128, so a
    gradient at 192 or 256 is refused in one line, no_backward; any S >= 1, query and key
    lengths may differ; k and v may have fewer heads, a divisor
    of q's: grouped-query attention; any strides: a [B, S, H, D] buffer's transposed view is
    read in place, strides TMA cannot take are copied once, layout.py; the output takes q's
    layout); ``scale`` defaults to 1/sqrt(D).  ``causal``: False,
    True or "top_left" (torch's is_causal), or "bottom_right" (FlashAttention's diagonal: a
    query row that sees no key gives 0).  Differentiable (torch autograd, torch.compile):
    ``deterministic`` makes the backward's dQ bitwise the same run to run (autograd.py).  Runs
    on torch's current stream and allocates only the output (and, where a gradient is needed,
    each row's log-sum-exp, which the backward reads).  ``window=(left, right)``: a sliding
    window, FlashAttention's (-1 unbounded; with ``causal`` the right reach is 0; without it,
    aligned bottom-right); ``softcap``: softcap * tanh(scores / softcap) before the softmax
    (window_args.py).  Neither has a backward yet: a call needing a gradient is refused."""
    if not isinstance(deterministic, bool):
        raise AttentionArgumentError(f"attention: deterministic: {deterministic!r}; pass True "
                                     "or False")
    padded = padded_attention(q, k, v, causal=causal, scale=scale, deterministic=deterministic,
                              window=window, softcap=softcap)
    if padded is not None:
        return padded
    d = q.shape[-1] if len(getattr(q, "shape", ())) == 4 else 0
    if d in HEAD_DIMS and d not in BWD_HEAD_DIMS:  # refused now, not at backward()
        _refuse_gradient(q, k, v, d)
    if window is not None or softcap is not None:  # the forward alone, eager (window_args)
        import torch  # type: ignore[import-not-found, unused-ignore]

        refuse_gradient(torch, (q, k, v), window, softcap, _attention_error)
        return _run(q, k, v, causal, scale, window=window, softcap=softcap)
    # plain CUDA tensors needing no gradient, outside tracing, skip the op's dispatch (the
    # kit's HostCall.call); the checks then run once per argument description
    # (docs/guide/attention.md, "The launch path"); the op's causal is "none" or an alignment,
    # its scale a float or None; it returns (output, lse)
    return CALL.call("attention", _run_eager,
                     lambda q, k, v, causal, scale: plan_attention(q, k, v, causal=causal,
                                                                   scale=scale),
                     (q, k, v), causal, scale,
                     op_args=lambda: (causal_align(causal) or "none",
                                      None if scale is None else float(scale),
                                      deterministic))[0]


def pad_head_dims(fail: Any, q: Any, k: Any, v: Any, *, rank: int, scale: float | None,
                  differentiable: bool, native: Collection[tuple[int, int]] = ()
                  ) -> tuple[Any, Any, Any, float, int] | None:
    """q, k and v zero-padded to :func:`kernel_head_dim` where that is not their own head dim,
    with q's own scale (1/sqrt(dq) by default) and v's head dim, the output's columns to keep:
    ``(q, k, v, scale, dv)``; None where the call runs as it is (or an operand is not of
    ``rank``: the unpadded call names the argument at fault).  torch's ``F.pad``, so autograd
    and torch.compile see through it.  The one rule ``attention()`` (:func:`padded_attention`)
    and ``attention_varlen`` pad by; ``differentiable``: the call has a backward, so a call
    needing a gradient pads to one of its head dims; ``native``: the (q's, v's) head dim pairs
    the call runs as they are (``attention()``'s :data:`VALUE_TILES`).  ``fail(name, why)``
    makes the one-line error: k's head dim not q's, or a head dim past the largest kernel."""
    shapes = [tuple(getattr(t, "shape", ())) for t in (q, k, v)]
    if any(len(x) != rank for x in shapes):
        return None
    # ints: under torch.compile a dimension may be a SymInt (a shape that changed between two
    # compiles is made dynamic), which a lookup cannot hash; the head dims pick the kernel
    dq, dk, dv = (int(x[-1]) for x in shapes)
    if dk == dq and (dv == dq and dq in BWD_HEAD_DIMS or (dq, dv) in native):
        return None  # the common call, or a pair a kernel runs: no torch call spent here
    if dk != dq:
        raise fail("k", f"head dim {dk} differs from q's {dq}: q . k^T needs one (v's may "
                        "differ); pass k with q's last dimension")
    import torch  # type: ignore[import-not-found, unused-ignore]

    grad = differentiable and torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v))
    d = kernel_head_dim(dq, dv, grad)
    if d is None:
        raise fail("q" if dq >= dv else "v", f"head dim {max(dq, dv)}; the kernels take up to "
                   f"{HEAD_DIMS[-1]}: use torch's scaled_dot_product_attention")
    if d == dq == dv:
        return None
    import torch.nn.functional as F  # type: ignore[import-not-found, unused-ignore]

    qp, kp, vp = (F.pad(t, (0, d - t.shape[-1])) for t in (q, k, v))
    return qp, kp, vp, dq ** -0.5 if scale is None else scale, dv


def padded_attention(q: Any, k: Any, v: Any, *, causal: bool | str, scale: float | None,
                     deterministic: bool, window: Any, softcap: Any) -> Any:
    """:func:`attention` at :func:`kernel_head_dim` where that is not q's and v's own head dim
    (:func:`pad_head_dims`), the output's first ``dv`` columns (a view, as SDPA's flash
    backend returns where it pads); None where the call runs as it is."""
    padded = pad_head_dims(_attention_error, q, k, v, rank=4, scale=scale, differentiable=True,
                           native=VALUE_TILES)
    if padded is None:
        return None
    qp, kp, vp, s, dv = padded
    out = attention(qp, kp, vp, causal=causal, scale=s, deterministic=deterministic,
                    window=window, softcap=softcap)
    return out[..., :dv]


def _refuse_gradient(q: Any, k: Any, v: Any, head_dim: int) -> None:
    """One error line where a call needs a gradient at a head dim with no backward
    (:func:`no_backward`)."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    why = no_backward(head_dim)
    if why is not None and torch.is_grad_enabled() and any(
            getattr(t, "requires_grad", False) for t in (q, k, v)):
        raise _attention_error("q", why)


def _run_eager(q: Any, k: Any, v: Any, causal: bool | str, scale: float | None) -> tuple[Any]:
    """The eager path's output, as the op's (output, lse)[0] is taken."""
    return (_run(q, k, v, causal, scale),)


# the ops registered now where torch is imported already (HostCall.register_if_torch_imported)
CALL.register_if_torch_imported()
