"""A kernel's source as the kit emitted it before session 18 (or 19), for an A/B of session 18's
two changes to how fast a consumer issues its wgmmas (and session 19's loads of the gradient
step's row vectors, :func:`as_session_18`), in one process:

* the k loops' descriptors: each operand's built once and stepped by constants
  (wgmma_h100.cuh's ``desc_step``), where every step built both from an address;
* the consumer index read through a warp shuffle (kit/frame.py), so ptxas keeps what it derives
  (the descriptors among it) in uniform registers, where it was ``wg - 1``.

:func:`as_session_17` puts both back in an attention kernel's emitted source (forward or
backward): ``attention_bwd_main_check.py --variants 'base;rewrite=session17'`` and
``attention_tiles.py --variants call,session-17-source`` take it.  The GEMM's kernels keep the
plain index (the shuffle gained nothing there); :func:`with_uniform_consumer` gives one the
shuffle, for ``gemm_issue_ab.py``.
"""
from __future__ import annotations

#: (today's text, the text before session 18) of each k loop: attention.cuh's qk and pv,
#: attention_bwd.cuh's dk, dq and dq_all (its st runs qk's loop since session 18; before, a
#: copy of it, which the qk pair's rewrite stands for)
PER_STEP_DESCRIPTORS = (
    ("""    const u64 da = pcgc::smem_desc_sw128_mn<BM * 128>(ds);
    const u64 db = pcgc::smem_desc_sw128_mn<BM * 128>(q);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
        MMA(acc, pcwg::desc_step(da, kk * 2048), pcwg::desc_step(db, kk * 2048));""",
     """#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
        MMA(acc, pcgc::smem_desc_sw128_mn<BM * 128>(ds + kk * 2048),
            pcgc::smem_desc_sw128_mn<BM * 128>(q + kk * 2048));"""),
    ("""    const u64 da = pcwg::smem_desc_sw128(ds);
    const u64 db = pcgc::smem_desc_sw128_mn<BN * 128>(k + consumer * KEYS * 128);
#pragma unroll
    for (int mi = 0; mi < BM / 64; ++mi)
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; ++kk)
            MMA(acc[mi], pcwg::desc_step(da, mi * 64 * 128 + kk * 32),
                pcwg::desc_step(db, kk * 2048), kk > 0);""",
     """#pragma unroll
    for (int mi = 0; mi < BM / 64; ++mi)
#pragma unroll
        for (int kk = 0; kk < KEYS / 16; ++kk)
            MMA(acc[mi], pcwg::smem_desc_sw128(ds + mi * 64 * 128 + kk * 32),
                pcgc::smem_desc_sw128_mn<BN * 128>(k + consumer * KEYS * 128 + kk * 2048),
                kk > 0);"""),
    ("""    const u64 da = pcwg::smem_desc_sw128(ds), db = pcgc::smem_desc_sw128_mn<BN * 128>(k);
#pragma unroll
    for (int mi = 0; mi < RB; ++mi)
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            MMA(acc[mi], pcwg::desc_step(da, (kk / (KEYS / 16)) * DS_BYTES + mi * 64 * 128
                                                + (kk % (KEYS / 16)) * 32),
                pcwg::desc_step(db, kk * 2048), kk > 0);""",
     """#pragma unroll
    for (int mi = 0; mi < RB; ++mi)
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            MMA(acc[mi], pcwg::smem_desc_sw128(ds + (kk / (KEYS / 16)) * DS_BYTES + mi * 64 * 128
                                               + (kk % (KEYS / 16)) * 32),
                pcgc::smem_desc_sw128_mn<BN * 128>(k + kk * 2048), kk > 0);"""),
    ("""    const u64 dq = pcwg::smem_desc_sw128(q + consumer * ROWS * 128), dk = pcwg::smem_desc_sw128(k);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
        MMA(s, pcwg::desc_step(dq, (kk / 4) * BM * 128 + (kk % 4) * 32),
            pcwg::desc_step(dk, (kk / 4) * BN * 128 + (kk % 4) * 32), kk > 0);""",
     """#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)
        MMA(s, pcwg::smem_desc_sw128(q + (kk / 4) * BM * 128 + consumer * ROWS * 128
                                     + (kk % 4) * 32),
            pcwg::smem_desc_sw128(k + (kk / 4) * BN * 128 + (kk % 4) * 32), kk > 0);"""),
    ("""    const u64 dv = pcgc::smem_desc_sw128_mn<BN * 128>(v);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        MMA(o, pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3],
            pcwg::desc_step(dv, kk * 2048));""",
     """#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
        MMA(o, pk[4 * kk], pk[4 * kk + 1], pk[4 * kk + 2], pk[4 * kk + 3],
            pcgc::smem_desc_sw128_mn<BN * 128>(v + kk * 2048));"""),
)


#: (today's line, the line before session 18) of the consumers' index (kit/frame.py)
CONSUMER_INDEX = ("[[maybe_unused]] const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);  "
                  "// warp-uniform: ptxas keeps what it derives in uniform registers",
                  "[[maybe_unused]] const int consumer = wg - 1;")


def with_uniform_consumer(src: str) -> str:
    """A GEMM kernel's ``src`` (the plain index) with the consumer index read through the warp
    shuffle, as the attention kernels read it: the A/B that kept it out of the GEMM's."""
    new, old = CONSUMER_INDEX
    assert src.count(old) == 1, "the consumer index line is not the kit's"
    return src.replace(old, new)


