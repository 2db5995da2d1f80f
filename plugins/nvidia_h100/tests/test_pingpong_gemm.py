"""Consumer ping-pong across output tiles (``warpspecialized-gemm -p pingpong=true``, issue 26;
docs/guide/matmul.md, "Ping-pong"; docs/guide/agents.md, "Tile splits"): each consumer owns a
whole output tile, the consumers take the CTA's tiles in turn, their mainloops ordered by named
barriers.  The plan is proven, the split's mutations refused, every bad combination is one line,
and the emitted kernel has each consumer's own tile loop, the derived named barriers in its
SASS and no spills (where nvcc is installed).  With the TMA store (the call's 128 x 192 tile)
each consumer stages its own sub-tiles on its own named barrier, proven with the split."""
from __future__ import annotations

import re
import shutil

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plugin_api import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402

NVCC = shutil.which("nvcc")
PINGPONG = {"pingpong": "true", "BN": "128"}


def _compile(stages="4", **params):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={**PINGPONG, **params}, target_args={"stages": stages})


def test_the_pingpong_gemm_splits_its_tiles_and_orders_the_mainloops():
    c = _compile()
    assert c.proof.safe
    assert c.plan.split is not None and c.plan.split.agents == ("consumer0", "consumer1")
    (order,) = c.plan.orders
    assert order.scope == "output_tile" and order.barriers == (1, 2)
    # a stage is released by its output tile's owner alone: one 4-warp consumer's arrivals
    assert c.plan.ring("empty").arrivals == 4
    # each consumer's wgmma group is its whole 128 x 128 tile over one K tile
    g = c.launch.geometry
    assert (g.consumer_rows, g.wgmma_m_blocks, g.accumulators) == (128, 2, 128)


@pytest.mark.parametrize("params, message", [
    ({"BN": "256"}, "-p pingpong: each consumer holds a whole 128 x 256 tile: 256 fp32 "
                    "accumulators"),
    ({"split_k": "true"}, "-p pingpong: ping-pong and -p split_k=true don't combine yet"),
    ({"batch": "a"}, "-p pingpong: ping-pong and -p batch=a don't combine yet"),
    ({"dtype": "e4m3", "BK": "128"}, "-p pingpong: ping-pong and -p dtype=e4m3 don't combine yet"),
    ({"consumers": "1", "BM": "64"}, r"-p pingpong: takes 2 consumers or more \(-p consumers=2\)"),
])
def test_a_pingpong_the_kernel_cannot_run_is_one_line(params, message):
    with pytest.raises(ProgramError, match=message) as err:
        _compile(**params)
    assert "\n" not in str(err.value)


#: the call's ping-pong kernel (wave_cost.RATES): 128 x 192, the TMA store
WIDE_TMA = {"BN": "192", "store": "tma"}


def test_the_tma_store_pingpong_stages_each_consumers_tile_on_its_own_barrier():
    c = _compile(**WIDE_TMA)
    assert c.proof.safe
    g = c.launch.geometry
    # the whole 128 x 192 tile a consumer: 192 accumulators, stored in 64 x 64 sub-tiles
    assert (g.consumer_rows, g.wgmma_m_blocks, g.accumulators, g.store_cols) == (128, 2, 192, 64)
    (order,) = c.plan.orders
    store_bars = {s.barrier for p in c.plan.programs if p.name.startswith("consumer")
                  for s in p.store if s.kind == StepKind.NAMED_SYNC}
    # each consumer's own store barrier, neither of them the mainloop order's
    assert len(store_bars) == 2 and not store_bars & set(order.barriers)
    src = emit_wgmma(c)
    # the consumer's rows start at the tile's first (it owns the whole tile), its staging
    # buffers are its own
    assert "tile_m * BM + 0 + mb * 64" in src and "consumer * CONSUMER_ROWS" not in src
    assert "staging + (consumer * SBUF + (mb * (BN / SCOLS) + s) % SBUF)" in src


def _refuses_each(c, cats):
    """One mutation of each category and agent of ``c``'s plan, each refused by the proof (and
    every category found)."""
    picked = {}
    for m in agent_mutations(c.plan, cats):
        picked.setdefault((m.category, m.agent), m)
    assert {k[0] for k in picked} == set(cats)
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)


def test_the_tma_store_pingpongs_store_and_split_mutations_are_refused():
    _refuses_each(_compile(**WIDE_TMA), ("drop_store_wait", "drop_proxy_fence",
                                         "drop_store_drain", "split_own_base", "drop_named_sync"))


def _info(shape, strides, dtype="bf16"):
    from pipeline_core_nvidia_h100.gemm_call import TensorInfo
    return TensorInfo(shape=shape, strides=strides, dtype=dtype, ptr=0)


