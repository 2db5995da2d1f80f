"""What the decode kernel (``-p decode``, decode_tiles.py) writes differently from the
fixed-length forward, for ``emit_attention``: its tile loop, its loads, its softmax mask and PV,
its finish (split-KV's hand-off among them) and its header lines (docs/guide/attention.md,
"Decoding over a KV cache").

* **The tile loop**: tiles ``(sequence, KV head, head chunk, token block, split)``, the split
  innermost (a tile's splits run side by side, so their last finishes soon after the first),
  dealt round-robin to the persistent CTAs.  Each reads its sequence's cache length on the
  device (clamped to the cache's capacity) and sets ``KF``, ``KT`` (its split's share of the
  token block's KV blocks) and ``FM`` from the rule (:func:`decode_bounds_exprs`: the C of
  ``DecodeBounds.visited`` / ``first_masked`` / ``splits_of``, which a test evaluates against
  the rule on every problem of its proof).
* **The loads**: Q at (d, the chunk's first head, the block's first token, b), a box of ``HB``
  heads by ``TB`` tokens landing the tile's rows (64, or a narrow tile's) token-major; K and V by
  ``pcat::decode_kv_load``, a block's copies one per page chunk, each at the page its table
  entry names.
* **The softmax and PV**: the softmax of block ``KF + t`` (global, as the mask and ``FM``
  count), masked by ``pcat::DecodeMask`` (causal: a row's token picks its last key) or the key
  tail; PV by ``pcat::decode_pv``, which clears the V rows past the end on the tail block.
* **The finish**: unsplit, the rows to their (token, head) of O and LSE; split-KV, the plan's
  reduction steps (the consumers' ``finish``, one block each), as the split-K GEMM's: the
  partial to the split's workspace slot, a release fence, the arrival on the output tile's
  counter, the last arriver's acquire, its combine of every slot in split order and the store,
  and the counter's reset.
"""
from __future__ import annotations

from collections.abc import Sequence

from pipeline_core.plugin_api import AgentProgram, ProgramError, StepKind

from pipeline_core_nvidia_h100.kit_api import (SPLIT_BARRIER, DeviceTileLoop, TileLoop,
                                               counter_steps, section_mark)

from pipeline_core_schedules_attention.schedule import AttentionTag


def decode_bounds_exprs(causal: bool) -> tuple[str, str]:
    """``DecodeBounds.visited`` and ``first_masked`` of the tile's token block as C of the
    kernel's ``t0, TB, Sq, Sk, BN, KV_BLOCKS`` and ``NB`` (the block's visited count): the
    forward's bottom-right causal rule at ``block_m = TB`` (``LoopBounds``), C's ``/``
    truncating where Python floors only on quotients ``max(0, ...)`` clamps."""
    if not causal:
        return "KV_BLOCKS", "max(0, NB - (Sk % BN != 0))"
    return ("max(0, min(KV_BLOCKS, (min(t0 + TB, Sq) + Sk - Sq + BN - 1) / BN))",
            "max(0, min(min(NB - (Sk % BN != 0), max(0, t0 + Sk - Sq + 1) / BN), NB))")


def decode_tile_loop(causal: bool) -> DeviceTileLoop:
    """The decode kernel's tile loop (the module says what each tile sets)."""
    visited, first = decode_bounds_exprs(causal)
    counts = ("const int TILES = B * Hkv * HC * QT * SPLITS;",
              "int KT = 0, FM = 0, KF = 0, Sk = 0, t0 = 0, b = 0, kvh = 0, hc = 0;  // the "
              "tile's (its split's) blocks, its sequence, heads and tokens")
    loop = ("int rb = 0, o = 0;", "for (int tile = blockIdx.x; tile < TILES; "
            "tile += gridDim.x, rb += KT, ++o) {")
    spans = ("const int split = tile % SPLITS, out_tile = tile / SPLITS, qt = out_tile % QT;",
             "hc = out_tile / QT % HC; kvh = out_tile / (QT * HC) % Hkv; "
             "b = out_tile / (QT * HC * Hkv);",
             "Sk = min(max(__ldg(seqlens + b), 0), CAP); t0 = qt * TB;",
             f"const int KV_BLOCKS = (Sk + BN - 1) / BN, NB = {visited}, "
             "per = (NB + SPLITS - 1) / SPLITS;  // the plan's DecodeBounds.visited",
             "KF = split * per; KT = max(0, min(per, NB - KF));  // DecodeBounds.splits_of")
    fm = f"FM = {first};  // the plan's DecodeBounds.first_masked"
    # the producer's page entries of the tile's first block, read as the tile starts (their
    # loads in flight while it waits to load Q)
    pages = ("pcat::Pages<CHUNKS> pages;  // the entries read ahead (attention_decode.cuh)",
             "pcat::decode_pages<BN, CHUNKS, KV_ISSUERS>(pages, b, KF, Sk, table, table_stride, "
             "page, wtid / 32);")
    return DeviceTileLoop(counts=counts, producer=TileLoop(head=loop, tile=(*spans, *pages)),
                          consumers=TileLoop(head=loop, tile=(*spans, fm)), empty_tiles=True)


