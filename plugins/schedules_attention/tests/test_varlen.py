"""The packed variable-length forward (``-p varlen``, ``attention_varlen``; docs/guide/attention.md,
"Packed variable-length batches"): its trip rule per sequence against every (row, key) pair of
mixed batches, its own proof and the proof of its plan (mutations refused), the tile scheduler
over the padded grid, the kernel's C bounds, the emitted kernel (and the fixed-length ones
untouched), no spills, and the call's one-line refusals (no GPU, no torch needed)."""
from __future__ import annotations

import math
import random
import re
import shutil
import subprocess
from itertools import accumulate

import attrs
import numpy as np
import pytest

from pipeline_core.api import compile_named
from pipeline_core.check.mutate import agent_mutations, mutate_compiled
from pipeline_core.check.verdict import HazardKind as H
from pipeline_core.errors import ProgramError
from pipeline_core.proof import UnsafeScheduleError, require_safe

from pipeline_core_nvidia_h100.sync_skeleton import check_skeleton
from pipeline_core_nvidia_h100.toolchain import compile_cubin, nvcc, sass_command, sass_of

from pipeline_core_schedules_attention.call import (HEAD_DIMS, LOG2E, AttentionArgumentError,
                                                    call_params, call_stages)
from pipeline_core_schedules_attention.emit_attention import (emit_attention, tile_bounds_exprs,
                                                              varlen_tiles)
from pipeline_core_schedules_attention.tile_order import busiest as fixed_busiest
from pipeline_core_schedules_attention.tile_order import (GROUPS, TIE, TileOrder, choose,
                                                          tile_at, varlen_choose,
                                                          varlen_order_exprs)
from pipeline_core_schedules_attention.tiles import LoopBounds
from pipeline_core_schedules_attention import varlen_call
from pipeline_core_schedules_attention.varlen_call import (VarlenCall, _kernel_key,
                                                           attention_varlen, plan_varlen,
                                                           varlen_params, varlen_source)
from pipeline_core_schedules_attention.varlen_tiles import VarlenBounds, busiest, scheduled

NAME = "flash-attention-fwd"
LENGTHS = (0, 1, 17, 128, 1000, 4096)
#: mixed batches of the issue's lengths, back to back (queries, keys per sequence)
BATCHES = [tuple((n, n) for n in LENGTHS), tuple((n, m) for n, m in zip(LENGTHS, LENGTHS[::-1])),
           ((17, 1000), (0, 17), (4096, 128), (1, 0), (1000, 1), (128, 4096), (1, 1)),
           ((1000, 1000), (1, 4096), (0, 0), (17, 17), (4096, 1000), (128, 0))]
ALIGNS = [(False, "top_left"), (True, "top_left"), (True, "bottom_right")]


def build(causal=False, align="top_left", **params):
    p = {"varlen": "true", "causal": str(causal).lower(), **params}
    if causal:
        p["align"] = align
    return compile_named(NAME, params=p, target_args={"stages": "2"})


