"""Host side of the wgmma family: TMA tensor maps, and launching the emitted kernel.

A tensor map is 128 opaque bytes the driver fills (``cuTensorMapEncodeTiled``); the kernel takes
it by value as a ``__grid_constant__`` parameter.  The driver entry point is called through
``ctypes`` on ``libcuda`` so no extra package is needed; the map travels to the launch as a
NumPy structured scalar of the same size, which CuPy passes by value.  GPU-only: nothing here runs
at import time.
"""
from __future__ import annotations

import ctypes
from typing import Any

from pipeline_core_nvidia_h100.runtime import KernelBuilder, _require
from pipeline_core_nvidia_h100.warpspecialized import WsGeometry

#: cuda.h enum values (CUDA 13.0): CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ..._SWIZZLE_128B,
#: ..._L2_PROMOTION_L2_*; interleave and out-of-bounds fill NONE are 0.
DTYPE_BFLOAT16 = 9
#: CU_TENSOR_MAP_DATA_TYPE_FLOAT16
DTYPE_FLOAT16 = 6
#: CU_TENSOR_MAP_DATA_TYPE_UINT8: fp8 e4m3 travels as bytes (TMA copies, never converts)
DTYPE_UINT8 = 0
#: CU_TENSOR_MAP_DATA_TYPE_FLOAT32 (the TMA-store epilogue's fp32 C)
DTYPE_FLOAT32 = 7
#: bytes of an element of each data type above
DTYPE_BYTES = {DTYPE_BFLOAT16: 2, DTYPE_FLOAT16: 2, DTYPE_FLOAT32: 4, DTYPE_UINT8: 1}
#: CU_TENSOR_MAP_SWIZZLE_NONE / _64B / _128B: how a box's rows lie in shared memory (128B:
#: 16-byte chunk j of row r at j ^ (r % 8), what wgmma's descriptors read; 64B, rows of 64
#: bytes: chunk j of row r at j ^ (r / 2 % 4); none: as in global memory)
SWIZZLE_NONE = 0
SWIZZLE_64B = 2
SWIZZLE_128B = 3
#: CU_TENSOR_MAP_L2_PROMOTION_L2_128B / _L2_256B: the granule an L2 miss of a TMA copy fetches
L2_PROMOTION_128B = 2
L2_PROMOTION_256B = 3
TENSOR_MAP_BYTES = 128


def swizzle_of(row_bytes: int) -> int:
    """The swizzle of a box whose rows are ``row_bytes`` wide: as wide as the row (128 or 64
    bytes; a swizzle wider than the box's row would interleave two rows' chunks)."""
    modes = {128: SWIZZLE_128B, 64: SWIZZLE_64B}
    if row_bytes not in modes:
        raise ValueError(f"a swizzled box row is 128 or 64 bytes, not {row_bytes}")
    return modes[row_bytes]


#: The L2 promotion every map takes: 128 bytes, the line.  Why not CUTLASS's 256: the boxes
#: here are 128 bytes wide (64 bf16 columns, the 128-byte swizzle's most), so a 256-byte
#: granule fetches what another copy, if any, reads; measured, it only costs.  On an H200:
#: a decode step's K/V stream alone (benchmarks/decode_stream_probe.cu, 64 x 8k keys, Hkv 8,
#: D 128: 256-byte rows read as two 128-byte halves) 4.10 TB/s with 256, 4.50 with 128 or
#: none, above the plain-load reference's 4.46; the same kernels with only the promotion
#: changed (benchmarks/kit_ab.py, results/kit_ab_promotion_isolated_s21_h200.jsonl):
#: ``attention_decode`` 1.00-1.07x (1.04-1.07 where K and V are 0.25 GB or more), the GEMM at
#: 16x8192x8192 1.035x and 128x4096x4096 1.02x, the large ``gemv`` 4.15 -> 4.39 TB/s; the large
#: GEMMs, the attention forward and backward within +-1% (graph-replay medians 0.987-1.003).  Rows off the line straddle two lines a box
#: row, where 256 fetched up to twice what the box reads (2000x5000x3000: 144 us -> 126).
L2_PROMOTION = L2_PROMOTION_128B


class TensorMapError(RuntimeError):
    """The driver refused a tensor map (its CUresult is in the message)."""


def _libcuda() -> Any:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise TensorMapError(f"libcuda.so.1 cannot be loaded: {exc}") from None