def test_the_call_plans_pingpong_only_where_the_kernel_takes_it():
    """A ping-pong candidate plans the ping-pong kernel, C's TMA box its consumer's sub-tile
    (the whole tile's rows); a batch, a split, the cp.async producer or fp8 plans the same tile
    cooperatively (gemm_call.pingpong_taken)."""
    from pipeline_core_nvidia_h100.autotune import Candidate
    from pipeline_core_nvidia_h100.matmul_call import TUNING, plan_infos

    pp = Candidate(bm=128, bn=192, stages=4, consumers=2, pingpong=True)
    a, b = _info((8192, 8192), (8192, 1)), _info((8192, 8192), (1, 8192))
    plan = plan_infos(a, b, None, None, None, None, 132, TUNING, pp)
    assert plan.variant.pingpong and plan.variant.store == "tma"
    assert plan.c.box_inner == pp.geometry(plan.variant).store_cols == 64
    batched = plan_infos(_info((4, 512, 8192), (512 * 8192, 8192, 1)),
                         _info((4, 8192, 8192), (8192 * 8192, 1, 8192)), None, None, None,
                         None, 132, TUNING, pp)
    assert not batched.variant.pingpong and batched.variant.batch != "none"
    split = plan_infos(_info((256, 8192), (8192, 1)), _info((8192, 256), (1, 8192)), None, None,
                       None, None, 132, TUNING, attrs.evolve(pp, split_k=True))
    assert split.splits > 1 and not split.variant.pingpong
    # the cp.async producer (rows off the line, Tuning.cp_async on) was never run in ping-pong
    off = plan_infos(_info((2000, 3000), (3000, 1)), _info((3000, 5000), (1, 3000)), None, None,
                     None, None, 132, attrs.evolve(TUNING, cp_async=True), pp)
    assert off.variant.load == "cp_async" and not off.variant.pingpong
    # fp8 (scaled_mm): the schedule refuses ping-pong there
    a8, b8 = _info((8192, 8192), (8192, 1), "e4m3"), _info((8192, 8192), (1, 8192), "e4m3")
    one = _info((), (), "fp32")
    fp8 = plan_infos(a8, b8, None, None, "bf16", None, 132, TUNING, pp, (one, one))
    assert fp8.variant.dtype == "e4m3" and not fp8.variant.pingpong


def test_the_ranking_offers_pingpong_where_the_variant_takes_it():
    from pipeline_core_nvidia_h100 import decompose
    from pipeline_core_nvidia_h100.warpspecialized import GemmVariant

    plain = GemmVariant(tails=True, store="tma")
    assert decompose.ranked(8192, 8192, 8192, plain, 132).pingpong
    assert not decompose.ranked(8192, 8192, 8192, plain, 132, pingpong=False).pingpong
    # a batched kernel or fp8: refused by the schedule, so the next tile in the ranking
    for v in (attrs.evolve(plain, batch="a"), attrs.evolve(plain, dtype="e4m3")):
        assert not decompose.ranked(8192, 8192, 8192, v, 132).pingpong


def test_the_calls_decomposition_reads_tuning_pingpong(monkeypatch):
    """matmul_call.decomposition (what the call launches untuned, and what the benchmarks'
    prebuilds build) ranks ping-pong at 8192^3, and not once Tuning.pingpong is off (the
    ablation gemm_speed.py --choice --old pingpong=false times)."""
    from pipeline_core_nvidia_h100 import matmul_call
    from pipeline_core_nvidia_h100.matmul_call import plan_infos

    a, b = _info((8192, 8192), (8192, 1)), _info((8192, 8192), (1, 8192))
    base = plan_infos(a, b, None, None, None, None, 132, matmul_call.TUNING)
    assert matmul_call.decomposition(base, 132).pingpong
    monkeypatch.setattr(matmul_call, "TUNING", attrs.evolve(matmul_call.TUNING, pingpong=False))
    assert not matmul_call.decomposition(base, 132).pingpong


def test_rows_off_the_line_never_rank_the_pingpong_tile():
    """512 x 6000 x 4096 fills less than a wave of 128x256, so every tile competes, and 128x192
    in ping-pong ranks first on aligned rows; on rows off the 128-byte line (where ping-pong
    measured 0.58-0.65 of cuBLAS at 2000x5000x3000, and 0.88-0.98 with K 3072) the same tile
    runs cooperatively."""
    from pipeline_core_nvidia_h100 import wave_cost

    aligned = wave_cost.rank(512, 6000, 4096, "bf16", 132)
    assert aligned[0].candidate.pingpong
    off = wave_cost.rank(512, 6000, 4096, "bf16", 132, off_line=True)
    assert not any(r.candidate.pingpong for r in off)
    assert (off[0].candidate.bm, off[0].candidate.bn) == (128, 192)


def test_the_split_mutations_of_the_pingpong_gemm_are_refused():
    _refuses_each(_compile(), ("split_own_base", "split_all_arrivals", "drop_named_arrive",
                               "drop_named_sync"))


