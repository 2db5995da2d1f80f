"""The ``matmul()`` call's planning, with no GPU package: argument checks, layouts, tiles.

``matmul.py`` describes each torch tensor as a :class:`TensorInfo` (shape, strides in elements,
element type, address) and asks :func:`plan_call` what to launch: which major mode and tensor map
each operand takes, the general kernel's :class:`GemmVariant` and the grid; a batched call's
batch folds into M or becomes grid z with 3-D maps (:func:`_batches`).  Every refusal is one
line naming the argument and what would work (:class:`MatmulArgumentError`,
:class:`MatmulTypeError`), raised before anything reaches the GPU.  Layout is never refused: an
operand TMA cannot read, or an ``out`` the kernel cannot write, is staged through an aligned
copy the plan records (``gemm_staging``; docs/guide/matmul.md, "Layouts TMA cannot read").
docs/guide/matmul.md is the user's page for these rules.
"""
from __future__ import annotations

import math

import attrs

from pipeline_core_nvidia_h100.gemm_tiles import stream_k_tiles
from pipeline_core_nvidia_h100.gemm_staging import (LINE_BYTES, TMA_ALIGN, Staging, aligned,
                                                    copy_pays, major, off_grid, padded,
                                                    stage_bias, stage_operand, stage_out)
from pipeline_core_nvidia_h100.warpspecialized import (ACTIVATIONS, BIASES, DTYPE_BYTES,
                                                       MN_CHUNK, OUT_BYTES, OUT_DTYPES,
                                                       STORE_ROWS, GemmVariant, a_rows_clash,
                                                       k_tile, store_cols)

#: bytes per element of every type an argument may have: the schedule's input and output tables
ELEM = {**DTYPE_BYTES, **OUT_BYTES}
#: torch's spelling of each element type, for the messages
TORCH_NAME = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32",
              "e4m3": "torch.float8_e4m3fn"}
#: The input types of ``matmul()``; fp8 e4m3 goes through ``scaled_mm()`` (gemm_scaled.py).
MATMUL_DTYPES = ("bf16", "fp16")
#: A grid's third dimension (the batch) is at most this many CTAs (CUDA's gridDim.z limit).
MAX_BATCH = 65535


class MatmulArgumentError(ValueError):
    """An argument of ``matmul()`` has a shape, layout or value the kernel cannot take."""


class MatmulTypeError(TypeError):
    """An argument of ``matmul()`` has an element type or kind the kernel cannot take."""


@attrs.frozen(kw_only=True)
class TensorInfo:
    """What the plan needs of one tensor: ``dtype`` is ``bf16``/``fp16``/``fp32`` or the
    framework's own name of another type; ``strides`` count elements; ``ptr`` is None for a
    fake (meta) tensor, whose address is not known."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    ptr: int | None = None
    device: str = "cuda:0"


@attrs.frozen(kw_only=True)
class TileShape:
    """The CTA tile the call's kernel is built with, and the fewest K tiles its programs take
    (the agents plan's ``min_tiles``: an agent's prologue runs that many iterations before its
    loop).  ``bk`` is the 16-bit types'; :func:`plan_call` takes the input type's own
    (``warpspecialized.k_tile``: 128 for e4m3)."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    min_k_tiles: int = 1
    #: consumer warp groups sharing the tile's rows (the TMA store's sub-tiles are a consumer's)
    consumers: int = 2
    #: consumer ping-pong (``GemmVariant.pingpong``): each consumer owns whole tiles, taken in
    #: turn; planned only where the kernel takes it (:func:`pingpong_taken`)
    pingpong: bool = False

    @property
    def consumer_rows(self) -> int:
        """Rows of the tile one consumer computes and stores: the whole tile's in ping-pong."""
        return self.bm if self.pingpong else self.bm // self.consumers


@attrs.frozen(kw_only=True)
class OperandMap:
    """One operand's TMA tensor map: a 2-D array ``outer`` x ``inner`` (``inner`` contiguous,
    ``stride`` elements between outer indices) read in ``box_inner`` x ``box_outer`` boxes."""

    major: str
    inner: int
    outer: int
    stride: int
    box_inner: int
    box_outer: int
    #: a batched operand's batches (a 3-D map, ``batch_stride`` elements apart); 1: a 2-D map
    batch: int = 1
    batch_stride: int = 0