def decode_load_line(tag: int, stage: str, q_stages: int) -> str:
    """The producer's copy of Q (once per output tile) or of KV block ``KF + t`` (``stage``:
    its ring stage) as the decode kernel writes it; of several issuing warps (``KV_ISSUERS``),
    each issues its share of a block's copies."""
    if tag == AttentionTag.TMA_Q:
        return (f"for (int c = 0; c < HD / 64; ++c) pcat::tma_load_4d(stage_q(o % {q_stages}) + "
                f"c * BM * 128, &tmQ, q_full_bar(o % {q_stages}), c * 64, kvh * G + hc * HB, "
                "t0, b);")
    x = "k" if tag == AttentionTag.TMA_K else "v"
    ahead = "true" if tag == AttentionTag.TMA_V else "false"  # V's copy: the block's last
    return (f"pcat::decode_kv_load<BN, HD, CHUNKS, KV_GROUPED, KV_ISSUERS>(stage_{x}({stage}), "
            f"&tm{x.upper()}, "
            f"{x}_full_bar({stage}), kvh, b, KF + t, Sk, pages, {ahead}, table, table_stride, "
            "page, wtid / 32);")


def decode_mask(causal: bool) -> str:
    """The softmax's mask of a masked block: the row's token's last key (causal), or the
    sequence's end."""
    return "pcat::DecodeMask{Sk, Sk - Sq + t0, HB_SHIFT}" if causal else "pcat::KeyTail{Sk}"


def decode_pv_line(pv: str, stage: str, tile: str, narrow: bool) -> str:
    """PV of the block in ring stage ``stage`` (its V rows past the end cleared): P from
    registers, or (narrow) O^T += V^T.P^T with P^T from the consumer's shared memory."""
    if narrow:
        return (f"pcat::decode_pv_t<BN, HD, BM, KV_GROUPED, {SPLIT_BARRIER}, {pv}>(oacc, nw, "
                f"stage_v({stage}), KF + {tile}, Sk);")
    return (f"pcat::decode_pv<BN, HD, KV_GROUPED, {SPLIT_BARRIER}, {pv}>(oacc, pk, "
            f"stage_v({stage}), "
            f"KF + {tile}, Sk);")


def decode_op_line(tag: int, stage: str, tile: str, *, elem: str, mask: str, guard: bool,
                   qk: str) -> str:
    """A narrow tile's S^T, softmax and rescale steps (attention_decode.cuh, "Narrow tiles"):
    the keys wgmma's M, the tile's query rows its N."""
    if tag == AttentionTag.WGMMA_S:
        return (f"pcat::qk_t<BN, HD, BM, {qk}, KV::PS, KV::GS>(sacc, q_smem, "
                f"stage_k({stage}));")
    if tag == AttentionTag.SOFTMAX:
        return (f"pcat::softmax_t<BN, BM, {str(guard).lower()}, {SPLIT_BARRIER}>(sacc, rows, "
                f"{mask}, KF + {tile}, FM, scale_log2, nw);")
    assert tag == AttentionTag.RESCALE
    return f"pcat::rescale_t<HD, BN, BM, {elem}>(oacc, sacc, nw, rows, KF + {tile});"


#: a narrow consumer's registers (O^T and S^T: wgmma m64nBM fragments, HD / 64 and BN / 64 of
#: them) and its shared memory beside the rings (P^T, the column exchange)
NARROW_STATE = ("        float oacc[HD / 64][BM / 2], sacc[BN / 64][BM / 2];\n"
                "        __shared__ pcat::Narrow<BN, BM> nw;")


def decode_compute(narrow: bool) -> str:
    """The consumer's start of a tile: O cleared, its Q, where its rows go."""
    start = ("auto rows = pcat::start_t<HD / 64, BM>(oacc)" if narrow
             else "pcat::Rows rows = pcat::start<HD>(oacc, 0, consumer)")
    return (
    f"            {start};\n"
    "            const u32 q_smem = stage_q(o % Q_STAGES);  // this output tile's Q\n"
    "            const pcat::DecodeRows dr{t0, HB_SHIFT, min(HB, G - hc * HB), Sq};\n"
    "            const int h0 = kvh * G + hc * HB;  // the tile's first query head\n"
    "            unsigned short* const out = O + b * o_sb + h0 * o_sh;\n"
    "            float* const lse = LSE == nullptr ? nullptr : LSE + ((long long)b * Hq + h0) "
    "* Sq;")

