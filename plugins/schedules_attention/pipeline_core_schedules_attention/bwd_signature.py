"""The attention backward's main kernel signature: what ``emit_attention_bwd`` writes as the
kernel's parameter list and what ``bwd_call`` packs, from one list (the kit's
``KernelSignature`` says why).  Q, dO, K, V: rank-4 tensor maps of their own strides
(layout.bhsd_map; a box past S reads zeros, the tails the kernel masks); LSE and delta: maps
over every query row's fp32; dQ's fp32 accumulator by address; dK and dV by their addresses
(packed per call: the call's two allocations, two tensors because the backward op's outputs
may not alias each other; written through their strides, k's and v's layouts); then the
sizes, the dQ accumulator's rows per head, the query heads per KV head, the scale (and it
folded with log2 e), the KV heads (``HKV``: KV head ``bhk`` is head ``bhk % HKV`` of batch
``bhk / HKV``, its TMA coordinates), the tile order (``hg``, ``snake``: tile_order.py; the
deterministic kernel's order is its rule's and it reads neither) and dK's and dV's strides in
elements (batch, head, row).
The deterministic kernel (``ORDERED_SIGNATURE``) takes the dQ adds' turn counters after the
accumulator, one int32 per (batch, query head, query block), zeroed per call (packed per call
beside dK and dV)."""
from __future__ import annotations

from pipeline_core_nvidia_h100.kit_api import TENSOR_MAP_TYPE as _MAP
from pipeline_core_nvidia_h100.kit_api import KernelSignature, kernel_params

KERNEL_NAME = "pc_flash_attention_bwd"



def _signature(ordered: bool) -> KernelSignature:
    turns = (("int* __restrict__", "dQsem", "pointer"),) if ordered else ()
    return KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
        ((_MAP, "tmQ", "tensor_map"), (_MAP, "tmK", "tensor_map")),
        ((_MAP, "tmV", "tensor_map"), (_MAP, "tmDO", "tensor_map")),
        ((_MAP, "tmLSE", "tensor_map"), (_MAP, "tmDelta", "tensor_map")),
        (("float* __restrict__", "dQacc", "pointer"), *turns,
         ("unsigned short* __restrict__", "dK", "pointer"),
         ("unsigned short* __restrict__", "dV", "pointer")),
        (("int", "BHK", "int32"), ("int", "Sq", "int32"), ("int", "Sk", "int32"),
         ("int", "SQP", "int32"), ("int", "group", "int32"), ("float", "scale", "float32"),
         ("float", "scale_log2", "float32"), ("int", "HKV", "int32"), ("int", "hg", "int32"),
         ("int", "snake", "int32")),
        (("long long", "dk_sb", "int64"), ("long long", "dk_sh", "int64"),
         ("long long", "dk_ss", "int64"), ("long long", "dv_sb", "int64"),
         ("long long", "dv_sh", "int64"), ("long long", "dv_ss", "int64"))))


SIGNATURE = _signature(False)
ORDERED_SIGNATURE = _signature(True)
