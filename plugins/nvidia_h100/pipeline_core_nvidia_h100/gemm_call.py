"""The ``matmul()`` call's planning, with no GPU package: argument checks, layouts, tiles.

``matmul.py`` describes each torch tensor as a :class:`TensorInfo` (shape, strides in elements,
element type, address) and asks :func:`plan_call` what to launch: which major mode and tensor map
each operand takes, the general kernel's :class:`GemmVariant` and the grid.  Every refusal is one
line naming the argument and what would work (:class:`MatmulArgumentError`,
:class:`MatmulTypeError`), raised before anything reaches the GPU.  docs/guide/matmul.md is the
user's page for these rules.
"""
from __future__ import annotations

import attrs

from pipeline_core_nvidia_h100.warpspecialized import (ACTIVATIONS, BIASES, DTYPES, MN_CHUNK,
                                                       OUT_DTYPES, GemmVariant)

#: TMA reads global memory in 16-byte units: every stride but the innermost and the base address
#: must be multiples of 16 bytes.
TMA_ALIGN = 16
ELEM = {"bf16": 2, "fp16": 2, "fp32": 4}
#: torch's spelling of each element type, for the messages
TORCH_NAME = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


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
    loop)."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    min_k_tiles: int = 1


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


@attrs.frozen(kw_only=True)
class Tuning:
    """The launch techniques the call may use (docs/guide/matmul.md, "Speed"); each on by
    default, off for an ablation.  ``persistent``: at most one CTA per SM, each looping over
    output tiles in the grouped order (the kernel's tile loop, its ring running on across
    tiles); ``split_k``: a grid with fewer output tiles than half the SMs splits K
    (:func:`split_count`)."""

    persistent: bool = True
    split_k: bool = True
    #: CTAs per cluster (docs/guide/matmul.md, "Clusters"): 2 pairs CTAs on adjacent M tiles
    #: that multicast halves of their shared B tile, where the plan has at least two M tiles
    #: and no split (:func:`cluster_size`)
    cluster: int = 1


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


def _fail(name: str, why: str) -> MatmulArgumentError:
    return MatmulArgumentError(f"{name}: {why}")


