"""Decoding over a KV cache (issue 38; docs/guide/attention.md, "Decoding over a KV cache"):
the trip rule and its proof, split-KV's hand-off proven by the core, the kernel's C bounds and
sync skeleton, its build, the split choice and the call's one-line refusals."""
from __future__ import annotations

import math

import attrs
import pytest

from pipeline_core.api import compile_named
from pipeline_core.plugin_api import SharedIssue
from pipeline_core.agents.prove_fixup import fixup_faults
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.proof import UnsafeScheduleError

from pipeline_core_nvidia_h100.sync_skeleton import SkeletonMismatch, check_skeleton
from pipeline_core_nvidia_h100.toolchain import compile_cubin, nvcc, sass_command, sass_of

from pipeline_core_schedules_attention import schedule as sched
from pipeline_core_schedules_attention.call import AttentionArgumentError
from pipeline_core_schedules_attention.decode_call import (BLOCKS, HEAD_DIMS, DecodeCall,
                                                           decode_params, kv_issuers,
                                                           plan_decode)
from pipeline_core_schedules_attention.decode_tiles import (DECODE_ROWS, MAX_SLOTS_PER_SM,
                                                            NARROW_ROWS, DecodeBounds,
                                                            DecodeProblem, choose_splits,
                                                            chunk_rows, narrow_rows,
                                                            tile_shape)
from pipeline_core_schedules_attention.emit_attention import emit_attention
from pipeline_core_schedules_attention.emit_decode import decode_bounds_exprs

NAME = "flash-attention-fwd"


def build(head_dim=128, causal=False, split=False, chunks=1, rows=DECODE_ROWS, **extra):
    return compile_named(NAME, params={**decode_params(head_dim, causal, split, chunks,
                                                       rows=rows), **extra},
                         target_args={"stages": str(BLOCKS[head_dim][1])})


@pytest.mark.parametrize("block_n,chunks", [(128, 1), (128, 2), (128, 8), (128, 16), (64, 1),
                                            (64, 4)])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_the_rule_covers_every_key_once_masks_and_gathers_from_the_right_pages(causal, split,
                                                                              block_n, chunks):
    rule = DecodeBounds(causal=causal, block_n=block_n, split=split, chunks=chunks)
    assert rule.coverage_faults() == ()
    assert [f for fix in rule.fixups() for f in fixup_faults(fix)] == []
    # the problems reach what the issue names: a page boundary inside a block, length 0, 1,
    # one page + 1, pages of whole blocks and larger, not a power of two, several splits
    problems = rule.problems()
    rows = block_n // chunks
    assert {p.page_size for p in problems} == ({0, block_n, 2 * block_n} if chunks == 1
                                               else {rows, 3 * rows})
    assert {0, 1, block_n + 1, rows + 1} <= {n for p in problems for n in p.lengths}
    assert {p.splits for p in problems} == ({2, 3, 5} if split else {1})


def test_a_page_size_the_kernels_copies_do_not_divide_is_refused():
    """Pages of 16 under a kernel of 2 copies a block (64 rows each) would cross pages: the
    call never pairs them (``DecodeCall.chunks``), and the rule's proof says why."""
    rule = DecodeBounds(causal=False, block_n=128, chunks=2)
    problem = DecodeProblem(lengths=(300,), sq=1, tokens=16, page_size=16)
    faults = rule._tile_faults(problem, 0, 300, 0)
    assert faults and "crosses the end of page" in faults[0]


@pytest.mark.parametrize("mutation,needle", [
    ({"split_shift": 1}, "no row sees"),
    ({"page_lag": 1}, "table entry"),
])
def test_a_split_start_or_a_page_read_after_its_use_is_refused_by_the_rules_proof(mutation,
                                                                                   needle):
    rule = attrs.evolve(DecodeBounds(causal=True, block_n=128, split=True, chunks=8),
                        **mutation)
    faults = rule.coverage_faults()
    assert faults and needle in faults[0]


@pytest.mark.parametrize("mutation,kind", [
    ({"arrivals_shift": -1}, H.SMEM_RAW),  # a partial read before its split published it
    ({"skip_split": 1}, H.MISSING_PRODUCT),  # the combine leaves a split out
    ({"split_shift": 1}, H.MISSING_PRODUCT),
])
def test_the_combines_mutations_are_refused_by_the_fixup_proof(mutation, kind):
    rule = attrs.evolve(DecodeBounds(causal=False, block_n=128, split=True), **mutation)
    kinds = {k for fix in rule.fixups() for k, _ in fixup_faults(fix)}
    assert kind in kinds


