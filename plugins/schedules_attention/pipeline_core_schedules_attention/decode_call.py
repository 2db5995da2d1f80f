"""``attention_decode(q, k_cache, v_cache, *, cache_seqlens, block_table=None, causal=True,
...)``: decoding over a KV cache (``-p decode``; decode_tiles.py says what the kernel computes;
docs/guide/attention.md, "Decoding over a KV cache").

q is ``[B, Sq, Hq, D]`` (a few new tokens per sequence, any strides with a unit last one); the
cache is contiguous ``[B, capacity, Hkv, D]`` or paged ``[pages, page_size, Hkv, D]`` with
``block_table [B, max_pages]`` (int32: the pages of sequence b in order), as FlashAttention's
``flash_attn_with_kvcache`` takes them; ``cache_seqlens`` (int32 ``[B]`` on the device, or one
int for every sequence) is each sequence's length in the cache, the query tokens among its
last keys.  Causal (the default) with ``Sq > 1``: token t sees keys up to ``len - Sq + t``.

The lengths stay on the device: the kernel reads them, so a call never syncs and a CUDA graph
captures it (a decode loop replays it).  What the host decides from the shapes alone: the tile
(a GQA group's heads and the tokens packed into 64 rows, or a narrow tile's 8 or 16 where they
fit: :func:`decode_tiles.tile_shape`, :func:`decode_tiles.narrow_rows`) and
the split count (:func:`decode_tiles.choose_splits`, the wave model over the cache's capacity:
the lengths are unknown there, so a batch of short sequences in a long cache may split more
than it needs; each split then finds fewer blocks, or none, and costs its overhead only).
Split-KV's partials go to the kit's ``split_workspace`` of the stream (made on its first call;
under a CUDA graph's capture on a stream that has none, the capture's own, from the graph's
pool: a decode loop captured with ``torch.cuda.graph`` splits as its eager calls do).

Refused, each in one line: a page size not a multiple of 8 rows (a 128-byte swizzled TMA box
holds whole 8-row atoms), a cache TMA cannot read in place is copied once (as ``attention()``'s
operands), a gradient (no backward: decoding is inference).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (PLUGIN_MODULE, HostCall, Launch, Op, Recipe,
                                               describe, require_gpu_module,
                                               sm_count, split_workspace, strided_tensor_map)

from pipeline_core_schedules_attention.call import (DTYPES, LOG2E, AttentionArgumentError,
                                                    AttentionKernel, _load, check_group,
                                                    check_operands, softmax_scale)
from pipeline_core_schedules_attention.decode_tiles import (DECODE_ROWS, MAX_SLOTS_PER_SM,
                                                            NARROW_ROWS, choose_splits,
                                                            chunk_rows, narrow_rows, tile_shape)
from pipeline_core_schedules_attention.layout import (BOX_COLS, empty_in_order, in_place,
                                                      order_of, readable, sizes, strides)
from pipeline_core_schedules_attention.schedule import DECODE_PRODUCER_REGISTERS, NAME
from pipeline_core_schedules_attention.signature import DECODE_SIGNATURE

if TYPE_CHECKING:
    from pipeline_core.plugin_api import CompiledSchedule

#: keys per KV block, the K and V rings' depth and Q's per head dim: at D 128 two Q stages of
#: 16 KB beside 3 K and V stages of 64 KB (224 KB); at D 64, 5 stages of 32 KB; at D 256,
#: blocks of 64 keys (O's 128 fp32 registers a thread leave no room for S of 128 keys), one Q
#: of 32 KB and 3 stages of 64 KB.  Two Q stages load the next output tile's Q while this one
#: runs: on the H200, 1.00-1.10x one stage where CTAs run several short tiles (8 and 64
#: sequences of 1k keys), the same elsewhere
BLOCKS = {64: (128, 5, 2), 128: (128, 3, 2), 256: (64, 3, 1)}
HEAD_DIMS = tuple(BLOCKS)


@attrs.frozen(kw_only=True)
class DecodeCall:
    """What one decode call runs: the batch, tokens, query and KV heads, head dim, dtype, the
    folded scale, causal (only with more than one token), the cache (pages and rows a page; a
    contiguous cache is one page a sequence of ``capacity`` rows), the table's width, the
    operands copied once and the output's layout (q's)."""

    batch: int
    tokens: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    scale_log2: float
    causal: bool
    paged: bool
    pages: int
    page_size: int
    table_pages: int
    copied: tuple[str, ...] = ()
    out_order: tuple[int, ...] = (0, 1, 2, 3)
    #: the caches' KV heads lie dense in a row (each head D elements after the last)
    heads_dense: bool = True

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def capacity(self) -> int:
        """The most keys a sequence may hold: its table's pages (paged) or the cache's rows."""
        return self.table_pages * self.page_size if self.paged else self.page_size

    @property
    def chunks(self) -> int:
        """The kernel's copies per KV block (``-p page_chunks``): each one page's share."""
        return self.block_n // chunk_rows(self.page_size if self.paged else 0, self.block_n)

    @property
    def grouped(self) -> bool:
        """The kernel's ``-p kv_grouped`` (attention_decode.cuh, KvLayout): one copy a page
        chunk, not one a 64-column part, where a block takes several chunks (pages under a
        block: the single issuing thread's copies bounded the stream) and the caches' heads are
        dense in a row (the rank-5 map folds the heads and parts into one dimension)."""
        return self.paged and self.chunks > 1 and self.heads_dense

    @property
    def block_n(self) -> int:
        """Keys per KV block (:data:`BLOCKS`)."""
        return BLOCKS[self.head_dim][0]

    @property
    def rows(self) -> int:
        """The kernel's rows a tile (``-p block_m``): a narrow tile's 8 or 16 where they hold
        every query of a KV head (a group of 4 and up to 4 tokens, of 8 and up to 2, one head and
        up to 16: attention_decode.cuh, "Narrow tiles"), else 64."""
        return narrow_rows(self.group, self.tokens) or DECODE_ROWS

    @property
    def shape(self) -> tuple[int, int, int]:
        """The tile's heads, tokens and head chunks (:func:`decode_tiles.tile_shape`)."""
        return tile_shape(self.group, self.rows)

    @property
    def tiles(self) -> int:
        """Output tiles: (sequence, KV head, head chunk, token block)."""
        hb, tb, hc = self.shape
        return self.batch * self.kv_heads * hc * -(-self.tokens // tb)


def _fail(name: str, why: str) -> AttentionArgumentError:
    return AttentionArgumentError(f"attention_decode: {name}: {why}")


def plan_decode(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, block_table: Any, *,
                causal: bool = True, scale: float | None = None,
                grad_enabled: bool = True) -> DecodeCall:
    """The call's plan, or one :class:`AttentionArgumentError` naming the argument at fault
    (host-side facts only: the lengths and the table's pages live on the device)."""
    check_operands(_fail, q, k_cache, v_cache, "[B, S, H, D]")
    b, sq, h, d = sizes(q)
    if d not in HEAD_DIMS:
        raise _fail("q", f"head dim {d}; decoding supports {', '.join(map(str, HEAD_DIMS))}")
    if grad_enabled and any(getattr(t, "requires_grad", False) for t in (q, k_cache, v_cache)):
        raise _fail("q", "needs a gradient, and decoding has no backward (it is inference); "
                         "run under torch.no_grad() or torch.inference_mode()")
    pages, page_size, hkv, dk = sizes(k_cache)
    if dk != d:
        raise _fail("k_cache", f"head dim {dk}, q's {d}; pass one head dim")
    check_group(_fail, h, hkv)
    if not isinstance(causal, bool):
        raise _fail("causal", f"{causal!r}; pass True (the diagonal bottom-right: the last "
                              "query token is the newest key) or False")
    if scale is not None and not (isinstance(scale, (int, float)) and math.isfinite(scale)
                                  and scale > 0):
        raise _fail("scale", f"{scale!r}; pass a positive finite float or None (1/sqrt(D))")
    _check_lengths(cache_seqlens, b, q)
    if block_table is None:
        if pages != b:
            raise _fail("k_cache", f"{pages} sequences for q's {b}; pass a contiguous cache "
                                   "[B, capacity, Hkv, D], or pages with block_table=")
        table_pages = 1
    else:
        table_pages = _check_table(block_table, b, q)
        if page_size % 8:
            raise _fail("k_cache", f"pages of {page_size} rows; the kernel copies whole 8-row "
                                   "atoms of a 128-byte swizzled box: allocate pages of a "
                                   "multiple of 8 rows (16 and 64 are common)")
    return DecodeCall(batch=b, tokens=sq, heads=h, kv_heads=hkv, head_dim=d,
                      dtype=DTYPES[str(q.dtype)], scale_log2=softmax_scale(d, scale) * LOG2E,
                      causal=causal and sq > 1, paged=block_table is not None, pages=pages,
                      page_size=page_size, table_pages=table_pages,
                      copied=tuple(n for n, t in (("q", q), ("k_cache", k_cache),
                                                  ("v_cache", v_cache)) if not in_place(t)),
                      out_order=order_of(q),
                      heads_dense=all(t.shape[2] == 1 or t.stride(2) == d or not in_place(t)
                                      for t in (k_cache, v_cache)))


def _check_lengths(lengths: Any, batch: int, q: Any) -> None:
    if isinstance(lengths, bool) or (isinstance(lengths, int) and lengths < 0):
        raise _fail("cache_seqlens", f"{lengths!r}; pass an int >= 0 or an int32 tensor [B]")
    if isinstance(lengths, int):
        return
    if str(getattr(lengths, "dtype", None)) != "torch.int32":
        raise _fail("cache_seqlens", f"dtype {getattr(lengths, 'dtype', type(lengths).__name__)}"
                                     "; pass a torch.int32 tensor [B] (or one int)")
    if tuple(lengths.shape) != (batch,):
        raise _fail("cache_seqlens", f"shape {tuple(lengths.shape)}; pass [{batch}], one "
                                     "length a sequence")
    if lengths.device != q.device:
        raise _fail("cache_seqlens", f"on {lengths.device}, q on {q.device}; the kernel reads "
                                     "it there: pass it on q's device")


def _check_table(table: Any, batch: int, q: Any) -> int:
    if str(getattr(table, "dtype", None)) != "torch.int32":
        raise _fail("block_table", f"dtype {getattr(table, 'dtype', type(table).__name__)}; "
                                   "pass a torch.int32 tensor [B, max_pages]")
    if len(table.shape) != 2 or table.shape[0] != batch:
        raise _fail("block_table", f"shape {tuple(table.shape)}; pass [{batch}, max_pages]")
    if table.device != q.device:
        raise _fail("block_table", f"on {table.device}, q on {q.device}; pass it on q's device")
    if table.shape[1] and table.stride(1) != 1:
        raise _fail("block_table", "its pages are not contiguous in a row; pass .contiguous()")
    return int(table.shape[1])


def kv_issuers(chunks: int) -> int:
    """The producer warps that share a block's copies (``-p kv_issuers``): one a page chunk, up
    to 4 (pages of 64: 2; of 32 or fewer: 4; a contiguous cache's single chunk: 1).  Why: one
    thread issuing 16 copies of 4 KB a block (pages of 16) bounded the stream."""
    return min(4, chunks)


def decode_params(head_dim: int, causal: bool, split: bool, chunks: int = 1,
                  grouped: bool = False, rows: int = DECODE_ROWS) -> dict[str, str]:
    """The ``-p`` parameters of a decode kernel."""
    return {"decode": "true", "split_kv": str(split).lower(), "causal": str(causal).lower(),
            "page_chunks": str(chunks), "kv_grouped": str(grouped).lower(),
            "kv_issuers": str(kv_issuers(chunks)),
            "head_dim": str(head_dim), "block_m": str(rows),
            "block_n": str(BLOCKS[head_dim][0]), "q_stages": str(BLOCKS[head_dim][2]),
            "consumers": "1", "pingpong": "false", "intra_overlap": "true",
            "producer_registers": str(DECODE_PRODUCER_REGISTERS)}


def decode_source(head_dim: int, dtype: str, causal: bool, split: bool, chunks: int = 1,
                  grouped: bool = False, rows: int = DECODE_ROWS) -> tuple[CompiledSchedule, str]:
    """A decode kernel's schedule compiled (and proven), and its CUDA."""
    from pipeline_core_schedules_attention.emit_attention import emit_attention

    compiled = DECODE.compile(decode_params(head_dim, causal, split, chunks, grouped, rows),
                              BLOCKS[head_dim][1])
    return compiled, emit_attention(compiled, dtype=dtype)


#: the kernel's copies per KV block the call builds (blocks of 128 keys: a contiguous cache and
#: pages of 128 rows or more: 1; pages of 64: 2; of 32: 4; of 16: 8; of 8: 16; blocks of 64 keys:
#: half as many)
PAGE_CHUNKS = (1, 2, 4, 8, 16)
#: every kernel the decode call may build: (head dim, dtype, causal, split, page chunks,
#: grouped: DecodeCall.grouped, with several chunks, and the parts layout beside it for caches
#: whose heads are not dense; rows: DecodeCall.rows)
VARIANTS = tuple((d, t, c, s, n, g, r) for d in HEAD_DIMS for t in ("bf16", "fp16")
                 for c in (False, True) for s in (False, True) for n in PAGE_CHUNKS
                 for g in ((False, True) if n > 1 else (False,))
                 for r in (DECODE_ROWS, *NARROW_ROWS) if BLOCKS[d][0] % (8 * n) == 0)


def _build(head_dim: int, dtype: str, causal: bool, split: bool, chunks: int, grouped: bool,
           rows: int, device: int) -> AttentionKernel:
    return _load(*decode_source(head_dim, dtype, causal, split, chunks, grouped, rows), device)


def _splits(c: DecodeCall, device: int) -> int:
    """The call's split count: the wave model over the capacity's KV blocks."""
    return choose_splits(c.tiles, -(-c.capacity // c.block_n), sm_count(device))


def _workspace(r: Recipe[tuple[DecodeCall, int]]) -> tuple[Any, Any] | None:
    """A split recipe's partials and counters (the kit's ``split_workspace`` of its stream, or
    a capture's own), None unsplit."""
    c, splits = r.plan
    if splits == 1:
        return None
    return split_workspace(r.device, r.stream, MAX_SLOTS_PER_SM * sm_count(r.device),
                           DECODE_ROWS * (c.head_dim + 1))  # a slot of the widest tile


def _arguments(r: Recipe[tuple[DecodeCall, int]], kernels: tuple[AttentionKernel, ...],
               tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The persistent grid and the kernel's arguments (signature.DECODE_SIGNATURE) but the
    output's and the LSE's addresses, packed per call; the split workspace is the last of
    ``tensors`` (:func:`_workspace`)."""
    np = require_gpu_module("numpy")
    (built,), (q, k, v, lengths, table, found) = kernels, tensors
    c, splits = r.plan
    hb, tb, hc = c.shape
    sms = sm_count(r.device)
    o_sb, o_ss, o_sh, _ = _out_strides(c)
    values = {
        "tmQ": strided_tensor_map(q.data_ptr(), sizes(q), strides(q), (1, tb, hb, BOX_COLS),
                                  c.dtype),
        "tmK": _kv_map(c, k), "tmV": _kv_map(c, v),
        "seqlens": lengths.data_ptr(), "table": 0 if table is None else table.data_ptr(),
        "ws": 0 if found is None else found[0].data_ptr(),
        "counters": 0 if found is None else found[1].data_ptr(),
        "B": c.batch, "Hkv": c.kv_heads, "Hq": c.heads, "Sq": c.tokens, "G": c.group,
        "HB": hb, "HB_SHIFT": hb.bit_length() - 1, "TB": tb, "HC": hc,
        "QT": -(-c.tokens // tb), "SPLITS": splits, "CAP": c.capacity,
        "page": c.page_size, "scale_log2": c.scale_log2,
        "table_stride": 0 if table is None else int(table.stride(0)),
        "o_sb": o_sb, "o_ss": o_ss, "o_sh": o_sh}
    grid = max(1, min(c.tiles * splits, sms))
    return (Launch.of(built, (grid,), *DECODE_SIGNATURE.pack_around(("O", "LSE"), values, np)),)


def _kv_map(c: DecodeCall, t: Any) -> Any:
    """The tensor map of a cache: ``[pages, page_size, Hkv, D]`` in boxes of a page chunk's
    rows by 64 columns; grouped (:attr:`DecodeCall.grouped`), the rank-5 view ``[pages,
    page_size / 8, Hkv x D / 64, 8, 64]`` (8-row groups; a row's heads and 64-column parts one
    dimension, dense) in boxes of the chunk's groups by every part, landing each 8-row group's
    parts side by side (attention_decode.cuh, KvLayout)."""
    rows = c.block_n // c.chunks
    if not c.grouped:
        return strided_tensor_map(t.data_ptr(), sizes(t), strides(t), (1, rows, 1, BOX_COLS),
                                  c.dtype)
    s0, s1, _, _ = strides(t)
    parts = c.head_dim // BOX_COLS
    return strided_tensor_map(t.data_ptr(), (c.pages, c.page_size // 8, c.kv_heads * parts, 8,
                                             BOX_COLS),
                              (s0, 8 * s1, BOX_COLS, s1, 1), (1, rows // 8, parts, 8, BOX_COLS),
                              c.dtype)


def _out_strides(c: DecodeCall) -> tuple[int, ...]:
    from pipeline_core_schedules_attention.layout import dense_strides

    return dense_strides((c.batch, c.tokens, c.heads, c.head_dim), c.out_order)


#: the decode call layer (the kit's HostCall): its kernels (key: (head dim, dtype, causal,
#: split, page chunks, grouped, rows, device)), recipes, packed arguments and op
DECODE: HostCall[tuple[DecodeCall, int], AttentionKernel] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_schedules_attention.plugin"),
    build=lambda key: _build(*key), pack=_arguments, ops=lambda: _decode_ops())


def attention_decode(q: Any, k_cache: Any, v_cache: Any, *, cache_seqlens: Any,
                     block_table: Any = None, causal: bool = True,
                     scale: float | None = None, return_lse: bool = False) -> Any:
    """softmax(q . k^T * scale) . v over each sequence's cached keys: q ``[B, Sq, Hq, D]``, the
    cache ``[B, capacity, Hkv, D]`` or paged ``[pages, page_size, Hkv, D]`` with
    ``block_table [B, max_pages]`` (int32), ``cache_seqlens`` each sequence's length (int32
    ``[B]`` on q's device, or one int); bf16 or fp16, D 64, 128 or 256, Hkv dividing Hq.  Returns
    ``[B, Sq, Hq, D]`` in q's layout; with ``return_lse`` also each row's log-sum-exp
    ``[B, Hq, Sq]`` fp32 (+inf for a row that sees no key, whose output is 0).  ``causal``
    with ``Sq > 1``: token t sees keys up to ``len - Sq + t``.  Runs on torch's current stream,
    never syncs (CUDA-graph capturable), allocates its outputs only (and, on a stream's first
    split call outside a capture, its workspace once).  A torch custom op
    (``pipeline_core::attention_decode``), so torch.compile traces it."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    if not isinstance(return_lse, bool):
        raise _fail("return_lse", f"{return_lse!r}; pass True or False")
    lengths = cache_seqlens
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool) \
            and hasattr(q, "device"):
        lengths = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    out, lse = DECODE.call("attention_decode", _run, _check,
                           (q, k_cache, v_cache, lengths, block_table), causal, scale)
    return (out, lse) if return_lse else out


def _check(q: Any, k_cache: Any, v_cache: Any, lengths: Any, table: Any, causal: bool,
           scale: float | None) -> DecodeCall:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return plan_decode(q, k_cache, v_cache, lengths, table, causal=causal, scale=scale,
                       grad_enabled=torch.is_grad_enabled())


def _run(q: Any, k_cache: Any, v_cache: Any, lengths: Any, table: Any, causal: bool,
         scale: float | None) -> tuple[Any, Any]:
    """The call on checked-once CUDA tensors: its recipe (kept per argument description), the
    output in q's layout and the LSE, the launch."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    if not q.is_cuda:  # no device to key by: refused in one line by the checks
        _check(q, k_cache, v_cache, lengths, table, causal, scale)
    key = (describe(q), describe(k_cache), describe(v_cache), describe(lengths),
           describe(table), type(causal), causal, type(scale), scale)

    def plan(device: int) -> tuple[DecodeCall, int]:
        c = _check(q, k_cache, v_cache, lengths, table, causal, scale)
        return c, _splits(c, device)

    try:
        r = DECODE.recipe(q, key, plan, lambda p, device: (
            (p[0].head_dim, p[0].dtype, p[0].causal, p[1] > 1, p[0].chunks, p[0].grouped,
             p[0].rows, device),))
    except TypeError:  # an unhashable argument, which the checks refuse
        _check(q, k_cache, v_cache, lengths, table, causal, scale)
        raise
    c, _ = r.plan
    out = empty_in_order(torch, q.shape, c.out_order, q)  # q's layout
    lse = torch.empty((c.batch, c.heads, c.tokens), dtype=torch.float32, device=q.device)
    if c.tokens and c.batch:
        if c.copied:  # operands TMA cannot read where they lie, copied once (layout.py)
            q, k_cache, v_cache = (readable(t) if n in c.copied else t for n, t in
                                   (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)))
        ws = _workspace(r)  # keyed by its addresses: a capture's is its own
        DECODE.launch(r, (r, DECODE.kernels.kernel(r.kernels[0]), q.data_ptr(),
                          k_cache.data_ptr(), v_cache.data_ptr(), lengths.data_ptr(),
                          None if table is None else table.data_ptr(),
                          None if ws is None else ws[0].data_ptr()),
                      (q, k_cache, v_cache, lengths, table, ws), (out, lse))
    return out, lse


def _fake(q: Any, k_cache: Any, v_cache: Any, lengths: Any, table: Any, causal: bool,
          scale: float | None) -> tuple[Any, Any]:
    """The op's shapes (where torch.compile traces, the checks first)."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    c = _check(q, k_cache, v_cache, lengths, table, causal, scale)
    return (empty_in_order(torch, q.shape, c.out_order, q),
            q.new_empty((c.batch, c.heads, c.tokens), dtype=torch.float32))


def _decode_ops() -> tuple[Op, ...]:
    """Decoding's custom op (no backward: inference)."""
    return (Op(name="pipeline_core::attention_decode", impl=_run, fake=_fake,
               schema="(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, "
                      "Tensor? block_table, bool causal, float? scale) -> (Tensor, Tensor)"),)


def append_kv_cache(k_cache: Any, v_cache: Any, k_new: Any, v_new: Any, *, cache_seqlens: Any,
                    block_table: Any = None) -> None:
    """Write ``k_new`` and ``v_new`` (``[B, n, Hkv, D]``) into the cache at each sequence's
    positions ``cache_seqlens[b] ..< cache_seqlens[b] + n`` (through ``block_table`` when
    paged), with torch's indexing on the device: no sync, so a decode loop captured in a CUDA
    graph replays it.  The caller then adds ``n`` to ``cache_seqlens`` (before or after the
    attention call, as its model counts the new tokens) and owns the pages: each sequence's
    table must already name a page for every new position."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    b, n = int(k_new.shape[0]), int(k_new.shape[1])
    pos = cache_seqlens.long()[:, None] + torch.arange(n, device=k_new.device)[None, :]
    if block_table is None:
        rows = torch.arange(b, device=k_new.device)[:, None].expand(b, n)
        k_cache[rows, pos] = k_new
        v_cache[rows, pos] = v_new
    else:
        size = int(k_cache.shape[1])
        page = block_table.long().gather(1, pos // size)
        k_cache[page, pos % size] = k_new
        v_cache[page, pos % size] = v_new


# the ops registered now where torch is imported already (HostCall.register_if_torch_imported)
DECODE.register_if_torch_imported()
