"""The CUDA building blocks an emitter pastes into a kernel: one header, shipped as package data.

``pipeline_h100.cuh`` holds the device helpers (cp.async 16 B + commit + ``wait_group<N>``,
``ldmatrix.x4``, ``mma.sync`` m16n8k16 bf16, the 16-byte-chunk XOR swizzle, ``bar.sync`` and
``barrier.sync``).  It has no ``#include``, so the same text builds under nvcc and NVRTC.
"""
from __future__ import annotations

from importlib import resources

HEADER_NAME = "pipeline_h100.cuh"
#: The wgmma family's helpers (mbarrier, TMA, wgmma, setmaxnreg); pasted after HEADER_NAME.
WGMMA_HEADER_NAME = "wgmma_h100.cuh"
#: Largest ``cp.async.wait_group`` value the SASS encodes (``DEPBAR.LE SB0`` has 6 bits).
MAX_WAIT_GROUP = 63
#: An include guard: kept in the shipped header (``nvcc -I`` may include it) and dropped from
#: a pasted copy, where it guards nothing and nvcc warns "#pragma once in main file".
_GUARD = "#pragma once\n"


def pasted(package: str, name: str) -> str:
    """The text of the device header ``name`` shipped as package data of ``package``, ready to
    paste into one kernel source (the one reader every family's emitter uses: its include
    guard dropped, since the paste makes it part of a single translation unit)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8").replace(
        _GUARD, "", 1)


def header_source() -> str:
    """The text of ``pipeline_h100.cuh`` (paste it at the top of a kernel's source)."""
    return pasted(__name__, HEADER_NAME)


def wgmma_header_source() -> str:
    """The text of ``wgmma_h100.cuh`` (paste it after :func:`header_source`)."""
    return pasted(__name__, WGMMA_HEADER_NAME)


def header_path() -> str:
    """A filesystem path to the header, for ``nvcc -I`` (valid while the package is installed)."""
    return str(resources.files(__name__).joinpath(HEADER_NAME))


#: The general GEMM kernel's helpers (MN-major descriptors, the fused epilogue); pasted after
#: WGMMA_HEADER_NAME, only into the kernel ``matmul()`` launches.
GEMM_CALL_HEADER_NAME = "gemm_call_h100.cuh"


def gemm_call_header_source() -> str:
    """The text of ``gemm_call_h100.cuh`` (paste it after :func:`wgmma_header_source`)."""
    return pasted(__name__, GEMM_CALL_HEADER_NAME)


#: The scaled and batched variants' helpers (the scale factors, ScaleNone among them, the 3D tile
#: copy); pasted after GEMM_CALL_HEADER_NAME into every general GEMM kernel.
GEMM_SCALE_BATCH_HEADER_NAME = "gemm_scale_batch_h100.cuh"


def gemm_scale_batch_header_source() -> str:
    """The text of ``gemm_scale_batch_h100.cuh`` (paste it after
    :func:`gemm_call_header_source`)."""
    return pasted(__name__, GEMM_SCALE_BATCH_HEADER_NAME)


#: A 2-CTA cluster's helpers (rank, cluster barrier, peer arrival, multicast TMA); pasted after
#: GEMM_CALL_HEADER_NAME, only into a kernel launched as clusters.
CLUSTER_HEADER_NAME = "cluster_h100.cuh"


def cluster_header_source() -> str:
    """The text of ``cluster_h100.cuh`` (paste it after :func:`gemm_call_header_source`)."""
    return pasted(__name__, CLUSTER_HEADER_NAME)


#: The general GEMM's device math (operand descriptors, the fused epilogue, split-K's slices) as
#: device functions the emitted frame calls; pasted after GEMM_SCALE_BATCH_HEADER_NAME.
GEMM_WGMMA_HEADER_NAME = "gemm_wgmma_h100.cuh"


def gemm_wgmma_header_source() -> str:
    """The text of ``gemm_wgmma_h100.cuh`` (paste it after
    :func:`gemm_scale_batch_header_source`)."""
    return pasted(__name__, GEMM_WGMMA_HEADER_NAME)


#: The grouped GEMM's device tile scheduler (the groups' table from ``offs``, a tile's group and
#: place, the operands' loads at the tile's group); pasted after GEMM_WGMMA_HEADER_NAME, only into
#: a grouped kernel (``-p batch=grouped`` / ``grouped_n``).
GEMM_GROUPED_HEADER_NAME = "gemm_grouped_h100.cuh"


def gemm_grouped_header_source() -> str:
    """The text of ``gemm_grouped_h100.cuh`` (paste it after :func:`gemm_wgmma_header_source`)."""
    return pasted(__name__, GEMM_GROUPED_HEADER_NAME)


#: The cp.async producer's copies and arrival (``GemmVariant.load = "cp_async"``); pasted after
#: GEMM_WGMMA_HEADER_NAME, only into a kernel whose producer loads by cp.async.
GEMM_CPASYNC_HEADER_NAME = "gemm_cpasync_h100.cuh"


def gemm_cpasync_header_source() -> str:
    """The text of ``gemm_cpasync_h100.cuh`` (paste it after :func:`gemm_wgmma_header_source`)."""
    return pasted(__name__, GEMM_CPASYNC_HEADER_NAME)


#: grouped_mm's 2-D x 2-D (``-p batch=grouped_k``): each group's K range, its output tile, the
#: producer's acquire of the group's tensor maps and the pre-pass's writing of them; pasted after
#: GEMM_WGMMA_HEADER_NAME into a grouped_k kernel, and into the pre-pass's own source.
GEMM_GROUP_K_HEADER_NAME = "gemm_group_k_h100.cuh"
#: the pre-pass kernel ``pc_ws_group_maps`` (one tensor map per group and operand)
GROUP_MAPS_KERNEL_NAME = "gemm_group_maps_h100.cuh"
GROUP_MAPS_KERNEL = "pc_ws_group_maps"


def gemm_group_k_header_source() -> str:
    """The text of ``gemm_group_k_h100.cuh`` (paste it after :func:`gemm_wgmma_header_source`)."""
    return pasted(__name__, GEMM_GROUP_K_HEADER_NAME)


def group_maps_source() -> str:
    """The pre-pass kernel's whole source: the base and wgmma headers (its types), the grouped_k
    header (the K ranges and the map writer) and the kernel, small enough to build in seconds."""
    kernel = pasted(__name__, GROUP_MAPS_KERNEL_NAME)
    return "\n".join([header_source(), wgmma_header_source(), gemm_group_k_header_source(),
                      kernel])


#: Stream-K's device tile scheduler and fixup reads (``GemmVariant.stream_k``); pasted after
#: GEMM_WGMMA_HEADER_NAME, only into a stream-K kernel.
GEMM_STREAM_K_HEADER_NAME = "gemm_stream_k_h100.cuh"


def gemm_stream_k_header_source() -> str:
    """The text of ``gemm_stream_k_h100.cuh`` (paste it after :func:`gemm_wgmma_header_source`)."""
    return pasted(__name__, GEMM_STREAM_K_HEADER_NAME)
