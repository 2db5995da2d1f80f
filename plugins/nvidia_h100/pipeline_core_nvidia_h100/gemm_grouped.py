"""The ``grouped_mm()`` call's planning, with no GPU package: torch._grouped_mm's semantics.

``grouped_mm(a, b, *, offs=None, bias=None, out_dtype=None)`` (``torch.nn.functional.grouped_mm``)
runs a mixture of experts' GEMMs in one launch.  The groups split a jagged dimension at their
ends ``offs`` (int32 [G], cumulative, on the device: the plan never reads them, so nothing syncs
and a CUDA graph can capture the call):

* 2-D x 3-D: ``a [T, K]`` (tokens sorted by group) @ ``b [G, K, N]`` -> ``[T, N]``; group g's
  rows ``offs[g-1] .. offs[g]`` times ``b[g]`` (the MoE forward): ``-p batch=grouped``;
* 3-D x 2-D: ``a [G, M, K]`` @ ``b [K, N_total]`` -> ``[M, N_total]``; group g's columns:
  ``-p batch=grouped_n``;
* 2-D x 2-D: ``a [M, K_total]`` @ ``b [K_total, N]`` -> ``[G, M, N]``; group g's K range
  ``offs[g-1] .. offs[g]``: ``a[:, k0:k1] @ b[k0:k1, :]`` (the MoE weight gradient), an empty
  range a group of zeros: ``-p batch=grouped_k`` (each group's K tail read through a tensor
  map of its own, written on the device: docs/guide/matmul.md, "Groups along K");
* 3-D x 3-D, no offs: a batched matmul (``gemm_call.plan_call``'s batch on grid z).

The epilogue stores through shared memory by TMA (``Tuning.tma_store``, where the candidate's
shared memory takes the staging: ``matmul_call``): along K every tile through a 3-D map of C,
along M / N a consumer's rows of a tile inside its group through C's 2-D map, those crossing its
end directly (docs/guide/matmul.md, "Grouped GEMM").  Rows (columns) past ``offs[-1]`` are not
written, as torch's.  Each operand is row- or
column-major with 16-byte aligned strides, as torch takes it (``gemm_call.operand_map``); the
output's rows are padded to 16 bytes, as torch's.  ``scaled_grouped_mm`` (fp8 e4m3, row-wise
scales, torch._scaled_grouped_mm's) plans here too, with ``scales``.  Every refusal is one line
naming the argument and a fix.  docs/guide/matmul.md, "Grouped GEMM".
"""
from __future__ import annotations

import attrs

from pipeline_core_nvidia_h100.gemm_call import (ELEM, MATMUL_DTYPES, TMA_ALIGN, TORCH_NAME,
                                                 CallPlan, MatmulTypeError, OperandMap,
                                                 TensorInfo, TileShape, Tuning, _cdiv,
                                                 _check_tensor, _fail, _shape, check_vector,
                                                 operand_map, plan_call, store_map)
from pipeline_core_nvidia_h100.gemm_scaled import _k_major
from pipeline_core_nvidia_h100.gemm_staging import aligned, major
from pipeline_core_nvidia_h100.warpspecialized import (GROUPED_K, MAX_GROUPS, OUT_DTYPES,
                                                       GemmVariant, k_tile)

#: scaled_grouped_mm's default output type (torch._scaled_grouped_mm's only one)
SCALED_OUT = "bf16"


def _view(t: TensorInfo) -> TensorInfo:
    """A 3-D operand's matrix of one group (its last two dimensions)."""
    return attrs.evolve(t, shape=t.shape[1:], strides=t.strides[1:])


def _grouped_map(name: str, t: TensorInfo, m: OperandMap, read: bool) -> OperandMap:
    """Operand ``name``'s map of its groups (``t`` 3-D): a 3-D map, batch the group, even for
    one group (the kernel reads it at the tile's group); the batch stride a positive multiple
    of 16 bytes, as TMA's every stride but the innermost."""
    groups, stride = t.shape[0], t.strides[0]
    if groups == 1 or not read:  # one group's batch stride is never stepped: any aligned one
        stride = m.stride * max(m.outer, 1)
    elif not aligned(stride, ELEM[t.dtype]):
        raise _fail(name, f"batch stride {stride} is not a positive multiple of "
                          f"{TMA_ALIGN // ELEM[t.dtype]} elements ({TMA_ALIGN} bytes), which TMA "
                          f"needs between groups; pass {name}.contiguous()")
    return attrs.evolve(m, batch=groups, batch_stride=stride)