@attrs.frozen(kw_only=True)
class Tuning:
    """The launch techniques the call may use (docs/guide/matmul.md, "Speed"); each on by
    default, off for an ablation.  ``persistent``: at most one CTA per SM, each looping over
    output tiles in the grouped order (the kernel's tile loop, its ring running on across
    tiles); ``split_k``: a grid with fewer output tiles than half the SMs splits K
    (:func:`split_count`); ``tma_store``: the epilogue stores through shared memory by TMA
    wherever C can be described so (:func:`store_map`; docs/guide/matmul.md, "The TMA-store
    epilogue"; on by default: it measured faster than the direct store on every timed shape)."""

    persistent: bool = True
    split_k: bool = True
    tma_store: bool = True
    #: CTAs per cluster (docs/guide/matmul.md, "Clusters"): 2 pairs CTAs on adjacent M tiles
    #: that multicast halves of their shared B tile, where the plan has at least two M tiles
    #: and no split (:func:`cluster_size`)
    cluster: int = 1
    #: the cp.async producer (docs/guide/matmul.md, "The cp.async producer") for a K-major
    #: operand whose row stride TMA reads slowly (:func:`cp_async_wanted`).  Off by default:
    #: measured on an H200 it ran slower than TMA on every such shape (2000x5000x3000 at row
    #: stride 3000: 263 TFLOPS against TMA's 433; 4000^3: 288 against 704;
    #: benchmarks/results/gemm_cpasync_h200.jsonl), so it is kept proven and switchable, not used
    cp_async: bool = False
    #: stream-K (docs/guide/matmul.md, "Stream-K"): where the decomposition asks for it
    #: (``decompose.choose``), the last partial wave's tiles shared by every CTA by K tiles.
    #: Off by default: on an H200 it ran 0.76-0.87x the data-parallel pick on every timed shape
    #: (2000x5000x3000 325 TFLOPS against 427, 4000^3 532 against 657): it stores every tile
    #: directly (no TMA store) and round-trips each shared tile's pieces through the fp32
    #: workspace, so it is kept proven and switchable (``-p stream_k=true``), not used
    stream_k: bool = False
    #: the wave model's ranking (``wave_cost.rank``; docs/guide/matmul.md, "Decomposition"):
    #: tile and split priced together per (M, N, K, dtype, SMs), K and the element type
    #: included.  Off: the previous rule (``decompose.choose``: tile by waves, then split), for
    #: the ablation that times one against the other (benchmarks/gemm_speed.py --choice)
    wave_model: bool = True
    #: A's TMA box clipped to M where all of M is one shorter tile (:func:`a_box_rows`;
    #: docs/guide/matmul.md, "Decomposition"); off: the tile's BM rows, zero-filled past M
    clip_a: bool = True
    #: the ping-pong kernel on a 128x192 tile with the TMA store (docs/guide/matmul.md,
    #: "Ping-pong") competes in the wave model's ranking; off: the cooperative tiles only (the
    #: ablation benchmarks/gemm_speed.py --choice --old pingpong=false times)
    pingpong: bool = True


