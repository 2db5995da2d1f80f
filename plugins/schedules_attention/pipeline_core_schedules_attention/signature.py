"""The flash-attention forward kernel's signature: what ``emit_attention`` writes as the
kernel's parameter list and what ``call`` packs, from one list (the kit's ``KernelSignature``
says why).  Q, K, V: tensor maps; O: the output's address, packed per call (a new output each
call; written through its strides); LSE: each row's log-sum-exp in fp32, packed per call too
(null where no gradient is needed: not stored); then the sizes, the softmax scale folded with
log2(e), the query heads per KV head, the causal tile order (``hg``, ``snake``: tile_order.py), the query heads (``H``:
query head ``bh`` is head ``bh % H`` of batch ``bh / H``, its TMA coordinates) and O's strides
in elements (batch, head, row: O takes q's layout; layout.py)."""
from __future__ import annotations

from pipeline_core_nvidia_h100.kit_api import TENSOR_MAP_TYPE as _MAP
from pipeline_core_nvidia_h100.kit_api import KernelSignature, kernel_params

KERNEL_NAME = "pc_flash_attention_fwd"

SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
    ((_MAP, "tmQ", "tensor_map"), (_MAP, "tmK", "tensor_map")),
    ((_MAP, "tmV", "tensor_map"), ("unsigned short* __restrict__", "O", "pointer"),
     ("float* __restrict__", "LSE", "pointer")),
    (("int", "BH", "int32"), ("int", "Sq", "int32"), ("int", "Sk", "int32"),
     ("float", "scale_log2", "float32"), ("int", "group", "int32"), ("int", "hg", "int32"),
     ("int", "snake", "int32"), ("int", "H", "int32")),
    (("long long", "o_sb", "int64"), ("long long", "o_sh", "int64"),
     ("long long", "o_ss", "int64"))))

#: the packed variable-length forward's (``-p varlen``; varlen_tiles.py): Q, K, V's maps over
#: [1, H, total, D] views of the packed tensors, O and LSE as above (LSE [H, total_q]), each
#: sequence's first row in Q and in K (``cu_q``, ``cu_k``: ``B`` + 1 int32 on the device, read
#: by the tile scheduler), the packed tensors' rows (``TQ``, ``TK``: where a sequence's span is
#: clamped), then the forward's scale and group, the causal order's head groups and snake
#: (``hg``: tile_order.varlen_order_exprs; ``snake``: tile_order.POSITION), the query
#: heads, and O's head and row strides
VARLEN_SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
    ((_MAP, "tmQ", "tensor_map"), (_MAP, "tmK", "tensor_map")),
    ((_MAP, "tmV", "tensor_map"), ("unsigned short* __restrict__", "O", "pointer"),
     ("float* __restrict__", "LSE", "pointer")),
    (("const int* __restrict__", "cu_q", "pointer"), ("const int* __restrict__", "cu_k",
                                                       "pointer")),
    (("int", "B", "int32"), ("int", "TQ", "int32"), ("int", "TK", "int32"),
     ("float", "scale_log2", "float32"), ("int", "group", "int32"), ("int", "hg", "int32"),
     ("int", "snake", "int32"), ("int", "H", "int32")),
    (("long long", "o_sh", "int64"), ("long long", "o_ss", "int64"))))

#: the logit softcap's scale over the cap (``-p softcap``; attention_window.cuh), after either
#: prefill kernel's parameters (its ``scale_log2`` is then softcap * log2 e)
_SOFTCAP = kernel_params((("float", "softcap_scale", "float32"),))


def forward_signature(*, varlen: bool, softcap: bool) -> KernelSignature:
    """A prefill forward kernel's signature, the one place the emitter and both calls pick it:
    the fixed-length or the packed kernel's, with ``softcap_scale`` last where it caps."""
    base = VARLEN_SIGNATURE if varlen else SIGNATURE
    return base + _SOFTCAP if softcap else base


#: the decode kernel's (``-p decode``; decode_tiles.py): Q's map over [B, Sq, Hq, D] read at
#: (d, head, token, b), the caches' maps over [pages, page_size, Hkv, D] (a contiguous cache:
#: [B, capacity, Hkv, D], one page a sequence) read at (d, kv head, row, page); O [B, Sq, Hq, D]
#: through its strides and LSE [B, Hq, Sq] (null: not stored); each sequence's cache length
#: (``seqlens``, int32 on the device), the block table (null: contiguous) and its row stride;
#: split-KV's workspace and per-tile counters (null unsplit); the sizes: batch, KV and query
#: heads, tokens, the GQA group, the heads a tile packs (``HB``, its log2) and its tokens
#: (``TB``), head chunks and token blocks per KV head, the splits, the cache's capacity in keys
#: (a length is clamped to it) and the page size (a copy brings BN / CHUNKS rows: the kernel's
#: ``-p page_chunks``, compiled in); the
#: scale folded with log2(e); O's strides (batch, token, head)
DECODE_SIGNATURE = KernelSignature(kernel=KERNEL_NAME, params=kernel_params(
    ((_MAP, "tmQ", "tensor_map"), (_MAP, "tmK", "tensor_map")),
    ((_MAP, "tmV", "tensor_map"), ("unsigned short* __restrict__", "O", "pointer"),
     ("float* __restrict__", "LSE", "pointer")),
    (("const int* __restrict__", "seqlens", "pointer"),
     ("const int* __restrict__", "table", "pointer"), ("float* __restrict__", "ws", "pointer"),
     ("unsigned* __restrict__", "counters", "pointer")),
    (("int", "B", "int32"), ("int", "Hkv", "int32"), ("int", "Hq", "int32"),
     ("int", "Sq", "int32"), ("int", "G", "int32"), ("int", "HB", "int32"),
     ("int", "HB_SHIFT", "int32"), ("int", "TB", "int32"), ("int", "HC", "int32"),
     ("int", "QT", "int32"), ("int", "SPLITS", "int32")),
    (("int", "CAP", "int32"), ("int", "page", "int32"),
     ("float", "scale_log2", "float32"), ("long long", "table_stride", "int64")),
    (("long long", "o_sb", "int64"), ("long long", "o_ss", "int64"),
     ("long long", "o_sh", "int64"))))