def _matrix_maps(a: TensorInfo, b: TensorInfo, tile: TileShape, read: bool,
                 whose: str) -> tuple[TileShape, OperandMap, OperandMap]:
    """The K tile of a's type and the maps of matrices ``a`` [M, K] and ``b`` [K, N], each
    (``read``: a kernel runs) with one dimension contiguous and the other 16-byte aligned, as
    torch._grouped_mm reads them (``whose``: "each group's " for a 3-D operand's matrices)."""
    tile = attrs.evolve(tile, bk=k_tile(a.dtype))
    for name, mat, rows_dim in (("a", a, 0), ("b", b, 1)):
        if read and major(mat.shape, mat.strides, rows_dim, ELEM[mat.dtype]) is None:
            raise _fail(name, f"strides {tuple(mat.strides)} of {whose}{_shape(mat)} "
                              f"matrix: grouped GEMMs read one dimension contiguous and the "
                              f"other {TMA_ALIGN}-byte aligned, as torch._grouped_mm does; "
                              f"pass {name}.contiguous() with that dimension padded to a "
                              f"multiple of {TMA_ALIGN // ELEM[mat.dtype]}")
    return (tile, operand_map("a", a, 0, tile.bm, tile.bk, read),
            operand_map("b", b, 1, tile.bn, tile.bk, read))


def _check_offs(offs: TensorInfo, groups: int, who: str, a: TensorInfo,
                table: bool = True) -> None:
    """``offs``: int32 [G] (G the 3-D operand ``who``'s groups), contiguous, beside ``a``;
    ``table``: the kernel keeps the groups' table in shared memory (at most MAX_GROUPS)."""
    if offs.dtype != "int32":
        raise MatmulTypeError(f"offs: element type {TORCH_NAME.get(offs.dtype, offs.dtype)} is "
                              "not torch.int32; pass offs.to(torch.int32)")
    if len(offs.shape) != 1:
        raise _fail("offs", f"{len(offs.shape)}-D tensor of shape {_shape(offs)}; takes the "
                            "groups' cumulative ends, a 1-D [G]")
    check_vector("offs", offs, groups, f"{who} has {groups} groups ({who}.shape[0])", a)
    if table and groups > MAX_GROUPS:
        raise _fail("offs", f"{groups} groups, over the {MAX_GROUPS} one launch takes (each "
                            "CTA's table of them); split the groups over several calls")


def _check_scales(scales: tuple[TensorInfo, TensorInfo], a: TensorInfo, b: TensorInfo,
                  along_n: bool) -> int:
    """torch._scaled_grouped_mm's row-wise scales, fp32: the 2-D operand's one per row (1-D,
    contiguous), the 3-D operand's one per group and row ([G, rows], rows contiguous); returns
    the elements between one group's scales and the next."""
    lengths = {"scale_a": a.shape[-2], "scale_b": b.shape[-1]}
    for name, t, of in (("scale_a", scales[0], a), ("scale_b", scales[1], b)):
        if t.dtype != "fp32":
            raise MatmulTypeError(f"{name}: element type {TORCH_NAME.get(t.dtype, t.dtype)} is "
                                  f"not torch.float32; pass {name}.float()")
        if t.device != a.device:
            raise _fail(name, f"on {t.device}, a on {a.device}; pass {name}.to('{a.device}')")
        rows = lengths[name]
        want = (rows,) if len(of.shape) == 2 else (of.shape[0], rows)
        if tuple(t.shape) != want:
            raise _fail(name, f"shape {_shape(t)}: row-wise scales are one per row of a 2-D "
                              f"operand and one per group and row of a 3-D one: {name} must be "
                              f"{list(want)}")
        if rows > 1 and t.strides[-1] != 1:
            raise _fail(name, f"strides {tuple(t.strides)}: a row-wise scale's rows must be "
                              f"contiguous; pass {name}.contiguous()")
    per_group = scales[0] if along_n else scales[1]
    return per_group.strides[0] if per_group.shape[0] > 1 else 0