def a_box_rows(m: int, tile_rows: int, variant: GemmVariant) -> int:
    """Rows of A's TMA box (``GemmVariant.a_rows``; 0: the tile's): M rounded up to 8 where all
    of M is one tile shorter than ``tile_rows`` and ``variant`` takes a clipped box
    (warpspecialized.a_rows_clash); else 0.  Why: TMA zero-fills a box row past M, which
    measured slower than reading a real row (H200, 64x64 tiles at 8192x8192: 53.5 us at M 8
    against 37.8 at M 64, the same kernel and B;
    benchmarks/results/gemm_small_m_sweep_s17_h200.jsonl)."""
    rows = -(-m // 8) * 8
    return rows if rows < tile_rows and a_rows_clash(variant) is None else 0


def rows_off_line(maps: tuple[OperandMap, ...], elem: int) -> bool:
    """Whether an operand has several rows (of either major mode) whose stride, 16-byte aligned
    so TMA reads it, is off the 128-byte line: its box rows straddle two lines, and the smaller
    the tile, the more that costs (decompose.choose)."""
    return any(m.outer > 1 and m.stride * elem % LINE_BYTES for m in maps)


def cp_async_wanted(maps: tuple[OperandMap, ...], elem: int) -> bool:
    """Whether the producer loads by cp.async: every operand K-major, and one of them with
    several rows whose stride (16-byte aligned, so TMA could read it) is off the 128-byte line;
    an operand of aligned rows stays on TMA unless its partner moves (both load one way)."""
    return all(m.major == "k" for m in maps) and rows_off_line(maps, elem)


def cluster_size(tiles_m: int, splits: int, tuning: Tuning) -> int:
    """The CTAs per cluster a plan launches: ``tuning.cluster`` unless the tile grid has a
    single M tile (nothing to pair) or K is split (split-K's CTAs reduce through global
    memory; the schedule refuses the two together)."""
    return tuning.cluster if tiles_m >= tuning.cluster and splits == 1 else 1


#: The fewest K tiles one split runs: below it the workspace round trip and the ring's fill
#: cost more than the split saves.
SPLIT_MIN_K_TILES = 8


def split_count(tiles: int, k_tiles: int, sms: int) -> int:
    """How many ways to split K: 1 unless the output tiles leave over half the SMs idle, else
    as many splits as fill the SMs with at least :data:`SPLIT_MIN_K_TILES` K tiles each, and
    no split left empty."""
    if sms <= 0 or tiles == 0 or 2 * tiles > sms:
        return 1
    splits = min(sms // tiles, k_tiles // SPLIT_MIN_K_TILES)
    if splits < 2:
        return 1
    return _cdiv(k_tiles, _cdiv(k_tiles, splits))


@attrs.frozen(kw_only=True)
class CallPlan:
    """What one call launches: the kernel variant, the tensor maps, the padded sizes the tile
    and K loops run over (``m_pad`` ...), the true ones the stores are clipped to, the grid."""

    m: int
    n: int
    k: int
    m_pad: int
    n_pad: int
    k_pad: int
    variant: GemmVariant
    a: OperandMap
    b: OperandMap
    ldc: int
    grid: int
    #: split-K: the grid's second dimension (``k_pad`` is then one split's K)
    splits: int = 1
    #: a batched matmul's batches: the grid's third dimension (1 when the batch folds into M)
    batch: int = 1
    #: elements from one batch's output to the next (batch > 1)
    c_batch: int = 0
    #: the result's shape: [m, n], or [B, M, N] for a batched matmul (then m = B * M if folded)
    out_shape: tuple[int, ...] = ()
    #: the TMA-store epilogue's tensor map of C (``variant.store == "tma"``), else None
    c: OperandMap | None = None
    #: the arguments the call copies around the launch, in order a, b, bias, out (layouts TMA
    #: cannot read, an out the kernel cannot write: gemm_staging); the maps are the copies'
    staged: tuple[Staging, ...] = ()
    #: a grouped GEMM's groups (grouped_mm's ``offs`` length; gemm_grouped.plan_grouped) and,
    #: scaled, the elements between one group's row-wise scales and the next
    groups: int = 0
    scale_group: int = 0
    #: stream-K's shared tiles (``gemm_tiles.stream_k_tiles``; the kernel's ``sk_tiles``)
    sk_tiles: int = 0


def _fail(name: str, why: str) -> MatmulArgumentError:
    return MatmulArgumentError(f"{name}: {why}")


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _shape(t: TensorInfo) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def operand_map(name: str, t: TensorInfo, rows_dim: int, tile_rows: int, bk: int,
                read: bool = True) -> OperandMap:
    """The tensor map of operand ``name`` (``a`` [M, K]: rows_dim 0; ``b`` [K, N]: rows_dim 1).

    K-major (K contiguous) when TMA can describe it, else MN-major (M or N contiguous, read
    through wgmma's transpose mode); a size-1 dimension's stride never matters
    (gemm_staging.major).  An operand in neither was staged by :func:`plan_call` into a copy in
    one.  ``read`` False (an empty product, M, N or K of 0): no kernel runs, and the strides
    are not judged.
    """
    elem = ELEM[t.dtype]
    k_dim = 1 - rows_dim
    rows, k = t.shape[rows_dim], t.shape[k_dim]
    s_rows, s_k = t.strides[rows_dim], t.strides[k_dim]
    found = major(t.shape, t.strides, rows_dim, elem) if read else "k"
    if found is None:
        raise RuntimeError(f"internal error: {name} {_shape(t)} with strides "
                           f"{tuple(t.strides)} reached its tensor map unstaged")
    if not read:  # an empty product: no kernel runs, nothing is read
        return OperandMap(major="k", inner=k, outer=rows, stride=padded(k, elem),
                          box_inner=bk, box_outer=tile_rows)
    if found == "k":  # K-major: rows of K elements
        return OperandMap(major="k", inner=k, outer=rows,
                          stride=padded(k, elem) if rows == 1 else s_rows,
                          box_inner=bk, box_outer=tile_rows)
    # MN-major: rows of M (N) elements, one per k
    return OperandMap(major="mn", inner=rows, outer=k,
                      stride=padded(rows, elem) if k == 1 else s_k,
                      box_inner=MN_CHUNK, box_outer=bk)


def check_vector(name: str, t: TensorInfo, length: int, why: str, a: TensorInfo) -> None:
    """A 1-D argument the kernel reads contiguous (bias, grouped_mm's offs): ``length``
    elements (``why``: what sets it), stride 1, on ``a``'s device; else one line naming it."""
    if t.shape[0] != length:
        raise _fail(name, f"length {t.shape[0]}, but {why}: {name} must be [{length}]")
    if length > 1 and t.strides[0] != 1:
        raise _fail(name, f"stride {t.strides[0]}; it must be contiguous: pass "
                          f"{name}.contiguous()")
    if t.device != a.device:
        raise _fail(name, f"on {t.device}, a on {a.device}; pass {name}.to('{a.device}')")


def store_map(m: int, n: int, ldc: int, out_dtype: str, tile: TileShape) -> OperandMap | None:
    """C's tensor map for the TMA-store epilogue (docs/guide/matmul.md, "The TMA-store
    epilogue"): the [m, n] array of row stride ``ldc`` in boxes of 64 rows by one 128- or
    64-byte row of columns (warpspecialized.store_cols), the staging buffer's shape; None where
    TMA cannot describe C (a row stride off 16 bytes; ``out``'s address is checked with the
    other operands') or no such row tiles a consumer's columns in whole buffers: that call
    stores directly."""
    elem = ELEM[out_dtype]
    cols = store_cols(out_dtype, tile.bn, max(1, tile.consumer_rows // STORE_ROWS))
    if cols is None:
        return None
    if m > 1 and not aligned(ldc, elem):
        return None
    return OperandMap(major="k", inner=n, outer=m, stride=ldc if m > 1 else padded(n, elem),
                      box_inner=cols, box_outer=STORE_ROWS)


def _check_tensor(name: str, t: TensorInfo, dims: int, allowed: tuple[str, ...],
                  batched: bool = False) -> None:
    """``t``'s element type and rank (``batched``: a 3-D [B, rows, cols] is taken too), each
    refused in one line naming ``name`` (an unaligned address is staged, never refused)."""
    if t.dtype not in allowed:
        fix = ("use pipeline_core_nvidia_h100.scaled_mm for fp8"
               if "float8" in t.dtype or t.dtype == "e4m3" else f"pass {name}.to(torch.bfloat16)")
        if allowed == ("e4m3",):
            fix = (f"pass {name}.to(torch.float8_e4m3fn) with its scale, or use matmul for "
                   "bf16 / fp16")
        raise MatmulTypeError(f"{name}: element type {TORCH_NAME.get(t.dtype, t.dtype)} is not "
                              f"one of {', '.join(TORCH_NAME[d] for d in allowed)}; {fix}")
    if len(t.shape) != dims and not (batched and len(t.shape) == 3):
        what = ("[M, K] / [K, N] (or [B, M, K] / [B, K, N])" if batched else
                "[M, K] / [K, N]" if dims == 2 else "[N]")
        raise _fail(name, f"{len(t.shape)}-D tensor of shape {_shape(t)}; takes a "
                          f"{dims}-D {what} tensor" + (": flatten the leading batch dimensions "
                                                       "into one" if len(t.shape) > 3 else ""))


def plan_call(a: TensorInfo, b: TensorInfo, *, bias: TensorInfo | None = None,
              activation: str | None = None, out_dtype: str | None = None,
              out: TensorInfo | None = None, tile: TileShape = TileShape(), sms: int = 0,
              tuning: Tuning = Tuning(), scale: str = "none", stream_k: bool = False
              ) -> CallPlan:
    """Check ``matmul(a, b, bias=, activation=, out_dtype=, out=)``'s arguments and plan the
    launch (torch's semantics: ``a [M, K] @ b [K, N]``, or batched ``[B, M, K] @ [B, K, N]``
    with a 2-D side broadcast over the batch; bias per column, then activation).
    ``sms``: the device's SM count, which the persistent grid and the split are sized by (0:
    not known, one CTA per output tile, no split).  ``scale`` (``tensor`` / ``row``): the
    fp8 kernel of ``scaled_mm``, whose own checks (gemm_scaled.plan_scaled) come first.
    ``stream_k``: the decomposition asks for stream-K (``decompose.choose``): planned where
    the tiles leave a last partial wave to share (``gemm_tiles.stream_k_tiles``), the grid
    unsplit and unbatched, and ``tuning.stream_k`` allows it."""
    allowed = MATMUL_DTYPES if scale == "none" else ("e4m3",)
    _check_tensor("a", a, 2, allowed, batched=scale == "none")
    _check_tensor("b", b, 2, allowed, batched=scale == "none")
    if b.dtype != a.dtype:
        raise MatmulTypeError(f"b: element type {TORCH_NAME[b.dtype]} differs from a's "
                              f"{TORCH_NAME[a.dtype]}; pass b.to({TORCH_NAME[a.dtype]})")
    if a.device != b.device:
        raise _fail("b", f"on {b.device}, a on {a.device}; pass b.to('{a.device}')")
    tile = attrs.evolve(tile, bk=k_tile(a.dtype))
    given_out = out
    read = 0 not in (*a.shape, *b.shape)  # else no kernel runs: nothing is read or staged
    a, b, bias, out, staged = _stage(a, b, bias, out, k_major=scale != "none", read=read)
    batches = _batches(a, b, out)
    a, b, out = batches.a, batches.b, batches.out
    (m, k), (kb, n) = a.shape, b.shape
    if kb != k:
        raise _fail("b", f"shape {_shape(b)} does not match a {_shape(a)}: b must be "
                         f"[K={k}, N]")
    if activation is not None and (activation not in ACTIVATIONS or activation == "none"):
        raise _fail("activation", f"{activation!r} is not one of "
                                  f"{', '.join(repr(x) for x in ACTIVATIONS[1:])} or None")
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise MatmulTypeError(f"out_dtype: {out_dtype} is not one of "
                              f"{', '.join(TORCH_NAME[d] for d in OUT_DTYPES)}")
    bias_kind = "none"
    if bias is not None:
        _check_tensor("bias", bias, 1, BIASES[1:])
        check_vector("bias", bias, n, f"b has N={n} columns", a)
        bias_kind = bias.dtype
    ldc = n
    if out is not None:
        _check_tensor("out", out, 2, OUT_DTYPES)
        if out_dtype is not None and out.dtype != out_dtype:
            raise MatmulTypeError(f"out: element type {TORCH_NAME[out.dtype]} differs from "
                                  f"out_dtype={TORCH_NAME[out_dtype]}; drop out_dtype or pass "
                                  f"an out of that type")
        out_dtype = out.dtype
        if tuple(out.shape) != (m, n):
            raise _fail("out", f"shape {_shape(given_out or out)}; the product is "
                               f"{list(batches.product(m, n))}")
        if out.device != a.device:
            raise _fail("out", f"on {out.device}, a on {a.device}")
        ldc = out.strides[0] if m > 1 else n
    a_map = _batched_map(operand_map("a", a, 0, tile.bm, tile.bk, read), "a", a.dtype, batches,
                         read)
    b_map = _batched_map(operand_map("b", b, 1, tile.bn, tile.bk, read), "b", b.dtype, batches,
                         read)
    tiles_m, tiles_n = _cdiv(m, tile.bm), _cdiv(n, tile.bn)
    tiles = tiles_m * tiles_n
    k_tiles = max(_cdiv(k, tile.bk), tile.min_k_tiles)
    kernel_batch = batches.count if batches.kind != "none" else 1
    splits = split_count(tiles, k_tiles, sms) if tuning.split_k and kernel_batch == 1 else 1
    if splits > 1:  # one split's K tiles; the last split's past K are zero-filled loads
        k_tiles = max(_cdiv(k_tiles, splits), tile.min_k_tiles)
    grid = min(tiles, sms) if tuning.persistent and sms > 0 else tiles
    sk_tiles = (stream_k_tiles(tiles, k_tiles, grid)
                if stream_k and tuning.stream_k and splits == 1 and kernel_batch == 1 else 0)
    out_dtype = out_dtype or a.dtype
    # a cluster pairs plain kernels only (the schedule refuses it with a batch, fp8 or the TMA
    # store until they are combined): a clustered call stores directly
    cp_async = (tuning.cp_async and kernel_batch == 1 and read
                and cp_async_wanted((a_map, b_map), ELEM[a.dtype]))
    if tile.pingpong and not pingpong_taken(splits, kernel_batch, scale, cp_async, sk_tiles):
        tile = attrs.evolve(tile, pingpong=False)  # the cooperative kernel of the same tile
    cluster = cluster_size(tiles_m, splits, tuning) \
        if (kernel_batch == 1 and scale == "none" and not cp_async and not sk_tiles
            and not tile.pingpong) else 1
    # a batched kernel (grid z) offsets C by its batch: a 2-D map of C would clip a batch's
    # tail rows into the next batch, so it stores directly (a folded batch is one 2-D C); so
    # does an out whose address TMA cannot write (the direct store takes any)
    c_aligned = out is None or out.ptr is None or out.ptr % TMA_ALIGN == 0
    c_map = (store_map(m, n, ldc, out_dtype, tile)
             if tuning.tma_store and splits == 1 and kernel_batch == 1 and cluster == 1 and read
             and c_aligned and not sk_tiles else None)
    variant = GemmVariant(dtype=a.dtype, a_major=a_map.major, b_major=b_map.major,
                          out_dtype=out_dtype, bias=bias_kind,
                          activation=activation or "none", tails=True, split_k=splits > 1,
                          stream_k=sk_tiles > 0,
                          scale=scale, batch=batches.kind,
                          store="tma" if c_map is not None else "direct", cluster=cluster,
                          load="cp_async" if cp_async else "tma", pingpong=tile.pingpong)
    a_rows = a_box_rows(m, tile.bm, variant) if tuning.clip_a and read else 0
    if a_rows:
        variant = attrs.evolve(variant, a_rows=a_rows)
        a_map = attrs.evolve(a_map, box_outer=a_rows)
    # a batched grid is one persistent grid per batch (grid z): the CTAs of batch 0 take the
    # SMs first, so the tiles in flight share their batch's operands in L2 (sharing the SMs
    # among all batches at once ran 0.67 of torch.bmm at 16 x 2048^3, this 0.79:
    # benchmarks/results/matmul_fp8_h100.jsonl, run 2)
    if cluster > 1:  # whole clusters of tile pairs; each CTA loads its share of the B tile
        pairs = _cdiv(tiles_m, cluster) * tiles_n
        grid = cluster * (min(pairs, sms // cluster) if tuning.persistent and sms > 0 else pairs)
        if b_map.major == "k":
            b_map = attrs.evolve(b_map, box_outer=b_map.box_outer // cluster)
    c_batch = 0
    if kernel_batch > 1:
        c_batch = batches.out_batch_stride if batches.out_batch_stride is not None else m * ldc
    return CallPlan(m=m, n=n, k=k, m_pad=tiles_m * tile.bm, n_pad=tiles_n * tile.bn,
                    k_pad=k_tiles * tile.bk, variant=variant, a=a_map, b=b_map, ldc=ldc,
                    grid=grid, splits=splits, batch=kernel_batch, c_batch=c_batch,
                    out_shape=batches.product(m, n), c=c_map, staged=staged, sk_tiles=sk_tiles)


def pingpong_taken(splits: int, batch: int, scale: str, cp_async: bool,
                   sk_tiles: int) -> bool:
    """Whether a call planned with a ping-pong tile launches the ping-pong kernel: not split
    (split-K or stream-K), one product, 16-bit (warpspecialized.WsGeometry.validate refuses
    the others), and TMA loads (the cp.async producer was never run with ping-pong on the GPU);
    else the same tile runs cooperatively."""
    return splits == 1 and batch == 1 and scale == "none" and not cp_async and not sk_tiles


def _stage(a: TensorInfo, b: TensorInfo, bias: TensorInfo | None, out: TensorInfo | None, *,
           k_major: bool, read: bool) -> tuple[TensorInfo, TensorInfo, TensorInfo | None,
                                               TensorInfo | None, tuple[Staging, ...]]:
    """The arguments as the kernel sees them, and the copies that takes (gemm_staging;
    docs/guide/matmul.md, "Layouts TMA cannot read"): each argument the tensor maps or the
    direct store cannot take is described as its aligned copy (address unknown: the
    allocator's, aligned).  ``k_major``: fp8, whose copies keep K contiguous.  An ``out`` with
    a stride of 0 is refused, as torch refuses it: the kernel would write one place twice."""
    if not read:
        return a, b, bias, out, ()
    a_b, b_b = _batch_roles(a, b)
    realign = _realign(a, b)
    found = [stage_operand("a", a, 0, ELEM[a.dtype], a_b, k_major, "a" in realign),
             stage_operand("b", b, 1, ELEM[b.dtype], b_b, k_major, "b" in realign)]
    if bias is not None and len(bias.shape) == 1:
        found.append(stage_bias(bias))
    if out is not None and len(out.shape) in (2, 3):
        if any(s == 0 and d > 1 for d, s in zip(out.shape, out.strides)):
            raise _fail("out", f"strides {tuple(out.strides)}: a stride of 0 writes several "
                               f"elements to one place, which torch refuses too; pass a "
                               f"torch.empty({', '.join(map(str, out.shape))})")
        found.append(stage_out(out))
    staged = tuple(s for s in found if s is not None)
    copies = {s.operand: s for s in staged}

    def copy(t: TensorInfo, name: str) -> TensorInfo:
        s = copies.get(name)
        if s is None:
            return t
        # a 2-D copy of a 3-D operand's one matrix: its batch (1, or broadcast) stays as it was
        strides = s.strides if len(s.shape) == len(t.shape) else (t.strides[0], *s.strides)
        return attrs.evolve(t, strides=strides, ptr=None)

    return (copy(a, "a"), copy(b, "b"), None if bias is None else copy(bias, "bias"),
            None if out is None else copy(out, "out"), staged)


def _realign(a: TensorInfo, b: TensorInfo) -> tuple[str, ...]:
    """The operands TMA could read where they lie whose rows are off the 64-byte grid
    (gemm_staging.off_grid) and worth copying into aligned rows: the copy costs less than the
    GEMM loses to rows that straddle lines (gemm_staging.copy_pays; docs/guide/matmul.md,
    "Layouts TMA cannot read")."""
    elem = ELEM[a.dtype]
    names = tuple(name for name, t, rows_dim in (("a", a, 0), ("b", b, 1))
                  if off_grid(t, rows_dim, elem))
    if not names:
        return ()
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = max(a.shape[0] if len(a.shape) == 3 else 1, b.shape[0] if len(b.shape) == 3 else 1)
    copied = sum(math.prod(t.shape) for name, t in (("a", a), ("b", b)) if name in names)
    return names if copy_pays(m, n, k, batch, elem, copied) else ()


@attrs.frozen(kw_only=True)
class _Batches:
    """A call's batch (docs/guide/matmul.md, "Batched matmul"): the operands and output as the
    kernel sees each batch's matrix (2-D views), how many batches, which operands carry one
    (``kind``: ``none`` when there is none or it folds into A's rows), and each batched
    operand's batch stride."""

    a: TensorInfo
    b: TensorInfo
    out: TensorInfo | None
    count: int = 1
    kind: str = "none"
    strides: tuple[tuple[str, int], ...] = ()
    #: rows of one batch when A's batch folded into M (the result is then [B, M, N])
    folded_rows: int = 0
    #: out's batch stride, when a 3-D out was given to a batched kernel
    out_batch_stride: int | None = None
    #: the leading shape of the result ([B] for a batched call, [] else)
    lead: tuple[int, ...] = ()

    def product(self, m: int, n: int) -> tuple[int, ...]:
        """The result's shape for the kernel's [m, n]."""
        return (*self.lead, self.folded_rows or m, n)


def _two_d(t: TensorInfo) -> TensorInfo:
    return attrs.evolve(t, shape=t.shape[-2:], strides=t.strides[-2:])


def _batch_roles(a: TensorInfo, b: TensorInfo) -> tuple[bool, bool]:
    """Whether the kernel reads ``a`` / ``b`` batched (a 3-D map, or A's batch folded into M):
    a 3-D operand whose batch is the call's, over 1.  A batch of stride 0 (``expand``) is the
    same matrix each time: broadcast, as a 2-D operand, where the other operand carries a batch
    (where neither does, it is read batched, staged into a copy per batch)."""
    ba = a.shape[0] if len(a.shape) == 3 else None
    bb = b.shape[0] if len(b.shape) == 3 else None
    count = max((x for x in (ba, bb) if x is not None), default=1)
    a_b = ba is not None and ba == count and count > 1
    b_b = bb is not None and bb == count and count > 1
    real_a, real_b = a_b and a.strides[0] != 0, b_b and b.strides[0] != 0
    return (real_a, real_b) if real_a or real_b else (a_b, b_b)


def _batches(a: TensorInfo, b: TensorInfo, out: TensorInfo | None) -> _Batches:
    """torch.matmul's batch rule for 3-D operands: [B, M, K] @ [B, K, N], one side may be 2-D
    (or have a batch of 1) and is broadcast.  A 3-D A with a 2-D B whose batches lie a whole
    matrix apart folds into one [B * M, K] GEMM (as its output does); otherwise each batched
    operand gets a 3-D tensor map and grid z runs the batch."""
    ba = a.shape[0] if len(a.shape) == 3 else None
    bb = b.shape[0] if len(b.shape) == 3 else None
    if ba is None and bb is None:
        return _Batches(a=a, b=b, out=out)
    if ba is not None and bb is not None and ba != bb and 1 not in (ba, bb):
        raise _fail("b", f"batch {bb} does not match a's {ba}: torch broadcasts only a batch "
                         f"of 1; pass b of shape [{ba}, {b.shape[1]}, {b.shape[2]}]")
    count = max(x for x in (ba, bb) if x is not None)
    if count > MAX_BATCH:
        raise _fail("a" if ba == count else "b", f"batch {count} is over the grid's "
                                                 f"{MAX_BATCH}; split the call")
    a_b, b_b = _batch_roles(a, b)
    a2, b2 = _two_d(a), _two_d(b)
    m, n = a2.shape[0], b2.shape[1]
    ldo, bso = n, m * n
    if out is not None:
        if len(out.shape) != 3 or out.shape[0] != count:
            raise _fail("out", f"shape {_shape(out)}; the product is [{count}, {m}, {n}]")
        ldo, bso = (out.strides[1] if m > 1 else n), out.strides[0]
    if a_b and not b_b and (m == 1 or a.strides[0] == m * a.strides[1]) and \
            (count == 1 or bso == m * ldo):
        rows = count * m
        fold_a = attrs.evolve(a, shape=(rows, a.shape[2]),
                              strides=(a.strides[0] if m == 1 else a.strides[1], a.strides[2]))
        fold_out = None if out is None else attrs.evolve(
            out, shape=(rows, n), strides=(ldo, out.strides[2]))
        return _Batches(a=fold_a, b=b2, out=fold_out, count=count, folded_rows=m,
                        lead=(count,))
    if count == 1 or not (a_b or b_b):
        return _Batches(a=a2, b=b2, out=None if out is None else _two_d(out), lead=(count,))
    kind = "ab" if a_b and b_b else "a" if a_b else "b"
    strides = tuple((name, t.strides[0]) for name, t, on in (("a", a, a_b), ("b", b, b_b)) if on)
    return _Batches(a=a2, b=b2, out=None if out is None else _two_d(out), count=count,
                    kind=kind, strides=strides, lead=(count,),
                    out_batch_stride=None if out is None else bso)


def _batched_map(m: OperandMap, name: str, dtype: str, batches: _Batches,
                 read: bool) -> OperandMap:
    """Operand ``name``'s map with its batch (3-D) when it carries one: the batch stride is a
    positive multiple of 16 bytes, as TMA's every stride but the innermost (:func:`_stage`
    staged an operand whose was not)."""
    stride = dict(batches.strides).get(name)
    if stride is None:
        return m
    if read and not aligned(stride, ELEM[dtype]):
        raise RuntimeError(f"internal error: {name}'s batch stride {stride} reached its tensor "
                           "map unstaged")
    return attrs.evolve(m, batch=batches.count, batch_stride=stride)
