"""The attention backward's main kernel signature: what ``emit_attention_bwd`` writes as the
kernel's parameter list and what ``bwd_call`` packs, from one list (the kit's
``KernelSignature`` says why).  Q, dO, K, V: 3-D tensor maps (one head deep, so every head's
tail is zero-filled); LSE and delta: 1-D maps over every row; dQ's fp32 accumulator and the dK,
dV outputs by address; then the sizes, the scale (and it folded with log2 e) and the query
heads per KV head."""
from __future__ import annotations

from pipeline_core_nvidia_h100.kit_api import TENSOR_MAP_TYPE as _MAP
from pipeline_core_nvidia_h100.kit_api import KernelSignature, kernel_params

KERNEL_NAME = "pc_flash_attention_bwd"

SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
    ((_MAP, "tmQ", "tensor_map"), (_MAP, "tmK", "tensor_map")),
    ((_MAP, "tmV", "tensor_map"), (_MAP, "tmDO", "tensor_map")),
    ((_MAP, "tmLSE", "tensor_map"), (_MAP, "tmDelta", "tensor_map")),
    (("float* __restrict__", "dQacc", "pointer"), ("unsigned short* __restrict__", "dK", "pointer"),
     ("unsigned short* __restrict__", "dV", "pointer")),
    (("int", "BHK", "int32"), ("int", "Sq", "int32"), ("int", "Sk", "int32"),
     ("int", "SQP", "int32"), ("int", "group", "int32"), ("float", "scale", "float32"),
     ("float", "scale_log2", "float32"))))