def plan_grouped(a: TensorInfo, b: TensorInfo, offs: TensorInfo | None, *,
                 bias: TensorInfo | None = None, out_dtype: str | None = None,
                 tile: TileShape = TileShape(), sms: int = 0, tuning: Tuning = Tuning(),
                 scales: tuple[TensorInfo, TensorInfo] | None = None) -> CallPlan:
    """Check ``grouped_mm(a, b, offs=, bias=, out_dtype=)``'s arguments (``scales``: those of
    ``scaled_grouped_mm``) and plan the launch (see the module).  ``sms``: the device's SM
    count, which the persistent grid is sized by (0: not known, a CTA per possible tile)."""
    allowed = ("e4m3",) if scales is not None else MATMUL_DTYPES
    _check_tensor("a", a, 2, allowed, batched=True)
    _check_tensor("b", b, 2, allowed, batched=True)
    if b.dtype != a.dtype:
        raise MatmulTypeError(f"b: element type {TORCH_NAME[b.dtype]} differs from a's "
                              f"{TORCH_NAME[a.dtype]}; pass b.to({TORCH_NAME[a.dtype]})")
    if a.device != b.device:
        raise _fail("b", f"on {b.device}, a on {a.device}; pass b.to('{a.device}')")
    a_2d, b_2d = len(a.shape) == 2, len(b.shape) == 2
    if not (a_2d and b_2d) and a.shape[-1] != b.shape[-2]:
        raise _fail("b", f"shape {_shape(b)} does not match a {_shape(a)}: b.shape[-2] must be "
                         f"a's K={a.shape[-1]}")
    if bias is not None:
        raise _fail("bias", "grouped_mm takes none (torch._grouped_mm refuses it too); add it to "
                            "the result")
    if out_dtype is not None and out_dtype not in OUT_DTYPES:
        raise MatmulTypeError(f"out_dtype: {out_dtype} is not one of "
                              f"{', '.join(TORCH_NAME[d] for d in OUT_DTYPES)}")
    if offs is None and (a_2d or b_2d):
        raise _fail("offs", "None, but a 2-D operand is split into groups: pass offs, the "
                            "groups' cumulative ends (int32 [G], on the device)")
    if offs is not None and not (a_2d or b_2d):
        raise _fail("offs", "given with 3-D a and b, a batched matmul with no jagged "
                            "dimension: pass offs=None")
    if a_2d and b_2d:
        assert offs is not None  # for mypy: a 2-D operand needs offs (checked above)
        return _plan_along_k(a, b, offs, out_dtype=out_dtype, tile=tile, sms=sms,
                             tuning=tuning, scaled=scales is not None)
    if not a_2d and not b_2d:
        if a.shape[0] != b.shape[0]:
            raise _fail("b", f"{b.shape[0]} groups, a has {a.shape[0]}: grouped_mm broadcasts "
                             f"none; pass b of shape [{a.shape[0]}, {b.shape[1]}, {b.shape[2]}]")
        if scales is not None:
            raise _fail("a", "3-D with a 3-D b under scaled_grouped_mm is not supported yet: "
                             "run torch._scaled_grouped_mm for it")
        return plan_call(a, b, out_dtype=out_dtype, tile=tile, sms=sms,
                         tuning=attrs.evolve(tuning, split_k=False))
    assert offs is not None  # for mypy: a 2-D operand needs offs (checked above)
    along_n = b_2d  # 3-D a, 2-D b: the groups split N
    grouped = a if along_n else b
    groups = grouped.shape[0]
    _check_offs(offs, groups, "a" if along_n else "b", a)
    a_mat, b_mat = (_view(a), b) if along_n else (a, _view(b))
    (m, k), n = a_mat.shape, b_mat.shape[1]
    scale, scale_group = "none", 0
    if scales is not None:
        if 0 not in (m, n, k):
            _k_major("a", a_mat, 0)
            _k_major("b", b_mat, 1)
        scale, scale_group = "row", _check_scales(scales, a, b, along_n)
        out_dtype = out_dtype or SCALED_OUT
    out_dtype = out_dtype or a.dtype
    read = 0 not in (m, n, k, groups)
    tile, a_map, b_map = _matrix_maps(a_mat, b_mat, tile, read, "each group's ")
    if along_n:
        a_map = _grouped_map("a", a, a_map, read)
    else:
        b_map = _grouped_map("b", b, b_map, read)
    tiles_m, tiles_n = _cdiv(m, tile.bm), _cdiv(n, tile.bn)
    # the most tiles the groups can have: each group's tail tile on top of the whole ones
    if along_n:
        most = tiles_m * (n // tile.bn + min(groups, n))
    else:
        most = tiles_n * (m // tile.bm + min(groups, m))
    grid = min(most, sms) if tuning.persistent and sms > 0 else most
    step = TMA_ALIGN // ELEM[out_dtype]
    ldc = _cdiv(n, step) * step  # torch's output: rows padded to 16 bytes
    # the TMA store through C's 2-D map where a consumer's rows of a tile lie inside its group,
    # the direct store where they cross its end (chosen per tile on the device)
    c_map = store_map(m, n, ldc, out_dtype, tile) if tuning.tma_store and read else None
    variant = GemmVariant(dtype=a.dtype, a_major=a_map.major, b_major=b_map.major,
                          out_dtype=out_dtype, tails=True, scale=scale,
                          batch="grouped_n" if along_n else "grouped",
                          store="tma" if c_map is not None else "direct")
    k_tiles = max(_cdiv(k, tile.bk), tile.min_k_tiles)
    return CallPlan(m=m, n=n, k=k, m_pad=tiles_m * tile.bm, n_pad=tiles_n * tile.bn,
                    k_pad=k_tiles * tile.bk, variant=variant, a=a_map, b=b_map, ldc=ldc,
                    grid=grid, out_shape=(m, n), groups=groups, scale_group=scale_group,
                    c=c_map)


def _plan_along_k(a: TensorInfo, b: TensorInfo, offs: TensorInfo, *, out_dtype: str | None,
                  tile: TileShape, sms: int, tuning: Tuning, scaled: bool) -> CallPlan:
    """2-D x 2-D (groups along K, the weight gradient): ``a [M, K_total]``, ``b [K_total, N]``,
    ``offs [G]`` -> ``[G, M, N]`` (rows padded to 16 bytes, as torch's).  Every group has the
    same ``tiles_m x tiles_n`` output tiles; its K tiles are its own (``offs`` on the device).
    The tensor maps planned here are the templates the kernel's pre-pass copies per group,
    its K start and extent replaced (``pcgc::group_maps``), so a group's last K tile reads
    zeros past its end, not the next group's K.  A K-major operand's group starts 16-byte
    aligned (``offs`` multiples of 16 bytes, as torch requires; the pre-pass traps else)."""
    if a.shape[1] != b.shape[0]:
        raise _fail("b", f"shape {_shape(b)} does not match a {_shape(a)}: with a 2-D a and a "
                         f"2-D b the groups split K, and b.shape[0] must be a's K="
                         f"{a.shape[1]}")
    if scaled:
        raise _fail("b", "2-D with a 2-D a (groups along K) under scaled_grouped_mm is not "
                         "supported yet: run torch._scaled_grouped_mm for it")
    groups = offs.shape[0] if len(offs.shape) == 1 else 0
    _check_offs(offs, groups, "offs", a, table=False)
    (m, k), n = a.shape, b.shape[1]
    out_dtype = out_dtype or a.dtype
    read = 0 not in (m, n, k, groups)
    tile, a_map, b_map = _matrix_maps(a, b, tile, read, "")
    tiles_m, tiles_n = _cdiv(m, tile.bm), _cdiv(n, tile.bn)
    most = groups * tiles_m * tiles_n
    grid = min(most, sms) if tuning.persistent and sms > 0 else most
    step = TMA_ALIGN // ELEM[out_dtype]
    ldc = _cdiv(n, step) * step  # torch's output: rows padded to 16 bytes
    # the TMA store of every tile through a 3-D map of C [G, M, N] (it clips each group's tails)
    c_map = store_map(m, n, ldc, out_dtype, tile) if tuning.tma_store and read else None
    if c_map is not None:
        c_map = attrs.evolve(c_map, batch=groups, batch_stride=m * ldc)
    variant = GemmVariant(dtype=a.dtype, a_major=a_map.major, b_major=b_map.major,
                          out_dtype=out_dtype, tails=True, batch=GROUPED_K,
                          store="tma" if c_map is not None else "direct")
    k_tiles = max(_cdiv(k, tile.bk), tile.min_k_tiles)
    return CallPlan(m=m, n=n, k=k, m_pad=tiles_m * tile.bm, n_pad=tiles_n * tile.bn,
                    k_pad=k_tiles * tile.bk, variant=variant, a=a_map, b=b_map, ldc=ldc,
                    grid=grid, out_shape=(groups, m, n), groups=groups, c_batch=m * ldc,
                    c=c_map)
