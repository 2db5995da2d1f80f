"""Consumer ping-pong across output tiles (``warpspecialized-gemm -p pingpong=true``, issue 26;
docs/guide/matmul.md, "Ping-pong"; docs/guide/agents.md, "Tile splits"): each consumer owns a
whole output tile, the consumers take the CTA's tiles in turn, their mainloops ordered by named
barriers.  The plan is proven, the split's mutations refused, every bad combination is one line,
and the emitted kernel has each consumer's own tile loop, the derived named barriers in its
SASS and no spills (where nvcc is installed)."""
from __future__ import annotations

import re
import shutil

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
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
    ({"store": "tma"}, "-p pingpong: ping-pong and -p store=tma don't combine yet"),
    ({"batch": "a"}, "-p pingpong: ping-pong and -p batch=a don't combine yet"),
    ({"dtype": "e4m3", "BK": "128"}, "-p pingpong: ping-pong and -p dtype=e4m3 don't combine yet"),
    ({"consumers": "1", "BM": "64"}, r"-p pingpong: takes 2 consumers or more \(-p consumers=2\)"),
])
def test_a_pingpong_the_kernel_cannot_run_is_one_line(params, message):
    with pytest.raises(ProgramError, match=message) as err:
        _compile(**params)
    assert "\n" not in str(err.value)


def test_the_split_mutations_of_the_pingpong_gemm_are_refused():
    c = _compile()
    cats = ("split_own_base", "split_all_arrivals", "drop_named_arrive", "drop_named_sync")
    picked = {}
    for m in agent_mutations(c.plan, cats):
        picked.setdefault((m.category, m.agent), m)
    assert {k[0] for k in picked} == set(cats)
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)


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


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
@pytest.mark.parametrize("stages", ["4", "5"])
def test_the_pingpong_kernel_builds_without_spills_and_carries_its_barriers(tmp_path, stages):
    proc, cubin = compile_cubin(
        emit_wgmma(_compile(stages, tails="true", bias="bf16", activation="gelu")), tmp_path, "pp")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    # no wgmma serialized on a path ptxas takes as divergent (it halved the kernel's rate)
    assert "C7520" not in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    found = set(re.findall(r"\bBAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[12]), 0x100\b", sass))
    assert found == {("SYNC.DEFER_BLOCKING", "0x1"), ("SYNC.DEFER_BLOCKING", "0x2"),
                     ("ARV", "0x1"), ("ARV", "0x2")}, found
    assert re.search(r"\bHGMMA\.64x128x16\.F32\.BF16\b", sass)
    # the loop keeps one group in flight (wait_group 1); no wait between a group's wgmmas
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
    assert len(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0", sass)) <= 3
    assert not re.search(r"\b(LDL|STL)\b", sass)
