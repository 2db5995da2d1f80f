"""What the packed variable-length forward's kernel (``-p varlen``) writes differently from the
fixed-length one, for ``emit_attention``: its tile scheduler's device loop, its output's
finish and its header lines (docs/guide/attention.md, "Packed variable-length batches").

* **The tile scheduler** (varlen_tiles.py says why): the batch's tiles, sequence by sequence,
  round-robin over the persistent CTAs (causal, with the ``snake`` argument every other round
  backwards: ``tile_order.POSITION``); each role finds a tile's sequence with a cursor that
  only moves on (``locate``: the same reads of ``cu_q`` in the producer and the consumers, so
  their rings stay in step).  Each tile reads its sequence's spans (``span``:
  ``cu_seqlens`` clamped to the packed tensors' rows, so any values stay in bounds) and sets its
  ``Sq``, ``Sk``, ``KT`` and ``FM`` from the plan's rule (the fixed-length rule's C per
  sequence, ``tile_bounds_exprs``; windowed, ``KF`` and ``LM`` too, emit_window.py's lines:
  each sequence's window at its own diagonal).
  With ``-p uniform_tiles`` the consumers then declare KT and FM warp-uniform
  (:data:`UNIFORM`), so the KV loop keeps the ring's position in uniform registers as the
  fixed-length loop does.
* **The loads** (``emit_attention._Variant``): Q at row ``q0 + tile_m * BM``, K and V at
  ``k0 + j * BN`` (windowed, ``k0 + (KF + j) * BN``) of [1, H, total, D] views (batch
  coordinate 0).  A box past the sequence's end
  reads the next sequence's rows: its keys are masked (the key tail's mask compares indices
  with ``Sk``), its query rows computed and not stored.
* **The finish**: O's rows from the sequence's first (``q0``) at its head, clipped to ``Sq``;
  LSE ``[H, total_q]`` (FlashAttention's varlen layout) from ``LSE + head * TQ + q0``.
"""
from __future__ import annotations

from pipeline_core_nvidia_h100.kit_api import DeviceTileLoop, TileLoop

from pipeline_core_schedules_attention.tile_order import POSITION, loop_head, varlen_order_exprs

#: sequence s's first row of ``cu`` clamped to the tensor's ``total`` rows (into ``first``) and
#: its length (0 where the ends are out of order): a C lambda the tiles and the skip read
SPAN = ("auto span = [&](const int* __restrict__ cu, int s, int total, int& first) {",
        "    first = min(max(__ldg(cu + s), 0), total);",
        "    return min(max(__ldg(cu + s + 1), first), total) - first;",
        "};")


#: the consumers' KT and FM declared warp-uniform (every lane holds the same): they come from
#: ``cu_seqlens`` loads and a division by the sequence's query blocks, which the compiler cannot
#: prove uniform, so without this it keeps the ring's position (``rb += KT``) in vector
#: registers and the KV loop builds every wgmma descriptor there and moves it to a uniform
#: register (D 128 causal: 836 instructions a KV block against the fixed-length loop's 799).
#: A warp reduction's result lives in a uniform register (``REDUX``), so after it the loop is
#: the fixed-length kernel's but for moves (808).  Only the consumers: whole warps run it; the
#: producer's tile lines run on one thread.  ``-p uniform_tiles``: on the H200 it took D 128
#: causal from 0.79x to 0.95x the fixed-length kernel on the same buffer, and cost D 64 causal
#: (0.91x to 0.83x) and D 128 not causal (0.98x to 0.92x), so the call took it at D 128 causal
#: alone; since session 18's warp-uniform consumer index it costs that one too (0.954x without
#: it against 0.87x with it, session 20), and the call takes it nowhere (varlen_call.UNIFORM_TILES).
UNIFORM = ("KT = __reduce_min_sync(0xffffffffu, KT);  // warp-uniform, said to the compiler "
           "(UNIFORM)",
           "FM = __reduce_min_sync(0xffffffffu, FM);")