def _cdiv(x: int, y: int) -> int:
    return -(-x // y)


def _aligned(stride: int, elem: int) -> bool:
    return stride > 0 and stride * elem % TMA_ALIGN == 0


def _padded(extent: int, elem: int) -> int:
    """A legal row stride for an array with one row (TMA never steps it, but encodes it)."""
    step = TMA_ALIGN // elem
    return max(step, _cdiv(extent, step) * step)


def _shape(t: TensorInfo) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def operand_map(name: str, t: TensorInfo, rows_dim: int, tile_rows: int, bk: int,
                read: bool = True) -> OperandMap:
    """The tensor map of operand ``name`` (``a`` [M, K]: rows_dim 0; ``b`` [K, N]: rows_dim 1).

    K-major (K contiguous) when TMA can describe it, else MN-major (M or N contiguous, read
    through wgmma's transpose mode); a size-1 dimension's stride never matters.  Neither: one
    line naming the operand, its strides and a copy that would work.  ``read`` False (an
    empty product, M, N or K of 0): no kernel runs, and the strides are not judged.
    """
    elem = ELEM[t.dtype]
    k_dim = 1 - rows_dim
    rows, k = t.shape[rows_dim], t.shape[k_dim]
    s_rows, s_k = t.strides[rows_dim], t.strides[k_dim]
    if not read:  # an empty product: no kernel runs, nothing is read
        return OperandMap(major="k", inner=k, outer=rows, stride=_padded(k, elem),
                          box_inner=bk, box_outer=tile_rows)
    if s_k == 1 or k == 1:  # K-major: rows of K elements
        if rows == 1 or _aligned(s_rows, elem):
            return OperandMap(major="k", inner=k, outer=rows,
                              stride=_padded(k, elem) if rows == 1 else s_rows,
                              box_inner=bk, box_outer=tile_rows)
    if s_rows == 1 or rows == 1:  # MN-major: rows of M (N) elements, one per k
        if k == 1 or _aligned(s_k, elem):
            return OperandMap(major="mn", inner=rows, outer=k,
                              stride=_padded(rows, elem) if k == 1 else s_k,
                              box_inner=MN_CHUNK, box_outer=bk)
    step = TMA_ALIGN // elem
    shape = list(t.shape)
    padded = [*shape]
    padded[1] = _cdiv(shape[1], step) * step
    raise _fail(name, f"shape {_shape(t)} with strides {tuple(t.strides)} cannot be read by TMA: "
                      f"one dimension must be contiguous (stride 1) and the other's stride a "
                      f"positive multiple of {step} elements ({TMA_ALIGN} bytes); copy it into "
                      f"padded rows: {name}.new_empty({padded[0]}, {padded[1]})"
                      f"[:, :{shape[1]}].copy_({name})")


def _check_tensor(name: str, t: TensorInfo, dims: int, allowed: tuple[str, ...]) -> None:
    if t.dtype not in allowed:
        fix = ("use scaled_mm for fp8 (not yet in this release)" if "float8" in t.dtype
               else f"pass {name}.to(torch.bfloat16)")
        raise MatmulTypeError(f"{name}: element type {t.dtype} is not one of "
                              f"{', '.join(TORCH_NAME[d] for d in allowed)}; {fix}")
    if len(t.shape) != dims:
        what = "[M, K] / [K, N]" if dims == 2 else "[N]"
        raise _fail(name, f"{len(t.shape)}-D tensor of shape {_shape(t)}; matmul takes a "
                          f"{dims}-D {what} tensor (batched inputs are not supported yet: "
                          f"loop over the batch or reshape to 2-D)")
    if t.ptr is not None and t.ptr % TMA_ALIGN and dims == 2:
        raise _fail(name, f"its data starts at an address that is not {TMA_ALIGN}-byte aligned "
                          f"(a view at an odd offset), which TMA cannot read; pass "
                          f"{name}.clone()")


def plan_call(a: TensorInfo, b: TensorInfo, *, bias: TensorInfo | None = None,
              activation: str | None = None, out_dtype: str | None = None,
              out: TensorInfo | None = None, tile: TileShape = TileShape(), sms: int = 0,
              tuning: Tuning = Tuning()) -> CallPlan:
    """Check ``matmul(a, b, bias=, activation=, out_dtype=, out=)``'s arguments and plan the
    launch (torch's semantics: ``a [M, K] @ b [K, N]``, bias per column, then activation).
    ``sms``: the device's SM count, which the persistent grid and the split are sized by (0:
    not known, one CTA per output tile, no split)."""
    _check_tensor("a", a, 2, DTYPES)
    _check_tensor("b", b, 2, DTYPES)
    if b.dtype != a.dtype:
        raise MatmulTypeError(f"b: element type {TORCH_NAME[b.dtype]} differs from a's "
                              f"{TORCH_NAME[a.dtype]}; pass b.to({TORCH_NAME[a.dtype]})")
    if a.device != b.device:
        raise _fail("b", f"on {b.device}, a on {a.device}; pass b.to('{a.device}')")
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
        if bias.shape[0] != n:
            raise _fail("bias", f"length {bias.shape[0]}, but b has N={n} columns: bias must "
                                f"be [{n}]")
        if n > 1 and bias.strides[0] != 1:
            raise _fail("bias", f"stride {bias.strides[0]}; it must be contiguous: pass "
                                "bias.contiguous()")
        if bias.device != a.device:
            raise _fail("bias", f"on {bias.device}, a on {a.device}; pass bias.to('{a.device}')")
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
            raise _fail("out", f"shape {_shape(out)}; the product is [{m}, {n}]")
        if out.device != a.device:
            raise _fail("out", f"on {out.device}, a on {a.device}")
        ldc = out.strides[0] if m > 1 else n
        if (n > 1 and out.strides[1] != 1) or ldc < n:
            raise _fail("out", f"strides {tuple(out.strides)}: out must be row-major (column "
                               f"stride 1, row stride >= {n}); pass a torch.empty({m}, {n}) "
                               f"and copy")
    read = 0 not in (m, n, k)
    a_map = operand_map("a", a, 0, tile.bm, tile.bk, read)
    b_map = operand_map("b", b, 1, tile.bn, tile.bk, read)
    tiles_m, tiles_n = _cdiv(m, tile.bm), _cdiv(n, tile.bn)
    tiles = tiles_m * tiles_n
    k_tiles = max(_cdiv(k, tile.bk), tile.min_k_tiles)
    splits = split_count(tiles, k_tiles, sms) if tuning.split_k else 1
    if splits > 1:  # one split's K tiles; the last split's past K are zero-filled loads
        k_tiles = max(_cdiv(k_tiles, splits), tile.min_k_tiles)
    cluster = cluster_size(tiles_m, splits, tuning)
    variant = GemmVariant(dtype=a.dtype, a_major=a_map.major, b_major=b_map.major,
                          out_dtype=out_dtype or a.dtype, bias=bias_kind,
                          activation=activation or "none", tails=True, split_k=splits > 1,
                          cluster=cluster)
    grid = min(tiles, sms) if tuning.persistent and sms > 0 else tiles
    if cluster > 1:  # whole clusters of tile pairs; each CTA loads its share of the B tile
        pairs = _cdiv(tiles_m, cluster) * tiles_n
        grid = cluster * (min(pairs, sms // cluster) if tuning.persistent and sms > 0 else pairs)
        if b_map.major == "k":
            b_map = attrs.evolve(b_map, box_outer=b_map.box_outer // cluster)
    return CallPlan(m=m, n=n, k=k, m_pad=tiles_m * tile.bm, n_pad=tiles_n * tile.bn,
                    k_pad=k_tiles * tile.bk, variant=variant, a=a_map, b=b_map, ldc=ldc,
                    grid=grid, splits=splits)
