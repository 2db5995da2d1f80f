"""grouped_mm's 2-D x 2-D on the host (``-p batch=grouped_k``; docs/guide/matmul.md, "Groups
along K"): the pre-pass kernel that writes each group's tensor maps (``pc_ws_group_maps``,
``cuda/gemm_group_maps_h100.cuh``), the global memory they go to, and the pre-pass's launch.

Why a pre-pass and not the host: the groups' K ranges are in ``offs`` on the device, and the call
never reads them (nothing syncs, a CUDA graph can capture it).  Why not the GEMM's producer: a
map the producer rewrote while its earlier copies through the old one may still be in flight is
a hazard no step of ours orders; a kernel boundary orders every write before the GEMM starts, and
the producer's acquire (the plan's ``descriptor_acquire``) drops any stale copy of a map from the
tensormap proxy.
"""
from __future__ import annotations

from typing import Any

from pipeline_core_nvidia_h100.cuda import GROUP_MAPS_KERNEL, group_maps_source
from pipeline_core_nvidia_h100.gemm_call import ELEM, CallPlan, OperandMap
from pipeline_core_nvidia_h100.kit.call import Built, Launch, load_kernel, stream_memory
from pipeline_core_nvidia_h100.kit.signature import TENSOR_MAP_TYPE, KernelSignature, params
from pipeline_core_nvidia_h100.runtime import _require

#: the pre-pass's key in the call's kernel table (one kernel per device, for every variant)
GROUP_MAPS = "group_maps"
#: bytes of one tensor map (CUtensorMap), and its threads per block
MAP_BYTES = 128
THREADS = 128

#: the pre-pass's parameters, in the kernel's order (``cuda/gemm_group_maps_h100.cuh``)
SIGNATURE = KernelSignature(kernel=GROUP_MAPS_KERNEL, params=params(
    ((TENSOR_MAP_TYPE, "tmA", "tensor_map"), (TENSOR_MAP_TYPE, "tmB", "tensor_map")),
    (("pcwg::TensorMap* __restrict__", "maps", "pointer"),
     ("const int* __restrict__", "offs", "pointer"), ("int", "groups", "int32"),
     ("int", "k", "int32"), ("unsigned long long", "a_ptr", "pointer"),
     ("unsigned long long", "b_ptr", "pointer"), ("long long", "a_step", "int64"),
     ("long long", "b_step", "int64"), ("int", "a_dim", "int32"), ("int", "b_dim", "int32"))))


def build(device: int) -> Any:
    """The pre-pass kernel on ``device`` (a small source: seconds to build)."""
    return load_kernel(group_maps_source(), GROUP_MAPS_KERNEL, device=device, smem=0)


def k_field(m: OperandMap, dtype: str) -> tuple[int, int]:
    """An operand map's K dimension (0: K-major, K is the map's inner dimension; 1: MN-major)
    and the bytes one step along K moves its global address."""
    elem = ELEM[dtype]
    return (0, elem) if m.major == "k" else (1, m.stride * elem)


def maps_memory(device: int, stream: int, groups: int) -> Any:
    """Global memory for ``groups`` groups' two maps on (device, stream) (the kit's
    ``stream_memory``: kept per stream, or a CUDA graph capture's own, so the launch is keyed by
    its address; torch's allocations are 512-byte aligned, the maps need 128).  Fresh memory
    needs nothing more: the pre-pass writes every map before the GEMM reads it."""
    return stream_memory(("group maps", groups), device, stream, lambda torch, dev: torch.empty(
        2 * groups * MAP_BYTES, dtype=torch.uint8, device=dev))


def prepass(built: Built, plan: CallPlan, tm_a: Any, tm_b: Any, maps: int, offs: int,
            a_ptr: int, b_ptr: int) -> Launch:
    """The pre-pass's launch: one thread per group and operand."""
    np = _require("numpy")
    v = plan.variant
    a_dim, a_step = k_field(plan.a, v.dtype)
    b_dim, b_step = k_field(plan.b, v.dtype)
    values = {"tmA": tm_a, "tmB": tm_b, "maps": maps, "offs": offs, "groups": plan.groups,
              "k": plan.k, "a_ptr": a_ptr, "b_ptr": b_ptr, "a_step": a_step, "b_step": b_step,
              "a_dim": a_dim, "b_dim": b_dim}
    blocks = -(-2 * plan.groups // THREADS)
    return Launch.of(built, (blocks, 1, 1), SIGNATURE.pack(values, np))