def varlen_tile_loop(varies: bool, bounds: tuple[str, ...], producer_bounds: int,
                     uniform: bool = False, windowed: bool = False) -> DeviceTileLoop:
    """The varlen kernel's tile loop: this CTA runs tiles ``blockIdx.x``, ``+ gridDim.x``, ...
    of the batch's tiles, sequence by sequence (``H * ceil(Sq / BM)`` each, none for a sequence
    of no query row), found by ``locate`` from a cursor that only moves on (each role its own,
    reading ``cu_q`` alike), ending past the last sequence; within a sequence the order of
    ``tile_order.varlen_order_exprs`` (``varies``: the tiles' KV blocks differ, causal or
    windowed).  ``bounds`` are the rule's lines setting the kernel's ``KT`` and ``FM`` (and
    windowed, first ``KF`` and after them ``LM``) of the tile's ``Sq``, ``Sk``, ``KV_BLOCKS``
    and ``tile_m``; the producer runs the first ``producer_bounds`` of them."""
    counts = ("int KT = 0, FM = 0" + (", KF = 0, LM = 0" if windowed else "")
              + ";  // the tile's KV blocks and first masked one (its sequence's)",
              *SPAN,
              "// whether tile `tile` lies in the batch, moving the cursor (sequence `seq`, whose "
              "first tile is `first`) on to it",
              "auto locate = [&](int tile, int& seq, int& first) {",
              "    for (; seq < B; ++seq) {",
              "        int q0;",
              "        const int tiles = H * ((span(cu_q, seq, TQ, q0) + BM - 1) / BM);",
              "        if (tile < first + tiles) return true;",
              "        first += tiles;",
              "    }",
              "    return false;",
              "};",
              *POSITION)
    loop = ("int rb = 0, o = 0, seq = 0, first = 0;  // the ring's K tiles and output tiles; "
            "the cursor",
            loop_head("locate(tile, seq, first)"))
    spans = ("int q0, k0;  // the sequence's first query row and key in the packed tensors",
             "const int Sq = span(cu_q, seq, TQ, q0), Sk = span(cu_k, seq, TK, k0), "
             "KV_BLOCKS = (Sk + BN - 1) / BN, MTS = (Sq + BM - 1) / BM, r = tile - first;",
             "const int " + ", ".join(varlen_order_exprs(varies)) + ";")
    return DeviceTileLoop(counts=counts,
                          producer=TileLoop(head=loop, tile=(*spans, *bounds[:producer_bounds])),
                          consumers=TileLoop(head=loop, tile=(*spans, *bounds,
                                                              *(UNIFORM if uniform else ()))),
                          empty_tiles=True)


def varlen_finish(store: str, lse: bool = True) -> str:
    """The consumers' finish (``store``: ``pcat::finish``'s template arguments): O / rowsum
    into the tile's sequence's rows at its head (q's layout: O's head and row strides), LSE
    into ``[H, total_q]``; with ``lse`` False (``-p lse=false``) no LSE is stored whatever the
    argument holds, the store compiled out (schedule.AttentionGeometry.lse says why)."""
    at = ("LSE == nullptr ? nullptr : LSE + (long long)(bh % H) * TQ + q0" if lse
          else "nullptr")
    return ("            pcat::finish<" + store + ">(oacc, rows, O + (long long)q0 * o_ss "
            "+ (long long)(bh % H) * o_sh, o_ss,\n"
            f"                {at}, 0, Sq);")


def varlen_header(head_dim: int, threads: int, smem: int, block_m: int,
                  lse: bool = True) -> list[str]:
    """The source's comment lines on the arguments and the launch."""
    return [
        f"// Q, K, V: packed [total, H, D = {head_dim}], read through rank-4 TMA tensor maps of "
        "[1, H, total, D] views",
        "// (their own strides, box 64 x rows, 128-byte swizzle); sequence s is rows "
        "cu_q[s]..cu_q[s+1] of Q and cu_k[s]..cu_k[s+1]",
        "// of K and V (int32 on the device); a box past a sequence reads the next one's "
        "rows: keys masked, rows not stored;",
        "// query head h reads KV head h / group (GQA); O: [total_q, H, D] at strides (o_ss, "
        "o_sh, 1) (q's layout);",
        "// LSE: [H, total_q] fp32, each row's log-sum-exp (null: not stored)." if lse else
        "// LSE: not stored (-p lse=false; the argument is not read).",
        f"// Launch: block {threads} (warp group 0: producer; 1..: consumers), dynamic",
        f"// shared memory {smem} bytes, any grid (each CTA runs tiles blockIdx.x, + gridDim.x, "
        "... of the batch's",
        f"// H * ceil(Sq / {block_m}) per sequence, sequence by sequence; varlen_tiles.py)."]