def test_each_consumer_runs_its_own_tiles_with_the_ring_counted_over_all():
    src = emit_wgmma(_compile())
    assert "int rb = consumer * KT;" in src
    assert "for (; tile < TILES; tile += 2 * (int)gridDim.x, rb += 2 * KT) {" in src
    # the first output tile of the CTA has no turn to wait for; the arrive ends the mainloop
    assert ('if (tile >= (int)blockIdx.x + 1 * (int)gridDim.x) asm volatile("bar.sync 1, 256;'
            in src)
    assert src.index('bar.arrive 2, 256;') < src.index("wgmma_wait<0>();")
    # after the loop, the consumer whose turn comes next takes the last tile's generation
    assert re.search(r"tile - 1 \* \(int\)gridDim.x < TILES\) asm volatile\(\"bar.sync 2, 256",
                     src)
    # each consumer's rows start at the tile's first: it owns the whole tile
    assert "consumer * CONSUMER_ROWS" not in src
    assert "epi.store<MBLOCKS, ACC, 64>(acc, C, ldc, tile_m * BM + 0, tile_n * BN);" in src
    # one mainloop for both consumers, branching on the consumer index around its barriers
    # only, the index warp-uniform: ptxas keeps the wgmma groups unserialized (C7520)
    assert src.count("wgmma_tile(((rb + t) % STAGES));") == 2  # prologue and kernel, once each
    assert ('if (consumer == 0) { asm volatile("bar.arrive 2, 256;\\n" ::: "memory"); } else '
            'if (consumer == 1) { asm volatile("bar.arrive 1, 256;\\n" ::: "memory"); }') in src
    assert "const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);" in src


def test_the_default_kernel_keeps_its_cooperative_loop():
    src = emit_wgmma(compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                                   target_args={"stages": "4"}))
    assert "rb = consumer * KT" not in src and "consumer * CONSUMER_ROWS" in src


def _sass_built_clean(compiled, tmp_path, name, spill: int = 0):
    """``compiled``'s kernel through nvcc: built, no spill (at most ``spill`` bytes where a test
    names one it knows), no wgmma serialized on a path ptxas takes as divergent (C7520: it
    halved the kernel's rate); its SASS (skipped where no disassembler is installed), with no
    local-memory access (none, where it spills)."""
    proc, cubin = compile_cubin(emit_wgmma(compiled), tmp_path, name)
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", proc.stderr)
    assert found and max(map(int, found.groups())) <= spill, proc.stderr
    assert "C7520" not in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert spill or not re.search(r"\b(LDL|STL)\b", sass)
    return sass


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
@pytest.mark.parametrize("stages", ["4", "5"])
def test_the_pingpong_kernel_builds_without_spills_and_carries_its_barriers(tmp_path, stages):
    sass = _sass_built_clean(_compile(stages, tails="true", bias="bf16", activation="gelu"),
                             tmp_path, "pp")
    found = set(re.findall(r"\bBAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[12]), 0x100\b", sass))
    assert found == {("SYNC.DEFER_BLOCKING", "0x1"), ("SYNC.DEFER_BLOCKING", "0x2"),
                     ("ARV", "0x1"), ("ARV", "0x2")}, found
    assert re.search(r"\bHGMMA\.64x128x16\.F32\.BF16\b", sass)
    # the loop keeps one group in flight (wait_group 1); no wait between a group's wgmmas
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
    assert len(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0", sass)) <= 3


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
@pytest.mark.parametrize("epilogue,spill", [
    ({}, 0), ({"bias": "bf16"}, 0), ({"activation": "gelu"}, 0),
    ({"bias": "bf16", "activation": "gelu"}, 0), ({"bias": "bf16", "activation": "silu"}, 0),
    # fp32 out (32-column sub-tiles) with silu: 44 bytes, in the epilogue only (see below)
    ({"out_dtype": "fp32", "bias": "fp32", "activation": "silu"}, 48)])
def test_the_tma_store_pingpong_builds_without_spills(tmp_path, epilogue, spill):
    """The call's 128 x 192 kernel: 192 accumulators a consumer thread within setmaxnreg's 232
    for the epilogues it is planned with, and its wgmma unserialized.  Session 26 wrote gelu as
    x sigmoid(2 z) and both activations with a fast divide: bias and gelu had spilled 68 bytes
    (tanhf's branches and temporaries beside the accumulators), and silu's IEEE divide called
    its slow path 192 times.  One form spills since: fp32 out with silu, 44 bytes after the
    mainloop, where every other form tried (the IEEE reciprocal, ex2 / rcp.approx, operand
    fences) spilled as much or called the slow path (benchmarks/gemm_epilogues.py)."""
    sass = _sass_built_clean(_compile(tails="true", **WIDE_TMA, **epilogue), tmp_path, "pp192",
                             spill)
    assert re.search(r"\bHGMMA\.64x192x16\.F32\.BF16\b", sass)
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