#: (today's text, the text before session 19) of the gradient steps' LSE and delta loads: each
#: column block's pair loaded where the block uses it, where RowPairs loads it two blocks ahead
ROW_PAIRS_AHEAD = (
    ("    RowPairs<BM, 1> ls(lse), dl(delta);  // two vectors: two loads a block ahead\n", ""),
    ("""        const float(&l)[2] = ls.block(c);
        const float(&d)[2] = dl.block(c);""",
     """        float l[2], d[2];
        row_pair(lse, col, l);
        row_pair(delta, col, d);"""),
    ("    RowPairs<BM> ls(lse);\n", ""),
    ("""        const float(&l)[2] = ls.block(c);
#pragma unroll""",
     """        float l[2];
        row_pair(lse, col, l);
#pragma unroll"""),
    ("    RowPairs<BM> dl(delta);\n", "    const int q = threadIdx.x % 4;\n"),
    ("        const float(&d)[2] = dl.block(c);\n",
     "        float d[2];\n        row_pair(delta, c * 8 + 2 * q, d);\n"),
)


def as_session_18(src: str) -> str:
    """A backward's ``src`` with its gradient steps' LSE and delta pairs loaded where each
    column block uses them (session 18's code), for the A/B of RowPairs: every edit must apply
    once (``grad`` holds two, ``prob`` and ``dscore`` one or two each)."""
    for new, old in ROW_PAIRS_AHEAD:
        assert src.count(new) == 1, f"not the gradient step of session 19: {new!r}"
        src = src.replace(new, old)
    return src


#: (today's text, the text before) of the one-step gradient's mask: one test per pair, where the
#: step branches once per query block between an unmasked and a masked form
PER_SCORE_MASK = (
    ("""                                          u32 delta, u32 ds, const Mask& mask, int row0, int key0,""",
     """                                          u32 delta, u32 ds, bool masked, const Mask& mask, int row0, int key0,"""),
    ("            const bool keep = !MASKED || mask.keeps(row0 + col + r, key0 + k0 + 8 * k);\n"
     "            const float x = keep ? s[4 * c + e] : -INFINITY;\n"
     "            p[e] = pcat::ex2_approx(fmaf(x, scale_log2, -l[r] * LOG2E));",
     "            const bool keep = !masked || mask.keeps(row0 + col + r, key0 + k0 + 8 * k);\n"
     "            const float x = keep ? s[4 * c + e] : -INFINITY;\n"
     "            p[e] = pcat::ex2_approx(fmaf(x, scale_log2, -l[r] * LOG2E));"),
    ("""    if (uniform_masked(masked))
        grad_step<BM, Elem, GATHER, true>(s, dp, pp, dsp, lse, delta, ds, mask, row0, key0,
                                          scale, scale_log2, bar);
    else
        grad_step<BM, Elem, GATHER, false>(s, dp, pp, dsp, lse, delta, ds, mask, row0, key0,
                                           scale, scale_log2, bar);""",
     """    grad_step<BM, Elem, GATHER, true>(s, dp, pp, dsp, lse, delta, ds, masked, mask, row0,
                                      key0, scale, scale_log2, bar);"""),
)


def per_score_mask(src: str) -> str:
    """A backward's ``src`` whose one-step gradient tests its mask per pair (session 18's
    code), where it branches once per query block between an unmasked and a masked form."""
    for new, old in PER_SCORE_MASK:
        assert src.count(new) == 1, f"not the gradient step of session 19: {new[:60]!r}"
        src = src.replace(new, old)
    return src


def grad_two_ahead(src: str) -> str:
    """A backward's ``src`` whose one-step gradient loads its LSE and delta pairs two column
    blocks ahead (as ``prob`` and ``dscore`` do), where it loads them one ahead."""
    new = "    RowPairs<BM, 1> ls(lse), dl(delta);"
    assert src.count(new) == 1, "not the gradient step of session 19"
    return src.replace(new, "    RowPairs<BM, 2> ls(lse), dl(delta);")


def as_session_17(src: str) -> str:
    """``src`` with the consumer index read plainly and every k loop of PER_STEP_DESCRIPTORS it
    holds put back (every kernel pastes the forward's two; a backward also holds its three)."""
    new, old = CONSUMER_INDEX
    assert src.count(new) == 1, "the consumer index line is not the kit's"
    src = src.replace(new, old)
    for new, old in PER_STEP_DESCRIPTORS:
        src = src.replace(new, old)
    return src


#: The forward's O stores in ``pcat::finish`` (each row's ``store_row``, its ``keep`` test).
O_STORES = ("p0, q, row < sq);", "p1, q, row + 8 < sq);")


def no_o_store(src: str) -> str:
    """A PROBE, not a kernel (its output is never written): the forward's ``src`` with its O
    stores behind a test no call passes (``sq < 0``), so the kernel's time without them bounds
    what any cheaper O store could gain (issue 37: S 1k against cuDNN)."""
    for old in O_STORES:
        assert src.count(old) == 1, "not pcat::finish's O stores"
        src = src.replace(old, old.replace("q, row", "q, sq < 0 && row"))
    return src


def o_store_8(src: str) -> str:
    """The forward's ``src`` with its O stores 8 bytes wide (pcat::store_row's pair exchange)
    at every head dim (the kernel's rule takes 8 from 128 columns up, 4 below)."""
    assert "PCAT_O_STORE_BYTES" in src, "no O store width to set"
    return "#define PCAT_O_STORE_BYTES 8\n" + src


def o_store_4(src: str) -> str:
    """An attention kernel's ``src`` with its O (or dK and dV) stores 4 bytes wide (session
    22's)."""
    assert "PCAT_O_STORE_BYTES" in src, "no O store width to set"
    return "#define PCAT_O_STORE_BYTES 4\n" + src