def test_a_mutated_rule_makes_the_compiled_plan_unsafe(monkeypatch):
    """The core runs the rule's proofs with the plan's: the same mutations through compile."""
    for mutation in ({"page_lag": 1}, {"skip_split": 1}):
        real = sched.FlashAttentionForward.bounds

        def bounds(self, real=real, mutation=mutation):
            return attrs.evolve(real(self), **mutation)

        monkeypatch.setattr(sched.FlashAttentionForward, "bounds", bounds)
        with pytest.raises(UnsafeScheduleError, match="MISSING_PRODUCT at trip_rule"):
            build(split=True, chunks=8)
        monkeypatch.undo()


@pytest.mark.parametrize("rows", [DECODE_ROWS, *NARROW_ROWS])
@pytest.mark.parametrize("chunks,grouped", [(1, False), (8, False), (8, True)])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_every_kernel_the_call_builds_is_proven_and_runs_the_plans_sync(head_dim, causal, split,
                                                                        chunks, grouped, rows):
    c = build(head_dim, causal, split, chunks, rows, kv_grouped=str(grouped).lower())
    assert c.proof.verdict.safe
    assert bool(c.plan.reduction) == split
    src = emit_attention(c)
    check_skeleton(c, src, once=True, label="decode")
    assert ("atomicAdd(counters + out_tile" in src) == split
    if split:  # a dropped release fence is a changed skeleton
        broken = src.replace("            __threadfence();\n", "", 1)
        with pytest.raises(SkeletonMismatch):
            check_skeleton(c, broken, once=True)


def _c(expr: str) -> str:
    return expr.replace("/", "//")