_UNSPLIT = ("            pcat::decode_finish<HD, {elem}>(oacc, rows, dr, out, o_ss, o_sh, lse, "
            "Sq);")
_UNSPLIT_NARROW = (f"            pcat::decode_finish_t<BN, HD, BM, {{elem}}, {SPLIT_BARRIER}>(oacc, "
                   "rows, dr, out, o_ss, o_sh, lse, Sq, nw, o);")

_SPLIT_OPEN = ("        {  // split-KV: the partial out, the output tile's last split combines\n"
               "            __shared__ int split_last;\n"
               "            float* const slots = ws + (long long)out_tile * SPLITS * "
               "pcat::DECODE_SLOT<HD, BM>;\n"
               "            " + section_mark("finish") + "\n")
_SPLIT_CLOSE = "            " + section_mark("end") + "\n        }"
_SPLIT_STEPS = {
    StepKind.SLICE_STORE: ("            pcat::decode_slice_store<HD>(oacc, rows, dr, slots + "
                           "split * pcat::DECODE_SLOT<HD>);\n"),
    StepKind.SLICE_READ: ("            pcat::decode_combine<HD, {elem}, BM>(slots, SPLITS, dr, "
                          "out, o_ss, o_sh, lse, Sq);\n"),
    # the kit's counter steps (split-K's), on the output tile's counter, one consumer's threads
    **counter_steps(me="wtid", counter="out_tile", last="(unsigned)SPLITS - 1u",
                    barrier=SPLIT_BARRIER, threads=128),
}
#: a narrow tile's partial (its slot's rows are O^T's columns)
_SLICE_NARROW = (f"            pcat::decode_slice_store_t<BN, HD, BM, {SPLIT_BARRIER}>(oacc, rows, "
                 "dr, slots + split * pcat::DECODE_SLOT<HD, BM>, nw, o);\n")


def decode_finish(consumers: Sequence[AgentProgram], elem: str, emitter: str,
                  narrow: bool = False) -> str:
    """The consumer's finish: the unsplit store, or split-KV's hand-off, each of the plan's
    reduction steps (the consumer's ``finish``) as its block, in the plan's order; ``narrow``:
    a narrow tile's (O^T's columns are the tile's rows)."""
    (consumer,) = consumers
    if not consumer.finish:
        return (_UNSPLIT_NARROW if narrow else _UNSPLIT).format(elem=elem)
    code = []
    for s in consumer.finish:
        if s.kind not in _SPLIT_STEPS:
            raise ProgramError(f"emitter {emitter}: no CUDA for decode's finish step "
                               f"{s.kind.value}")
        step = _SLICE_NARROW if narrow and s.kind == StepKind.SLICE_STORE else _SPLIT_STEPS[s.kind]
        code.append(step.replace("{elem}", elem))
    return _SPLIT_OPEN + "".join(code) + _SPLIT_CLOSE


def decode_header(head_dim: int, threads: int, smem: int) -> list[str]:
    """The source's comment lines on the arguments and the launch."""
    return [
        f"// Q: [B, Sq, Hq, D = {head_dim}] through a rank-4 TMA map of its own strides, read "
        "at (d, head, token, b) in boxes",
        "// of 64 columns x HB heads x TB tokens (the tile's 64 rows, token-major); K, V: "
        "[pages, page_size, Hkv, D]",
        "// (contiguous: [B, capacity, Hkv, D], one page a sequence) read at (d, kv head, row, "
        "page) in boxes of BN / CHUNKS rows,",
        "// the page from block_table[b] (null: b); seqlens: each sequence's cache length "
        "(int32); O: [B, Sq, Hq, D] at",
        "// strides (o_sb, o_ss, o_sh, 1); LSE: [B, Hq, Sq] fp32 (null: not stored); ws, "
        "counters: split-KV's workspace",
        "// (SPLITS x 64 x (D + 1) fp32 per output tile) and per-tile counters, zero between "
        "launches (null unsplit).",
        f"// Launch: block {threads} (warp group 0: producer; 1: the consumer), dynamic shared "
        f"memory {smem} bytes,",
        "// any grid (each CTA runs tiles blockIdx.x, + gridDim.x, ... of B x Hkv x HC x QT x "
        "SPLITS; decode_tiles.py)."]