def encode_tiled_2d(address: int, rows: int, cols: int, box_rows: int, box_cols: int, *,
                    stride: int | None = None, dtype: int = DTYPE_BFLOAT16,
                    batch: int = 1, batch_stride: int = 0, swizzle: int = SWIZZLE_128B) -> Any:
    """The tensor map of a row-major [rows, cols] array of ``dtype`` (``stride`` elements
    between rows, default ``cols``) read or written in box_rows x box_cols boxes (cols
    innermost, 128-byte swizzle unless ``swizzle`` says otherwise), as a NumPy structured
    scalar of 128 bytes.  Boxes reaching
    past the array are zero-filled (loads) or clipped (stores).  ``batch`` > 1: a 3-D map of
    that many such arrays, ``batch_stride`` elements apart, read one batch deep (a batched
    matmul's operand); a ``batch`` of 1 with a ``batch_stride`` is a 3-D map too (a grouped
    GEMM's operand of one group, which its kernel reads as every group, at a batch)."""
    rank3 = batch > 1 or batch_stride
    elem = DTYPE_BYTES[dtype]
    return encode_tiled(address, (cols, rows, *((batch,) if rank3 else ())),
                        ((cols if stride is None else stride) * elem,
                         *((batch_stride * elem,) if rank3 else ())),
                        (box_cols, box_rows, *((1,) if rank3 else ())), dtype=dtype,
                        swizzle=swizzle)


def encode_tiled(address: int, dims: tuple[int, ...], strides: tuple[int, ...],
                 box: tuple[int, ...], *, dtype: int = DTYPE_BFLOAT16,
                 swizzle: int = SWIZZLE_128B) -> Any:
    """The tensor map of a ``len(dims)``-D array (1 to 5 dimensions) of ``dtype``, innermost
    first as the driver takes them: ``dims`` the sizes, ``strides`` the bytes between
    consecutive indices of every dimension but the innermost (whose elements are adjacent;
    each a multiple of 16, in any order: a transposed view's are not increasing), ``box`` the
    elements a copy moves per dimension.  Boxes reaching past a dimension's size are
    zero-filled (loads) or clipped (stores).  One home of the driver call (the 2-D maps above
    are this one's)."""
    np = _require("numpy")
    rank = len(dims)
    out = (ctypes.c_uint64 * 16)()
    c_dims = (ctypes.c_uint64 * rank)(*dims)
    c_strides = (ctypes.c_uint64 * max(1, rank - 1))(*strides)
    c_box = (ctypes.c_uint32 * rank)(*box)
    step = (ctypes.c_uint32 * rank)(*(1,) * rank)
    fn = _libcuda().cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    rc = fn(ctypes.byref(out), dtype, rank, ctypes.c_void_p(address), c_dims, c_strides, c_box,
            step, 0, swizzle, L2_PROMOTION, 0)
    if rc != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled returned CUresult {rc} for an array of "
                             f"dims {tuple(dims)} (innermost first), strides {tuple(strides)} "
                             f"bytes, in boxes of {tuple(box)}")
    record = np.dtype([("opaque", np.uint64, (16,))], align=True)
    return np.frombuffer(bytes(out), dtype=record, count=1)[0]


def device_address(array: Any) -> int:
    iface = getattr(array, "__cuda_array_interface__", None)
    if iface is None:  # a torch bf16 tensor: CuPy's interface has no bf16 type string
        iface = array.view(_require("torch").int16).__cuda_array_interface__
    return int(iface["data"][0])


class WsLauncher:
    """Launches an emitted warp-specialized kernel: C = A . B^T (A [m,k], B [n,k], C [m,n], bf16).

    Tensor maps are encoded once per (array address, shape) and kept: encoding is a driver call
    on the host, and a launch that paid for it every time would time the host, not the GPU.
    ``ctas``: the grid's size limit; 0 launches one CTA per output tile, the SM count makes the
    kernel persistent (each CTA loops over output tiles, its ring running on across them).
    """

    def __init__(self, builder: KernelBuilder, kernel: Any, g: WsGeometry, ctas: int = 0) -> None:
        self.builder, self.kernel, self.g, self.ctas = builder, kernel, g, ctas
        builder.set_max_dynamic_shared(kernel, g.smem_bytes)
        self._maps: dict[tuple[int, int, int, int], Any] = {}

    def _map(self, array: Any, rows: int, cols: int, box_rows: int) -> Any:
        key = (device_address(array), rows, cols, box_rows)
        found = self._maps.get(key)
        if found is None:
            found = self._maps[key] = encode_tiled_2d(key[0], rows, cols, box_rows, self.g.bk)
        return found

    def __call__(self, a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        g = self.g
        g.check_shape(m, n, k)
        tiles = (m // g.bm) * (n // g.bn)
        grid = (min(tiles, self.ctas) if self.ctas else tiles,)
        self.builder.launch(self.kernel, grid, (g.threads,),
                            (self._map(a, m, k, g.bm), self._map(b, n, k, g.bn), c, m, n, k),
                            shared_mem=g.smem_bytes)