def _visible(rule: LoopBounds, i: int, sq: int, sk: int) -> tuple[set[int], set[int]]:
    """(KV blocks holding a key some row of query block i keeps, those whose box, keys past
    the sequence's end included, holds a pair the mask drops) by every (row, key) pair."""
    off = sk - sq if rule.align == "bottom_right" else 0
    rows = range(i * rule.block_m, min((i + 1) * rule.block_m, sq))
    seen, masked = set(), set()
    for j in range(-(-sk // rule.block_n)):
        keep = [k < sk and (not rule.causal or k <= r + off)
                for r in rows for k in range(j * rule.block_n, (j + 1) * rule.block_n)]
        if any(keep):
            seen.add(j)
            if not all(keep):
                masked.add(j)
    return seen, masked


@pytest.mark.parametrize("causal,align", ALIGNS)
@pytest.mark.parametrize("bm,bn", [(128, 128), (128, 176), (192, 128)])
@pytest.mark.parametrize("batch", range(len(BATCHES)))
def test_each_sequences_tiles_visit_its_own_kv_blocks(causal, align, bm, bn, batch):
    """Over batches of lengths {0, 1, 17, 128, 1000, 4096} mixed: a sequence of no query row
    has no tile, each other has ceil(Sq / block_m); each tile visits exactly the KV blocks of
    its sequence some row sees and masks exactly those whose box holds a pair the mask drops
    (the diagonal's, and past the end: the next sequence's keys); the rule's counts are the
    sequences' in batch order, and its own proof finds nothing."""
    rule = VarlenBounds(causal=causal, block_m=bm, block_n=bn, align=align)
    lengths = BATCHES[batch]
    counts, firsts, at = rule.trip_counts(lengths), rule.masked_trips(lengths), 0
    assert len(counts) == len(firsts) == sum(-(-sq // bm) for sq, _ in lengths)
    for sq, sk in lengths:
        for i in range(-(-sq // bm)):
            seen, masked = _visible(rule, i, sq, sk)
            assert set(range(counts[at])) == seen, (sq, sk, i)
            assert set(range(firsts[at], counts[at])) == masked, (sq, sk, i)
            at += 1
    assert rule.coverage_faults() == ()


def test_the_rule_is_the_fixed_one_per_sequence_and_documents_itself():
    rule = VarlenBounds(causal=True, block_m=128, block_n=128, align="bottom_right")
    fixed = LoopBounds(causal=True, block_m=128, block_n=128, align="bottom_right")
    assert rule.trip_counts(((300, 100), (0, 5), (1, 1))) == (*fixed.trip_counts((300, 100)), 1)
    assert rule.trip_counts(((300, 100),)) == (0, 1, 1)  # rows before Sq - Sk = 200 see none
    assert not rule.uniform and rule.document()["varlen"] is True
    s = rule.sample(8)
    assert s is not None and s.key == "varlen" and s.full == 8 and s.numbers == {"longest": 1024}
    # lengths 1024, 529, 1, 0 and 256: 8 + 5 + 1 + 2 tiles, fewer KV blocks than padded
    assert len(s.trips) == 16 and sum(s.trips) < 8 * 16
    assert {0, 1} <= {sq for sq, _ in rule.problems()[0]}  # the proof's batches hold 0 and 1


@pytest.mark.parametrize("causal,align", ALIGNS)
@pytest.mark.parametrize("shift", [1, -1])
def test_a_per_sequence_kv_count_one_off_is_refused_by_the_proof(causal, align, shift):
    c = build(causal, align)
    rule = attrs.evolve(c.plan.trip_rule, kv_shift=shift)
    bad = require_safe(attrs.evolve(c, plan=attrs.evolve(c.plan, trip_rule=rule), proof=None),
                       allow_unsafe=True)
    assert {v.kind for v in bad.proof.verdict.violations} == {H.MISSING_PRODUCT}
    message = bad.proof.verdict.violations[0].message
    assert ("skips keys" if shift < 0 else "visits KV block") in message
    with pytest.raises(Exception, match="kv_shift"):
        emit_attention(bad)


@pytest.mark.parametrize("causal,align", ALIGNS)
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_varlen_plans_are_proven_over_tiles_of_different_counts(causal, align, head_dim):
    c = compile_named(NAME, params=varlen_params(head_dim, causal, align),
                      target_args={"stages": str(call_stages(head_dim, causal))})
    assert c.proof.safe and isinstance(c.plan.trip_rule, VarlenBounds)
    seqs = c.proof.verdict.model["trip_sequences"]
    assert [3, 0, 2] in seqs and [0, 0, 1] in seqs


@pytest.mark.parametrize("plan", ["varlen", "window"])
@pytest.mark.parametrize("agent", ["producer", "consumer0", "consumer1"])
def test_an_agent_whose_trips_disagree_is_refused_on_the_varlen_plan(agent, plan):
    """The fixed-length rule's mutations still fire: an agent that runs a KV block on a tile
    with none (clamp_trips), or one more or fewer on every tile (skew_trips); on the varlen
    plan and on a sliding window's (test_window.py)."""
    c = build(causal=True) if plan == "varlen" else compile_named(
        NAME, params={"causal": "true", "window_left": "256"}, target_args={"stages": "2"})
    picked = [m for m in agent_mutations(c.plan, ("clamp_trips", "skew_trips"))
              if m.agent == agent]
    assert len(picked) == 3
    for m in picked:
        with pytest.raises(UnsafeScheduleError, match="DEADLOCK"):
            mutate_compiled(c, m)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("grid", [1, 7, 132])
@pytest.mark.parametrize("batch", range(len(BATCHES)))
def test_the_scheduler_runs_every_sequences_tiles_once(causal, grid, batch):
    """Every (sequence, head, query block) once, none of a sequence of no row, whatever the
    grid, sequence by sequence; causal, each sequence's query blocks heaviest first."""
    lengths = [sq for sq, _ in BATCHES[batch]]
    want = {(s, h, m) for s, n in enumerate(lengths) for h in range(3) for m in range(-(-n // 128))}
    got = scheduled(lengths, heads=3, block_m=128, grid=grid, causal=causal)
    flat = [t for cta in got for t in cta]
    assert len(flat) == len(set(flat)) and set(flat) == want
    for cta in got:  # a CTA's tiles in launch order: sequences in batch order
        assert [s for s, _, _ in cta] == sorted(s for s, _, _ in cta)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hg", [1, 2, 8])
@pytest.mark.parametrize("heads,mts", [(1, 1), (3, 5), (16, 32), (4, 1), (12, 3)])
def test_the_order_in_c_is_pythons(causal, hg, heads, mts):
    """tile_order.varlen_order_exprs (the kernel's C) and tile_at agree on every tile
    of a sequence, each (head, query block) once; causal, each group of hg heads' query
    blocks heaviest first (the last group short where hg does not divide the heads)."""
    exprs = [e.split(" = ", 1) for e in varlen_order_exprs(causal)]
    seen = []
    for r in range(heads * mts):
        env = {"r": r, "seq": 2, "H": heads, "MTS": mts, "hg": hg, "min": min}
        for name, expr in exprs:
            env[name] = eval(_c(expr), env)  # noqa: S307 - our own expression
        at = tile_at(r, causal=causal, bh=heads, mt=mts, order=TileOrder(hg=hg))
        assert (env["bh"] - 2 * heads, env["tile_m"]) == at
        seen.append(at)
    assert sorted(seen) == [(h, m) for h in range(heads) for m in range(mts)]
    if causal:
        for g in range(0, heads, hg):
            group = [m for h, m in seen if g <= h < g + hg]
            assert group == sorted(group, reverse=True)


@pytest.mark.parametrize("heads,block_m", [(16, 128), (32, 192)])
def test_the_causal_order_balances_equal_lengths_as_the_fixed_call_does(heads, block_m):
    """On 4 sequences of 4096 (D 128: 16 heads on 128-row tiles, D 64: 32 on 192-row tiles) the
    varlen call's order leaves its busiest CTA no more work than the fixed-length call's choice
    (tile_order.choose) leaves its own, within choose's tie; on the 192-row tiles that takes
    the snake: no head grouping without it comes within 5%."""
    rule = LoopBounds(causal=True, block_m=block_m, block_n=128)
    trips = rule.trip_counts((4096, 4096))
    chosen = varlen_choose(trips, heads=heads, batch=4, grid=132, np=np)
    fixed = choose(trips, bh=4 * heads, grid=132, np=np)
    mean = 4 * heads * (sum(trips) + len(trips)) / 132
    equal = [(4096, 4096)] * 4
    got = busiest(equal, rule, heads=heads, grid=132, hg=chosen.hg, snake=chosen.snake)
    assert got <= (1 + TIE) * fixed_busiest(trips, bh=4 * heads, grid=132, order=fixed,
                                            np=np) / mean
    if block_m == 192:
        assert chosen.snake
        assert all(busiest(equal, rule, heads=heads, grid=132, hg=g) > 1.05 * got for g in GROUPS)


def _mixed(seed: int) -> list[tuple[int, int]]:
    rng, out = random.Random(seed), []
    while sum(out) < 16384 - 100:
        out.append(min(rng.randint(100, 4096), 16384 - sum(out)))
    return [(n, n) for n in out]


@pytest.mark.parametrize("bm,bn,heads", [(128, 176, 16), (192, 128, 32)])
def test_round_robin_over_the_batchs_tiles_balances_the_ctas(bm, bn, heads):
    """The benchmark's mixed batches (100-4096 tokens, 16k in all) on 132 CTAs, not causal:
    the busiest CTA's work within 1.10x the mean, where the padded grid's skipped positions gave
    up to 1.43x (varlen_tiles.py)."""
    rule = LoopBounds(block_m=bm, block_n=bn)
    for seed in range(6):
        assert busiest(_mixed(seed), rule, heads=heads, grid=132) <= 1.10


def _c(expr: str) -> str:
    return expr.replace("/", "//")


@pytest.mark.parametrize("causal,align", ALIGNS)
def test_the_kernels_per_sequence_bounds_are_the_rules(causal, align):
    """The C the varlen kernel sets KT and FM with (the fixed-length rule's, of the tile's own
    Sq and Sk), evaluated for every sequence of the mixed batches, gives VarlenBounds'."""
    rule = VarlenBounds(causal=causal, block_m=128, block_n=128, align=align)
    trips, first = map(_c, tile_bounds_exprs(rule))
    for lengths in BATCHES:
        for sq, sk in lengths:
            env = {"Sq": sq, "Sk": sk, "KV_BLOCKS": rule.blocks(sk), "min": min, "max": max}
            for i in range(-(-sq // 128)):
                kt = eval(trips, {**env, "tile_m": i})  # noqa: S307 - our own expression
                assert kt == rule.trips(i, sq, sk)
                assert eval(first, {**env, "tile_m": i, "KT": kt}) == rule.first_masked(i, sq, sk)


def _span(cu: list[int], s: int, total: int) -> tuple[int, int]:
    """The kernel's ``span`` in Python: (first row, length), clamped."""
    first = min(max(cu[s], 0), total)
    return first, min(max(cu[s + 1], first), total) - first


def test_the_spans_stay_inside_the_tensors_whatever_cu_seqlens_hold():
    """Out-of-order or out-of-range ends give empty or clipped sequences, never rows outside
    [0, total): the host checks no value (a sync), the kernel clamps."""
    cu, total = [0, 5, 3, 9, 40, -2], 20
    spans = [_span(cu, s, total) for s in range(len(cu) - 1)]
    assert spans == [(0, 5), (5, 0), (3, 6), (9, 11), (20, 0)]
    assert all(0 <= a and a + n <= total for a, n in spans)


@pytest.mark.parametrize("causal,align", ALIGNS)
def test_the_varlen_kernel_reads_each_sequence_from_its_first_row(causal, align):
    c = build(causal, align, pingpong="false")
    src = emit_attention(c)
    check_skeleton(c, src, once=True, label="varlen")
    assert re.search(r"const int\* __restrict__ cu_q, const int\* __restrict__ cu_k,\s+int B, "
                     r"int TQ, int TK, float scale_log2, int group, int hg, int snake, int H,\s+"
                     r"long long o_sh, long long o_ss\) \{", src)
    assert src.count("for (int k = 0, tile = position(0); locate(tile, seq, first); "
                     "tile = position(++k), rb += KT, ++o) {") == 2
    assert src.count("const int " + ", ".join(varlen_order_exprs(causal)) + ";") == 2
    assert src.count("span(cu_q, seq, TQ, q0), Sk = span(cu_k, seq, TK, k0)") == 2
    loads = re.findall(r"tma_load_4d\(stage_(\w)\([^;]*?c \* 64, ([^;]*)\);", src)
    assert {(x, a) for x, a in loads} == {("q", "q0 + tile_m * BM, bh % H, 0"),
                                          ("k", "k0 + t * BN, bh % H / group, 0"),
                                          ("v", "k0 + t * BN, bh % H / group, 0")}
    assert "(long long)q0 * o_ss + (long long)(bh % H) * o_sh, o_ss," in src
    assert "LSE + (long long)(bh % H) * TQ + q0, 0, Sq);" in src
    mask = (f"pcat::Causal{{Sk, {'(Sk - Sq)' if align == 'bottom_right' else '0'}}}"
            if causal else "pcat::KeyTail{Sk}")
    assert f"{mask}, t, FM, scale_log2);" in src
    plain = emit_attention(compile_named(NAME, params={"causal": str(causal).lower()},
                                         target_args={"stages": "2"}))
    assert "locate" not in plain and "cu_q" not in plain


@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "bottom_right")])
def test_a_kernel_built_without_the_lse_stores_none_and_keeps_the_rest(causal, align):
    """``-p lse=false`` (a call that does not return the LSE): the finish stores O alone, the
    LSE argument never read; every other line of the kernel is the LSE kernel's, its skeleton
    still checked."""
    with_lse = emit_attention(build(causal, align))
    without = emit_attention(build(causal, align, lse="false"))
    check_skeleton(build(causal, align, lse="false"), without, once=True, label="varlen")
    store = "LSE == nullptr ? nullptr : LSE + (long long)(bh % H) * TQ + q0, 0, Sq);"
    assert store in with_lse and store not in without
    assert "                nullptr, 0, Sq);" in without
    body = [ln for ln in without.splitlines() if "LSE" not in ln and "nullptr, 0, Sq" not in ln]
    assert body == [ln for ln in with_lse.splitlines()
                    if "LSE" not in ln and "nullptr, 0, Sq" not in ln]
    assert " LSE" in without.split("pc_flash_attention_fwd(", 1)[1]  # one signature for both


def test_lse_false_is_refused_with_decode_in_one_line():
    with pytest.raises(ProgramError, match=r"-p lse: false is not built for -p decode .* drop "
                                           r"-p lse"):
        compile_named(NAME, params={"lse": "false", "decode": "true", "block_m": "64",
                                    "consumers": "1", "pingpong": "false"},
                      target_args={"stages": "2"})


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "bottom_right")])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("lse", [True, False])
def test_the_varlen_kernels_build_without_spills(head_dim, causal, align, short, lse, tmp_path):
    c = compile_named(NAME, params=varlen_params(head_dim, causal, align, short, lse),
                      target_args={"stages": str(call_stages(head_dim, causal, short))})
    proc, _ = compile_cubin(emit_attention(c), tmp_path, "varlen")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "serialized" not in proc.stderr and "warning" not in proc.stderr.lower()


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "bottom_right")])
@pytest.mark.parametrize("lse", [True, False])
def test_the_varlen_kernel_of_v_s_own_head_dim_builds_without_spills(causal, align, lse,
                                                                     tmp_path):
    """The packed 192 / 128 kernel (v's own head dim) builds with no spill: the varlen state
    (the sequences' spans, the cursor) beside O of 128 columns."""
    c = compile_named(NAME, params=varlen_params(192, causal, align, False, lse, 128),
                      target_args={"stages": str(call_stages(192, causal, head_dim_v=128))})
    proc, _ = compile_cubin(emit_attention(c), tmp_path, "varlen_v")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "serialized" not in proc.stderr and "warning" not in proc.stderr.lower()


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_varlen_kernels_build_the_consumers_descriptors_in_uniform_registers(head_dim,
                                                                                 tmp_path):
    """The consumers' KT and FM come from cu_seqlens loads, which the compiler cannot prove
    warp-uniform.  Before session 18 that put the ring's position in vector registers and every
    wgmma descriptor of the KV loop was built there and moved to a uniform register (at D 128
    causal 100 moves, R2UR, against the fixed-length kernel's 48) unless ``-p uniform_tiles``;
    now each k loop builds its descriptors once from a warp-uniform consumer index and steps
    them (wgmma_h100.cuh's desc_step, kit/frame.py's uniform_consumer), so every varlen kernel,
    with the option or without, moves no more than the fixed-length kernel plus a few for the
    sequence's spans."""
    moves = {}
    base = {**varlen_params(head_dim, True, lse=False), "uniform_tiles": "false"}
    for name, params in (("fixed", call_params(head_dim, True)), ("varlen", base),
                         ("uniform", {**base, "uniform_tiles": "true"})):
        c = compile_named(NAME, params=params,
                          target_args={"stages": str(call_stages(head_dim, True))})
        proc, cubin = compile_cubin(emit_attention(c), tmp_path, name)
        assert proc.returncode == 0, proc.stderr
        sass = sass_of(cubin)
        assert sass is not None
        moves[name] = sass.count("R2UR ")
    assert max(moves["varlen"], moves["uniform"]) <= moves["fixed"] + 8, moves


def test_uniform_tiles_is_taken_where_it_measured_faster_and_refused_without_varlen(monkeypatch):
    """The call takes -p uniform_tiles where varlen_call.UNIFORM_TILES names the head dim and
    causality (nowhere since session 20's measurement), and the kernel then reduces KT and FM
    in the consumers alone; the parameter is refused without -p varlen."""
    for d in (64, 128):
        for causal in (False, True):
            assert "uniform_tiles" not in varlen_params(d, causal)
    monkeypatch.setattr(varlen_call, "UNIFORM_TILES", frozenset({(128, True)}))
    assert varlen_params(128, True).get("uniform_tiles") == "true"
    assert "uniform_tiles" not in varlen_params(128, False)
    src = emit_attention(build(True, uniform_tiles="true"))
    assert src.count("KT = __reduce_min_sync(0xffffffffu, KT);") == 1  # the consumers' alone
    assert "__reduce_min_sync" not in emit_attention(build(True))
    with pytest.raises(ProgramError, match=r"-p uniform_tiles: is built for -p varlen only"):
        compile_named(NAME, params={"uniform_tiles": "true"}, target_args={"stages": "2"})


_CPP = shutil.which("g++") or shutil.which("c++")


def _run_tile_loop(tmp_path, lengths, *, heads, hg, grid, causal, align, bm=128, bn=128,
                   snake=False, window=(-1, -1)):
    """The varlen kernel's tile loop as emitted (emit_attention.varlen_tiles: the counts, the
    consumers' loop head and tile lines, the rule's C), built for the host with ``__ldg`` a
    plain read and run for every CTA of ``grid``: (cta, seq, head, tile_m, Sq, Sk, q0, k0, KT,
    FM, KF, LM) of each tile in each CTA's order (KF and LM 0 without a window)."""
    rule = VarlenBounds(causal=causal, block_m=bm, block_n=bn, align=align,
                        window_left=window[0], window_right=window[1])
    loop = varlen_tiles(rule)
    kf_lm = "KF, LM" if rule.windowed else "0, 0"
    cu = [list(accumulate([0, *(n[i] for n in lengths)])) for i in (0, 1)]
    src = "\n".join([
        "#include <cstdio>", "#include <algorithm>", "using std::min; using std::max;",
        "#define __ldg(p) (*(p))", "#define __restrict__", "struct Dim { unsigned x; };",
        "#define __reduce_min_sync(mask, v) (v)",
        "int main() {",
        f"const int cu_q_[] = {{{', '.join(map(str, cu[0]))}}}, "
        f"cu_k_[] = {{{', '.join(map(str, cu[1]))}}};",
        "const int *cu_q = cu_q_, *cu_k = cu_k_;",
        f"const int B = {len(lengths)}, TQ = {cu[0][-1]}, TK = {cu[1][-1]}, H = {heads}, "
        f"hg = {hg}, snake = {int(snake)};",
        f"constexpr int BM = {bm}, BN = {bn};", f"const Dim gridDim = {{{grid}u}};",
        "Dim blockIdx = {0u};  // each CTA's in turn (the counts' lambdas read it)",
        *loop.counts,
        "for (unsigned cta = 0; cta < gridDim.x; ++cta) {", "blockIdx.x = cta;",
        *loop.consumers.head, *loop.consumers.tile,
        'std::printf("%u %d %d %d %d %d %d %d %d %d %d %d\\n", cta, seq, bh % H, tile_m, Sq, '
        f"Sk, q0, k0, KT, FM, {kf_lm});",
        "}", "}", "}"])
    (tmp_path / "loop.cpp").write_text(src)
    build = subprocess.run([_CPP or "c++", "-std=c++17", "-o", str(tmp_path / "loop"),
                            str(tmp_path / "loop.cpp")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(tmp_path / "loop")], capture_output=True, text=True, check=True)
    return [tuple(map(int, line.split())) for line in out.stdout.splitlines()], rule, cu


@pytest.mark.skipif(_CPP is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("causal,align,hg,snake", [(False, "top_left", 8, False),
                                                   (True, "top_left", 2, False),
                                                   (True, "bottom_right", 8, False),
                                                   (True, "top_left", 2, True),
                                                   (True, "bottom_right", 8, True)])
def test_the_emitted_tile_loop_runs_the_schedulers_tiles_with_the_rules_bounds(
        tmp_path, causal, align, hg, snake):
    """The kernel's own C of the tile loop, run on the host: each CTA runs exactly
    varlen_tiles.scheduled's tiles in its order, each from its sequence's first rows with the
    rule's KT and FM of that sequence's lengths (the mixed batches of lengths 0, 1, 17, 128,
    1000, 4096); every tile of the batch runs once, with the snake too (its last round, which
    the batch fills in part, runs backwards: the tiles go to the CTAs at its end)."""
    for lengths in BATCHES:
        got, rule, cu = _run_tile_loop(tmp_path, lengths, heads=3, hg=hg, grid=7,
                                       causal=causal, align=align, snake=snake)
        want = []
        plan = scheduled([q for q, _ in lengths], heads=3, block_m=128, grid=7, causal=causal,
                         hg=hg, snake=snake)
        every = [t for cta in plan for t in cta]
        assert sorted(every) == sorted(set(every)) and len(every) == sum(
            3 * -(-q // 128) for q, _ in lengths)
        for cta, tiles in enumerate(plan):
            for s, h, m in tiles:
                sq, sk = lengths[s]
                kt = rule.trips(m, sq, sk)
                want.append((cta, s, h, m, sq, sk, cu[0][s], cu[1][s], kt,
                             rule.first_masked(m, sq, sk), 0, 0))
        assert got == want


@pytest.mark.skipif(_CPP is None, reason="needs a host C++ compiler")
@pytest.mark.parametrize("causal,window", [(True, (300, -1)), (False, (200, 0)),
                                           (False, (100, 40)), (False, (-1, 130)),
                                           (True, (0, -1))])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_the_emitted_windowed_tile_loop_runs_each_sequences_window(tmp_path, causal, window,
                                                                    align):
    """Windowed, the kernel's own C of the tile loop, run on the host over the mixed batches:
    each tile starts at the rule's first KV block of its sequence, visits the rule's count and
    masks exactly the blocks the rule masks (the window's left edge before LM, its right edge
    or the key tail from FM), each sequence's window at its own diagonal."""
    for lengths in BATCHES:
        got, rule, _ = _run_tile_loop(tmp_path, lengths, heads=2, hg=2, grid=5, causal=causal,
                                      align=align, window=window)
        assert len(got) == sum(2 * -(-q // 128) for q, _ in lengths)
        for _, s, _, m, sq, sk, _, _, kt, fm, kf, lm in got:
            assert (sq, sk) == lengths[s]
            assert (kf, kt) == (rule.kv_first(m, sq, sk), rule.trips(m, sq, sk)), (sq, sk, m)
            assert [kf + t < lm or kf + t >= fm for t in range(kt)] == [
                rule.masked(m, t, sq, sk) for t in range(kt)], (sq, sk, m)


class Fake:
    """Just what plan_varlen reads of a torch tensor."""

    def __init__(self, shape, dtype="torch.bfloat16", cuda=True, device="cuda:0", grad=False,
                 strided=False):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, device
        self.requires_grad, self._strided = grad, strided

    def stride(self, i):
        dense = math.prod(self.shape[i + 1:])
        return dense * 2 if self._strided else dense

    def element_size(self):
        return 2

    def data_ptr(self):
        return 1 << 20


def args(tq=300, tk=400, hq=4, hkv=2, d=64, batch=3, **over):
    q = Fake((tq, hq, d), **over.get("q", {}))
    k = Fake((tk, hkv, d), **over.get("k", {}))
    v = Fake((tk, hkv, d), **over.get("v", {}))
    cq = Fake((batch + 1,), **{"dtype": "torch.int32", **over.get("cq", {})})
    ck = Fake((batch + 1,), **{"dtype": "torch.int32", **over.get("ck", {})})
    return q, k, v, cq, ck, over.get("mq", 200), over.get("mk", 250)


def test_the_plan_takes_host_facts_only():
    c = plan_varlen(*args(), causal="bottom_right")
    assert c == VarlenCall(total_q=300, total_k=400, batch=3, heads=4, kv_heads=2, max_q=200,
                           max_k=250, head_dim=64, dtype="bf16", scale_log2=c.scale_log2,
                           causal=True, align="bottom_right", out_order=(0, 1, 2))
    assert c.group == 2 and c.short and math.isclose(c.scale_log2, 1.4426950408889634 / 8)
    assert plan_varlen(*args(mq=10**6)).max_q == 300  # no sequence is longer than the tensor
    assert c.out_strides == (4 * 64, 64, 1)


@pytest.mark.parametrize("over,needle", [
    ({"cq": {"dtype": "torch.int64"}}, "attention_varlen: cu_seqlens_q: dtype torch.int64; "
                                       "pass a torch.int32"),
    ({"ck": {"device": "cpu"}}, "attention_varlen: cu_seqlens_k: on cpu, q on cuda:0"),
    ({"ck": {"strided": True}}, "attention_varlen: cu_seqlens_k: not contiguous"),
    ({"q": {"grad": True}}, "attention_varlen: q: needs a gradient, and the varlen backward is "
                            "not built yet"),
    ({"q": {"dtype": "torch.float32"}}, "attention_varlen: q: dtype torch.float32"),
    ({"v": {"cuda": False}}, "attention_varlen: v: a CPU tensor"),
    ({"mq": -1}, "attention_varlen: max_seqlen_q: -1; pass the longest"),
    ({"mk": True}, "attention_varlen: max_seqlen_k: True; pass the longest"),
])
def test_bad_arguments_get_one_line_naming_them(over, needle):
    with pytest.raises(AttentionArgumentError) as info:
        plan_varlen(*args(**over))
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)


def test_wrong_lengths_shapes_and_heads_get_one_line():
    q, k, v, cq, ck, mq, mk = args()
    cases = [((q, k, v, cq, Fake((3,), dtype="torch.int32"), mq, mk),
              "attention_varlen: cu_seqlens_k: 2 sequences, cu_seqlens_q 3"),
             ((q, k, v, Fake((1,), dtype="torch.int32"), ck, mq, mk),
              "attention_varlen: cu_seqlens_q: shape (1,); pass [batch + 1]"),
             ((Fake((2, 300, 4, 64)), k, v, cq, ck, mq, mk),
              "attention_varlen: q: shape (2, 300, 4, 64); pass packed [total_tokens, heads, D]"),
             ((q, Fake((400, 3, 64)), Fake((400, 3, 64)), cq, ck, mq, mk),
              "attention_varlen: k: 3 heads for q's 4"),
             ((q, k, Fake((401, 2, 64)), cq, ck, mq, mk), "attention_varlen: v: shape"),
             ((Fake((300, 4, 80)), k, v, cq, ck, mq, mk), "attention_varlen: q: head dim 80")]
    for a, needle in cases:
        with pytest.raises(AttentionArgumentError) as info:
            plan_varlen(*a)
        assert str(info.value).startswith(needle) and "\n" not in str(info.value)
    with pytest.raises(AttentionArgumentError, match="attention: causal: 'diagonal'"):
        plan_varlen(*args(), causal="diagonal")
    with pytest.raises(AttentionArgumentError, match="attention_varlen: scale: 0"):
        plan_varlen(*args(), scale=0)



def test_the_packed_call_stores_the_lse_by_the_fixed_length_calls_rule():
    """call.stores_lse, one rule for both calls: the LSE kernel where the LSE is returned or
    where call.LSE_KEPT holds (D 128 causal), else the kernel without the store; the GPU
    check's prebuild list (VARIANTS) holds exactly the kernels that rule builds."""
    from pipeline_core_schedules_attention.call import stores_lse
    from pipeline_core_schedules_attention.varlen_call import VARIANTS

    assert stores_lse(128, True, False) and stores_lse(64, False, True)
    assert not stores_lse(64, True, False) and not stores_lse(128, False, False)
    kinds = {(d, c): set() for d, _, c, _, _, _, *_ in VARIANTS}
    for d, _, c, _, _, lse, *_ in VARIANTS:
        kinds[d, c].add(lse)
    assert kinds == {(d, c): {True} if (d, c) == (128, True) else {False, True}
                     for d, c in kinds}


def test_the_packed_call_pads_head_dims_by_attentions_rule():
    """attention_varlen pads by call.pad_head_dims, attention()'s one rule: the kernels' head
    dims run as they are (no torch call spent), a k whose head dim is not q's is named in the
    packed call's own line (v's may differ: DeepSeek's MLA prefill, 192 / 128)."""
    from pipeline_core_schedules_attention.call import pad_head_dims
    from pipeline_core_schedules_attention.varlen_call import _fail, attention_varlen

    for d in (64, 128):
        q, k, v = Fake((300, 4, d)), Fake((400, 2, d)), Fake((400, 2, d))
        assert pad_head_dims(_fail, q, k, v, rank=3, scale=None, differentiable=False) is None
    q, k, v, cq, ck, mq, mk = args()
    with pytest.raises(AttentionArgumentError) as info:
        attention_varlen(Fake((300, 4, 192)), Fake((400, 2, 128)), Fake((400, 2, 128)), cq, ck,
                         mq, mk)
    assert str(info.value).startswith("attention_varlen: k: head dim 128 differs from q's 192")
    assert "\n" not in str(info.value)


def test_the_packed_call_runs_v_s_own_head_dim_on_its_kernel():
    """DeepSeek's MLA prefill packed (q and k 192, v 128): plan_varlen keeps v's head dim (the
    output [total_q, Hq, 128] in q's layout), and the kernel it keys is -p varlen with
    -p head_dim_v=128 on call.VALUE_TILES' tile, proven SAFE; a pair without a kernel is
    refused in one line naming v."""
    from pipeline_core.api import compile_named
    from pipeline_core_schedules_attention.call import call_stages
    from pipeline_core_schedules_attention.varlen_call import VARIANTS, varlen_params

    q, k, v = Fake((300, 4, 192)), Fake((400, 2, 192)), Fake((400, 2, 128))
    _, _, _, cq, ck, mq, mk = args()
    c = plan_varlen(q, k, v, cq, ck, mq, mk, causal="bottom_right")
    assert (c.head_dim, c.head_dim_v, c.v_dim) == (192, 128, 128) and not c.short
    assert c.out_strides == (4 * 128, 128, 1)
    assert {v[-1] for v in VARIANTS if len(v) == 7} == {128}
    compiled = compile_named("flash-attention-fwd",
                             params=varlen_params(192, True, "bottom_right", head_dim_v=128),
                             target_args={"stages": str(call_stages(192, True,
                                                                    head_dim_v=128))})
    assert compiled.proof.safe
    g = compiled.launch.geometry
    assert g.varlen and (g.head_dim, g.v_dim, g.block_n) == (192, 128, 128)
    with pytest.raises(AttentionArgumentError) as info:
        plan_varlen(Fake((300, 4, 128)), Fake((400, 2, 128)), Fake((400, 2, 64)), cq, ck, mq,
                    mk)
    assert str(info.value).startswith("attention_varlen: v: head dim 64, q's 128: a kernel "
                                      "takes v's own head dim at 192 / 128")


# --- sliding windows and the logit softcap on packed batches (-p varlen with -p window_left /
# window_right / softcap): the rule per sequence, its proof, the kernels, the call ---------

#: (causal, window): left-only under the mask, both sides, right-only, a row's own key, wide
PACKED_WINDOWS = [(True, (300, -1)), (False, (200, 0)), (False, (100, 40)), (False, (-1, 130)),
           (True, (0, -1)), (False, (5000, 7))]


def _rules(causal: bool, window: tuple[int, int], align: str, bm: int = 128, bn: int = 128):
    kw = dict(causal=causal, block_m=bm, block_n=bn, align=align, window_left=window[0],
              window_right=-1 if causal else window[1])
    return VarlenBounds(**kw), LoopBounds(**kw)


@pytest.mark.parametrize("causal,window", PACKED_WINDOWS)
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("bm,bn", [(128, 128), (128, 80), (192, 128)])
def test_each_sequence_runs_the_fixed_length_window_at_its_own_lengths(causal, window, align,
                                                                       bm, bn):
    """The packed rule's counts are the fixed-length windowed rule's, sequence by sequence (a
    window aligned at each sequence's own diagonal), over the mixed batches; its own proof finds
    nothing, over the batches it checks, one of which holds the window's edge problems."""
    rule, fixed = _rules(causal, window, align, bm, bn)
    for batch in BATCHES:
        assert rule.trip_counts(batch) == tuple(t for sq, sk in batch
                                                for t in fixed.trip_counts((sq, sk)))
        assert rule.masked_trips(batch) == tuple(t for sq, sk in batch
                                                 for t in fixed.masked_trips((sq, sk)))
    assert rule.coverage_faults() == ()
    problems = rule.problems()
    assert len(problems) == 4 and set(fixed.proof_problems()) <= set(problems[-1])
    assert {(0, 0), (1, 1)} <= set(problems[-1])


@pytest.mark.parametrize("causal,window", [w for w in PACKED_WINDOWS if w[1][0] > 0])
def test_the_rules_proof_refuses_a_window_start_one_block_late_or_a_count_one_off(causal,
                                                                                  window):
    rule, _ = _rules(causal, window, "bottom_right")
    late = attrs.evolve(rule, start_shift=1).coverage_faults()
    assert late and "skips keys" in late[0] and "of sequence" in late[0]
    for shift, needle in ((1, "visits KV block"), (-1, "skips keys")):
        faults = attrs.evolve(rule, kv_shift=shift).coverage_faults()
        assert faults and needle in faults[0], (shift, faults[:1])


def _compiled(d: int, causal: bool, window: tuple[int, int], softcap: bool):
    align = "top_left" if causal else "bottom_right"
    reach = (window[0], -1) if causal else window
    return varlen_source(d, "bf16", causal, align, window=reach, softcap=softcap)


#: (head dim, causal, window, softcap): each head dim once, both masks, with and without the cap
WINDOW_VARIANTS = [(64, True, (256, -1), True), (96, False, (128, 0), False), (128, True, (300, -1), False),
            (128, False, (64, 64), True), (192, False, (-1, -1), True), (256, True, (512, -1), True)]


@pytest.mark.parametrize("d,causal,window,softcap", WINDOW_VARIANTS)
def test_packed_window_and_softcap_kernels_are_proven_and_emit_their_steps(d, causal, window,
                                                                           softcap):
    compiled, src = _compiled(d, causal, window, softcap)
    rule = compiled.plan.trip_rule
    assert compiled.proof.safe and isinstance(rule, VarlenBounds)
    assert rule.windowed == (window != (-1, -1))
    assert ("pcat::cap<BN>(sacc, softcap_scale);" in src) == softcap
    assert ("float softcap_scale" in src) == softcap
    # the packed tensors' rows from the sequence's first key, a window from its first block
    assert ("k0 + KF * BN + t * BN" in src) == rule.windowed
    assert ("cu_q" in src) and ("KT = 0, FM = 0, KF = 0, LM = 0" in src) == rule.windowed


def test_a_packed_window_start_one_block_late_is_refused_by_the_proof_and_not_emitted():
    compiled, _ = _compiled(128, True, (256, -1), False)
    for field, needle in (("start_shift", "skips keys"), ("kv_shift", "visits KV block")):
        bad_rule = attrs.evolve(compiled.plan.trip_rule, **{field: 1})
        bad = require_safe(attrs.evolve(compiled, plan=attrs.evolve(compiled.plan,
                                                                     trip_rule=bad_rule),
                                        proof=None), allow_unsafe=True)
        assert {v.kind for v in bad.proof.verdict.violations} == {H.MISSING_PRODUCT}
        assert needle in bad.proof.verdict.violations[0].message
        with pytest.raises(Exception, match=field):
            emit_attention(bad)


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_packed_window_and_softcap_kernels_build_without_spills(d, tmp_path):
    """The packed kernel with both (its sequence spans, a window's four counts and the cap's
    scale live beside O and S) at every head dim, causal: no spill."""
    _, src = _compiled(d, True, (256, -1), True)
    proc, _ = compile_cubin(src, tmp_path, "varlen_window")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr


def test_the_packed_plan_carries_the_window_and_the_cap_and_keys_one_kernel_per_window():
    c = plan_varlen(*args(), causal=True, window=(256, 9))
    assert (c.window, c.align, c.causal, c.tiles_vary) == ((256, -1), "top_left", True, True)
    free = plan_varlen(*args(), window=(64, 0))
    assert (free.window, free.align, free.causal, free.tiles_vary) == ((64, 0), "bottom_right",
                                                                       False, True)
    assert _kernel_key(free, 0, False)[7:] == (0, (64, 0), False)
    assert len(_kernel_key(plan_varlen(*args()), 0, False)) == 7  # every other kernel's key
    p = varlen_params(128, False, "bottom_right", window=(64, 0), softcap=True)
    assert (p["window_left"], p["window_right"], p["softcap"], p["varlen"]) == ("64", "0", "true",
                                                                               "true")
    capped = plan_varlen(*args(), softcap=30.0, scale=0.125)
    assert math.isclose(capped.scale_log2, 30.0 * LOG2E)
    assert math.isclose(capped.softcap_scale, 0.125 / 30.0)
    assert _kernel_key(capped, 0, True)[7:] == (0, (-1, -1), True)
    assert plan_varlen(*args(), window=(-1, -1)).windowed is False


@pytest.mark.parametrize("kw,needle", [
    ({"window": (-2, 0)}, "attention_varlen: window: (-2, 0): a reach below -1"),
    ({"window": (4,)}, "attention_varlen: window: (4,); pass (left, right)"),
    ({"window": "left"}, "attention_varlen: window: 'left'; pass (left, right)"),
    ({"softcap": 0.0}, "attention_varlen: softcap: 0.0; pass a positive finite float"),
    ({"softcap": float("nan")}, "attention_varlen: softcap: nan; pass a positive finite float"),
])
def test_bad_window_and_softcap_get_one_line_naming_them_before_anything_else(kw, needle):
    """Checked first (their values make the op's arguments), so even with no tensors yet."""
    with pytest.raises(AttentionArgumentError) as info:
        attention_varlen(None, None, None, None, None, 1, 1, **kw)
    assert needle in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(AttentionArgumentError) as info:
        plan_varlen(*args(), **kw)
    assert needle in str(info.value)


def test_the_ops_schema_names_the_impls_and_the_fakes_arguments_window_and_cap_among_them():
    """The op's schema (torch.compile's view of the call) and its impl and fake take the same
    arguments in the same order, the window's two reaches and the cap last; its no-window
    marker comes back as no ``window=``."""
    import inspect

    (op,) = varlen_call._varlen_ops()
    names = re.findall(r"(\w+)(?=[,)])", op.schema.split("->")[0])
    for fn in (op.impl, op.fake):  # positionally: the impl's own names for the tensors
        params = list(inspect.signature(fn).parameters)
        assert len(params) == len(names) and params[-6:] == names[-6:]
    assert names[-3:] == ["window_left", "window_right", "softcap"]
    assert varlen_call._op_masking(-2, -2, None) == (None, None)
    assert varlen_call._op_masking(-1, 0, 30.0) == ((-1, 0), 30.0)