@pytest.mark.parametrize("causal", [False, True])
def test_the_kernels_bounds_are_the_rules(causal):
    """The tile lines' C (KV blocks visited, first masked, each split's share) evaluated on
    every problem of the rule's proof equals the rule (C's / truncates; the clamps make it
    Python's //: operands are never negative where it matters, which this checks too)."""
    rule = DecodeBounds(causal=causal, block_n=128, split=True)
    visited, first = decode_bounds_exprs(causal)
    for p in rule.problems():
        for length in p.lengths:
            for qt in range(-(-p.sq // p.tokens)):
                env = {"t0": qt * p.tokens, "TB": p.tokens, "Sq": p.sq, "Sk": length,
                       "BN": 128, "KV_BLOCKS": -(-length // 128), "max": max, "min": min}
                nb = eval(_c(visited), env)  # noqa: S307 - our own expression
                fm = eval(_c(first), {**env, "NB": nb})  # noqa: S307
                assert nb == rule.visited(qt, p.tokens, p.sq, length)
                assert fm == rule.first_masked(qt, p.tokens, p.sq, length)
                per = (nb + p.splits - 1) // p.splits
                shares = rule.splits_of(qt, p.tokens, p.sq, length, p.splits)
                assert [(s * per, max(0, min(per, nb - s * per))) for s in range(p.splits)] \
                    == [(sp.first, sp.trips) for sp in shares]


def test_the_tile_packs_a_groups_heads_with_tokens_into_64_rows():
    assert tile_shape(1) == (1, 64, 1)
    assert tile_shape(4) == (4, 16, 1)
    assert tile_shape(7) == (8, 8, 1)  # the next group's head rides in the spare row
    assert tile_shape(64) == (64, 1, 1)
    assert tile_shape(71) == (64, 1, 2)  # Falcon-7B's multi-query: two head chunks
    for g in range(1, 130):
        hb, tb, hc = tile_shape(g)
        assert hb * tb == DECODE_ROWS and hb * hc >= g and hb & (hb - 1) == 0
    assert chunk_rows(0, 128) == 128 and chunk_rows(16, 128) == 16
    assert chunk_rows(48, 128) == 16 and chunk_rows(256, 128) == 128


def test_several_producer_warps_share_a_paged_blocks_copies_and_warp_0_alone_loads_q():
    """-p kv_issuers: the call spreads a block's page chunks over up to 4 producer warps; each
    runs the ring's K and V waits before its own copies, warp 0 alone expects a stage's bytes
    and runs Q's ring (a warp that writes no Q stage waits on none of it)."""
    assert [kv_issuers(n) for n in (1, 2, 4, 8, 16)] == [1, 2, 4, 4, 4]
    src = emit_attention(build(128, False, True, 8, NARROW_ROWS[0], kv_grouped="true"))
    producer = src[src.index("pc:role producer"):src.index("pc:role consumers")]
    assert "if (lane == 0 && wtid < 128) {" in producer
    for line in producer.splitlines():
        if "mbar_expect_tx(" in line or "q_empty_bar" in line or "tma_load_4d(stage_q" in line:
            assert line.strip().startswith("if (wtid == 0) "), line
        if "mbar_wait(k_empty" in line or "mbar_wait(v_empty" in line:
            assert line.strip().startswith("mbar_wait("), line  # every issuer's
    assert producer.count("decode_kv_load<BN, HD, CHUNKS, KV_GROUPED, KV_ISSUERS>") == 4
    assert "constexpr int KV_ISSUERS = 4;" in src


def test_the_shared_copies_are_the_plans_record_proven_one_agent_a_warp_and_run_as_recorded():
    """-p kv_issuers lowers to the plan's SharedIssue (Q the lead's alone); the proof runs each
    issuing warp as an agent; the kernel's lead tests and its warp count are the skeleton's: a
    lead test dropped from a byte announcement, or added to a K wait, fails the check."""
    c = build(128, False, True, 8, NARROW_ROWS[0], kv_grouped="true")
    assert c.plan.shared_issue == SharedIssue(agent="producer", warps=4, lead=(sched.Q,))
    assert c.proof.verdict.safe
    assert c.proof.verdict.model["agents"][:4] == ["producer", "producer.warp1",
                                                   "producer.warp2", "producer.warp3"]
    src = emit_attention(c)
    check_skeleton(c, src, once=True, label="shared")
    for broken in (src.replace("if (wtid == 0) mbar_expect_tx(k_full", "mbar_expect_tx(k_full", 1),
                   src.replace("mbar_wait(k_empty", "if (wtid == 0) mbar_wait(k_empty", 1),
                   src.replace("if (lane == 0 && wtid < 128) {", "if (lane == 0 && wtid < 64) {",
                               1)):
        assert broken != src
        with pytest.raises(SkeletonMismatch, match="role producer"):
            check_skeleton(c, broken, once=True)
    assert build(128, False, True, 1).plan.shared_issue is None  # one thread: no record
    # one issuer: the plan's lines as they were, no guard
    plain = emit_attention(build(128, False, True, 1))
    assert "if (wtid == 0) {" in plain and "if (wtid == 0) mbar" not in plain


def test_a_narrow_tile_serves_a_kv_heads_every_query_or_is_not_taken():
    """The narrow tiles' 8 or 16 rows, the fewest that hold a KV head's queries: a group of 4 at
    one token (two token rows, one spare) or up to 4 tokens, of 8 at up to 2; never where a KV
    head's queries would need a second tile (its pages read twice)."""
    assert tile_shape(4, 8) == (4, 2, 1) and tile_shape(8, 8) == (8, 1, 1)
    assert tile_shape(16, 8) == (8, 1, 2) and tile_shape(4, 16) == (4, 4, 1)
    assert [narrow_rows(4, t) for t in (1, 2, 3, 4, 5)] == [8, 8, 16, 16, 0]
    assert [narrow_rows(8, t) for t in (1, 2, 3)] == [8, 16, 0]
    assert narrow_rows(7, 1) == 8 and narrow_rows(1, 16) == 16 and narrow_rows(16, 1) == 16
    assert narrow_rows(1, 17) == 0 and narrow_rows(32, 1) == 0
    for g in range(1, 40):
        for sq in range(1, 20):
            rows = narrow_rows(g, sq)
            fits = [r for r in NARROW_ROWS
                    if tile_shape(g, r)[2] * -(-sq // tile_shape(g, r)[1]) == 1]
            assert rows == (fits[0] if fits else 0)
    assert plan_decode(*args(sq=1)).rows == 8  # 32 / 8 heads, one token
    assert plan_decode(*args(sq=4)).rows == 16
    assert plan_decode(*args(sq=5)).rows == DECODE_ROWS
    assert plan_decode(*args(sq=1, hq=32, hkv=2)).rows == 16  # a group of 16
    assert plan_decode(*args(sq=1, hq=64, hkv=2)).rows == DECODE_ROWS
    c = plan_decode(*args(sq=1))
    assert c.shape == (4, 2, 1) and c.tiles == 3 * 8


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim,rows", [(64, 8), (128, 8), (256, 8), (128, 16)])
def test_a_narrow_tiles_wgmmas_take_the_queries_as_n(head_dim, rows, tmp_path):
    """A narrow kernel runs every wgmma at m64nN, N its rows (keys, or head dims, as M), its
    S^T and O^T N / 64 of the wide tile's MMA work, with no spill and no serialized wgmma."""
    proc, cubin = compile_cubin(emit_attention(build(head_dim, False, True, rows=rows)),
                                tmp_path, "narrow")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7519" not in proc.stderr and "serialized" not in proc.stderr
    sass = sass_of(cubin)
    assert sass is not None
    shapes = {line.split("HGMMA.")[1].split(".")[0] for line in sass.splitlines()
              if "HGMMA." in line}
    assert shapes == {f"64x{rows}x16"}
    bn = BLOCKS[head_dim][0]
    # S^T: BN / 64 halves x D / 16 k steps; O^T: D / 64 parts x BN / 16; each in two stretches
    assert sum("HGMMA." in line for line in sass.splitlines()) == \
        2 * (bn // 64 * head_dim // 16 + head_dim // 64 * bn // 16)


@pytest.mark.parametrize("tiles,blocks", [(8, 1024), (8, 64), (32, 256), (64, 64), (512, 64),
                                          (1, 2), (200, 1000)])
def test_the_split_count_fills_the_gpu_within_the_workspace(tiles, blocks):
    s = choose_splits(tiles, blocks, 132)
    assert 1 <= s <= blocks and (s == 1 or tiles * s <= MAX_SLOTS_PER_SM * 132)
    if tiles < 132 // 2 and blocks >= 64:  # a small batch over a long cache splits to fill
        assert tiles * s >= 0.9 * 132
    if tiles >= 132:  # a full wave already: no split
        assert s == 1


def test_the_decode_geometry_refuses_what_it_cannot_run_in_one_line():
    base = decode_params(128, False, False)
    for over, needle in (({"block_m": "128"}, "-p block_m: decode packs"),
                         ({"producer_registers": "24"}, "-p producer_registers: 24"),
                         ({"align": "bottom_right", "causal": "true"}, "-p align: decode"),
                         ({"decode": "false", "split_kv": "true"}, "-p split_kv:"),
                         ({"page_chunks": "32"}, "-p page_chunks"),
                         ({"decode": "false", "page_chunks": "2"}, "-p page_chunks:"),
                         ({"decode": "false", "kv_grouped": "true"}, "-p kv_grouped:"),
                         ({"page_chunks": "2", "kv_issuers": "4"}, "-p kv_issuers: 4 issuing"),
                         ({"decode": "false", "kv_issuers": "2"}, "-p kv_issuers:")):
        with pytest.raises(Exception) as info:
            compile_named(NAME, params={**base, **over}, target_args={"stages": "3"})
        assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("head_dim,causal,split,chunks,grouped", [
    (128, False, False, 1, False), (128, True, True, 8, True), (64, False, True, 2, True),
    (64, True, False, 16, False), (128, False, True, 16, True), (256, True, True, 1, False),
    (256, False, False, 8, True), (128, False, False, 8, False)])
def test_the_decode_kernels_build_without_spills(head_dim, causal, split, chunks, grouped,
                                                 tmp_path):
    proc, _ = compile_cubin(emit_attention(build(head_dim, causal, split, chunks,
                                                 kv_grouped=str(grouped).lower())), tmp_path,
                            "decode")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    # no control flow between the plan's wgmma.fence and PV's wgmma (decode_pv says why)
    assert "C7519" not in proc.stderr and "serialized" not in proc.stderr


def longest_load_run(sass: str) -> int:
    """The most 128-bit global loads issued with no FFMA or branch between them (the
    instructions that would consume a load or wait on a condition)."""
    best = run = 0
    for line in sass.splitlines():
        if "LDG.E.128" in line:
            run += 1
            best = max(best, run)
        elif "FFMA" in line or "BRA" in line:
            run = 0
    return best


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_combine_reads_eight_splits_before_it_uses_one(head_dim, tmp_path):
    """The split kernel's combine runs after everything else (the step's tail), so its reads of
    the splits' rows go out 8 splits at a time, not each behind the last one's use: 8 (D 256:
    16) 128-bit loads in a row.  The first combine read float2s two passes deep (none), and a
    branch on a split's lse held each split's loads behind it (1)."""
    proc, cubin = compile_cubin(emit_attention(build(head_dim, False, True, 1)), tmp_path,
                                "combine")
    assert proc.returncode == 0, proc.stderr
    sass = sass_of(cubin)
    assert sass is not None
    assert longest_load_run(sass) >= 8 * max(1, head_dim // 128)


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_grouped_stages_take_one_copy_a_page_chunk_not_one_a_part(head_dim, tmp_path):
    """Pages of 16 rows (a block's copies: block_n / 16): grouped, one rank-5 copy a chunk
    brings every 64-column part of its rows; the parts layout issues one rank-4 copy a part
    (Q's copies are rank 4 in both).  The single issuing thread's copies bounded the paged
    stream (KvLayout says why)."""
    chunks = BLOCKS[head_dim][0] // 16
    sass = {}
    for grouped in (False, True):
        proc, cubin = compile_cubin(emit_attention(build(head_dim, False, False, chunks,
                                                         kv_grouped=str(grouped).lower())),
                                    tmp_path, f"g{grouped}")
        assert proc.returncode == 0, proc.stderr
        sass[grouped] = sass_of(cubin)
    parts, grouped = sass[False], sass[True]
    q = grouped.count("UTMALDG.4D")  # Q's
    assert parts.count("UTMALDG.5D") == 0 and grouped.count("UTMALDG.5D") > 0
    assert grouped.count("UTMALDG.5D") * (head_dim // 64) == parts.count("UTMALDG.4D") - q


class Fake:
    """Just what plan_decode reads of a torch tensor (``strides``: its own, else dense)."""

    def __init__(self, shape, dtype="torch.bfloat16", cuda=True, device="cuda:0", grad=False,
                 strides=None):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, device
        self.requires_grad, self.strides = grad, strides

    def stride(self, i):
        return self.strides[i] if self.strides else math.prod(self.shape[i + 1:])

    def element_size(self):
        return 2

    def data_ptr(self):
        return 1 << 20


def args(b=3, sq=1, hq=32, hkv=8, d=128, pages=None, page=16, cap=4096, **over):
    q = Fake((b, sq, hq, d), **over.get("q", {}))
    shape = (b, cap, hkv, d) if pages is None else (pages, page, hkv, d)
    k, v = Fake(shape, **over.get("k", {})), Fake(shape, **over.get("v", {}))
    lens = over.get("lens", Fake((b,), dtype="torch.int32"))
    table = None if pages is None else over.get("table", Fake((b, 40), dtype="torch.int32"))
    return q, k, v, lens, table


def test_the_plan_takes_host_facts_only():
    c = plan_decode(*args(sq=4))
    assert c == DecodeCall(batch=3, tokens=4, heads=32, kv_heads=8, head_dim=128, dtype="bf16",
                           scale_log2=c.scale_log2, causal=True, paged=False, pages=3,
                           page_size=4096, table_pages=1, out_order=(0, 1, 2, 3))
    assert c.capacity == 4096 and c.group == 4 and c.tiles == 3 * 8 * 1
    assert math.isclose(c.scale_log2, 1.4426950408889634 / math.sqrt(128))
    paged = plan_decode(*args(pages=500, page=16))
    assert paged.paged and paged.capacity == 40 * 16 and paged.chunks == 8
    assert c.chunks == 1 and plan_decode(*args(pages=500, page=64)).chunks == 2
    assert plan_decode(*args(pages=500, page=48)).chunks == 8  # gcd: 16 rows a copy
    assert plan_decode(*args(pages=50, page=512)).chunks == 1
    assert not plan_decode(*args(sq=1)).causal  # one token: every key, causal or not
    # one copy a page chunk (grouped) where a block takes several and the heads are dense in a
    # row; a page's rows head-major ([pages, Hkv, page, D] seen as [pages, page, Hkv, D]) copy
    # each part apart; a contiguous cache and pages of a block or more take one chunk anyway
    assert paged.grouped and plan_decode(*args(pages=500, page=64)).grouped
    hnd = {"strides": (8 * 16 * 128, 128, 16 * 128, 1)}
    assert not plan_decode(*args(pages=500, page=16, k=hnd, v=hnd)).grouped
    assert not plan_decode(*args(pages=500, page=16, v=hnd)).grouped
    assert not c.grouped and not plan_decode(*args(pages=50, page=512)).grouped


@pytest.mark.parametrize("over,needle", [
    ({"q": {"grad": True}}, "attention_decode: q: needs a gradient, and decoding has no "
                            "backward"),
    ({"lens": Fake((3,), dtype="torch.int64")}, "attention_decode: cache_seqlens: dtype "
                                                "torch.int64"),
    ({"lens": Fake((4,), dtype="torch.int32")}, "attention_decode: cache_seqlens: shape (4,)"),
    ({"lens": -1}, "attention_decode: cache_seqlens: -1"),
    ({"k": {"dtype": "torch.float16"}}, "attention_decode: k: dtype torch.float16 differs"),
])
def test_bad_arguments_get_one_line_naming_them(over, needle):
    with pytest.raises(AttentionArgumentError) as info:
        plan_decode(*args(**over))
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)


def test_bad_caches_and_tables_get_one_line():
    cases = [(args(pages=500, page=12), "attention_decode: k_cache: pages of 12 rows"),
             (args(pages=500, table=Fake((3, 40), dtype="torch.int64")),
              "attention_decode: block_table: dtype torch.int64"),
             (args(pages=500, table=Fake((2, 40), dtype="torch.int32")),
              "attention_decode: block_table: shape (2, 40)"),
             ((Fake((3, 1, 32, 128)), Fake((5, 64, 8, 128)), Fake((5, 64, 8, 128)),
               Fake((3,), dtype="torch.int32"), None),
              "attention_decode: k_cache: 5 sequences for q's 3"),
             ((Fake((3, 1, 30, 128)), Fake((3, 64, 8, 128)), Fake((3, 64, 8, 128)),
               Fake((3,), dtype="torch.int32"), None), "attention_decode: k: 8 heads for q's 30"),
             ((Fake((3, 1, 32, 96)), Fake((3, 64, 8, 96)), Fake((3, 64, 8, 96)),
               Fake((3,), dtype="torch.int32"), None), "attention_decode: q: head dim 96"),
             ((Fake((3, 1, 32, 192)), Fake((3, 64, 8, 192)), Fake((3, 64, 8, 192)),
               Fake((3,), dtype="torch.int32"), None), "attention_decode: q: head dim 192")]
    for a, needle in cases:
        with pytest.raises(AttentionArgumentError) as info:
            plan_decode(*a)
        assert str(info.value).startswith(needle) and "\n" not in str(info.value)
    with pytest.raises(AttentionArgumentError, match="attention_decode: causal: 'x'"):
        plan_decode(*args(), causal="x")


def test_a_grouped_cache_map_folds_heads_and_parts_into_one_dimension(monkeypatch):
    """Pages of 16 rows, 8 KV heads, D 128 (a page's rows 2 KB apart, pages 64 KB apart, as a
    [pages, 2, page, Hkv, D] cache's K half lies): grouped, the map is [pages, 2 groups, 16
    head-parts, 8 rows, 64 columns] with the page's own stride, a group 8 rows on, the
    head-parts 64 elements apart, read one chunk's 2 groups of every part at a time; the parts
    layout reads the cache as it is, 16 rows by 64 columns."""
    from pipeline_core_schedules_attention import decode_call

    seen = []
    monkeypatch.setattr(decode_call, "strided_tensor_map",
                        lambda ptr, shape, strides, box, dtype: seen.append(
                            (tuple(shape), tuple(strides), tuple(box))))
    kv = {"strides": (2 * 16 * 8 * 128, 8 * 128, 128, 1)}  # K's half of a [pages, 2, ...] cache
    c = plan_decode(*args(pages=500, page=16, k=kv, v=kv))
    assert c.grouped and c.chunks == 8
    decode_call._kv_map(c, Fake((500, 16, 8, 128), **kv))
    assert seen.pop() == ((500, 2, 16, 8, 64), (2 * 16 * 8 * 128, 8 * 8 * 128, 64, 8 * 128, 1),
                          (1, 2, 2, 8, 64))
    parts = attrs.evolve(c, heads_dense=False)
    decode_call._kv_map(parts, Fake((500, 16, 8, 128), **kv))
    assert seen.pop() == ((500, 16, 8, 128), (2 * 16 * 8 * 128, 8 * 128, 128, 1), (1, 16, 1, 64))
