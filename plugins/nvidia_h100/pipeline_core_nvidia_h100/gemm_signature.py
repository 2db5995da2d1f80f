"""The warp-specialized GEMM's kernel signatures: what ``emit_wgmma`` writes as the kernel's
parameter list and what ``matmul_call`` packs, from one list each (kit.signature says why).

The default kernel (``GemmVariant`` not general; the benchmarks' ``WsLauncher``) takes A's and
B's tensor maps, C and the tile-multiple sizes.  The general kernel (the call's) adds the bias,
the padded sizes the loops run over and the true ones the stores are clipped to; each variant
adds its own: split-K's workspace and counters, the scales, the batch stride, the TMA store's
C map.
"""
from __future__ import annotations

import functools

from pipeline_core_nvidia_h100.kit.signature import TENSOR_MAP_TYPE, KernelSignature, params
from pipeline_core_nvidia_h100.warpspecialized import GROUPED, GROUPED_K, GemmVariant

KERNEL_NAME = "pc_ws_gemm"
_AB = ((TENSOR_MAP_TYPE, "tmA", "tensor_map"), (TENSOR_MAP_TYPE, "tmB", "tensor_map"))

#: The default kernel's (C[M,N] = A . B^T, tile multiples only).
DEFAULT_SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=params(
    _AB,
    (("unsigned short* __restrict__", "C", "pointer"), ("int", "M", "int32"),
     ("int", "N", "int32"), ("int", "K", "int32"))))
#: The general kernel's: ``M``, ``N``, ``K`` rounded up to whole tiles, ``m``, ``n`` C's own,
#: ``ldc`` C's row stride.
GENERAL_SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=params(
    _AB,
    (("void* __restrict__", "C", "pointer"), ("const void* __restrict__", "bias", "pointer"),
     ("int", "M", "int32"), ("int", "N", "int32"), ("int", "K", "int32"), ("int", "m", "int32"),
     ("int", "n", "int32")),
    (("long long", "ldc", "int64"),)))
#: split-K's: the fp32 workspace (``gridDim.y`` slices of TILES x BM x BN partial sums) and
#: one arrival counter per output tile, zero between launches
SPLIT_PARAMS = params((("float* __restrict__", "ws", "pointer"),
                       ("unsigned* __restrict__", "counters", "pointer")), new_line=True)
#: stream-K's: split-K's workspace (2 x the grid's BM x BN slots: each CTA's first and last
#: stream-K tile) and counters (one per stream-K tile), and the stream-K tiles' count
STREAM_K_PARAMS = SPLIT_PARAMS + params((("int", "sk_tiles", "int32"),))
#: the scaled kernel's (``-p scale``) fp32 scales: one each (``tensor``), or scale_a [m] and
#: scale_b [n] (``row``); read on the device, so the host never syncs on them
SCALE_PARAMS = params((("const float* __restrict__", "scale_a", "pointer"),
                       ("const float* __restrict__", "scale_b", "pointer")), new_line=True)
#: the batched kernel's (``-p batch``) bytes between one batch's output and the next
BATCH_PARAMS = params((("long long", "c_batch", "int64"),), new_line=True)
#: the grouped kernel's (``-p batch=grouped`` / ``grouped_n``): the groups' ends along the jagged
#: dimension (torch's int32 ``offs``, read on the device) and their count
GROUP_PARAMS = params((("const int* __restrict__", "offs", "pointer"),
                       ("int", "groups", "int32")), new_line=True)
#: grouped_mm's 2-D x 2-D kernel's (``-p batch=grouped_k``): the groups' ends along K (``offs``),
#: their count, the groups' tensor maps (A's and B's per group, written by the pre-pass), K's true
#: extent (the ends are clamped to it) and the bytes from one group's output [M, N] to the next
GROUP_K_PARAMS = params((("const int* __restrict__", "offs", "pointer"),
                         ("int", "groups", "int32"),
                         ("const pcwg::TensorMap* __restrict__", "maps", "pointer"),
                         ("int", "k", "int32"), ("long long", "c_batch", "int64")), new_line=True)
#: a scaled grouped kernel's elements between one group's scales and the next (scale_b [G, N]
#: along M, scale_a [G, M] along N; torch._scaled_grouped_mm's row-wise scales)
GROUP_SCALE_PARAMS = params((("long long", "scale_group", "int64"),))
#: the cp.async producer's (``-p load=cp_async``): A's and B's first rows, their row strides
#: and K in bytes (the tensor maps stay in the list, unread, so the call packs them alike)
CP_ASYNC_PARAMS = params((("const char* __restrict__", "a_ptr", "pointer"),
                          ("const char* __restrict__", "b_ptr", "pointer"),
                          ("long long", "a_ld", "int64"), ("long long", "b_ld", "int64"),
                          ("long long", "k_bytes", "int64")), new_line=True)
#: the TMA-store kernel's C tensor map (box SCOLS x 64, 128-byte swizzle)
STORE_PARAMS = params(((TENSOR_MAP_TYPE, "tmC", "tensor_map"),), new_line=True)


@functools.cache
def gemm_signature(v: GemmVariant) -> KernelSignature:
    """The kernel signature of variant ``v``: the default kernel's, or the general one's with
    each of ``v``'s extra parameters in order."""
    if not v.general:
        return DEFAULT_SIGNATURE
    return (GENERAL_SIGNATURE + (SPLIT_PARAMS if v.split_k else ())
            + (STREAM_K_PARAMS if v.stream_k else ())
            + (SCALE_PARAMS if v.scale != "none" else ())
            + (BATCH_PARAMS if v.strided_batch else ())
            + (GROUP_PARAMS if v.batch in GROUPED else ())
            + (GROUP_K_PARAMS if v.batch == GROUPED_K else ())
            + (GROUP_SCALE_PARAMS if v.batch in GROUPED and v.scale != "none" else ())
            + (STORE_PARAMS if v.store == "tma" else ())
            + (CP_ASYNC_PARAMS if v.load == "cp_async" else ()))
