"""Named barriers on the H100 (docs/guide/agents.md, "Named barriers"): warpspecialized-gemm's
two consumer warp groups ordered in ping-pong on the wgmma sync model's named barriers are
proven safe, and the cuda-wgmma emitter writes one branch per consumer with its bar.sync /
bar.arrive (checked in the SASS where nvcc is installed)."""
from __future__ import annotations

import re
import shutil
import subprocess

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents import AgentSpec, OrderSpec, Turn  # noqa: E402
from pipeline_core.agents.inject import lower_agents  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError, require_safe  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import sass_command  # noqa: E402
from pipeline_core_nvidia_h100.wgmma_sync import H100_WGMMA_SYNC  # noqa: E402

NVCC = shutil.which("nvcc")


def _pingpong():
    """warpspecialized-gemm (2 consumers, 4 stages) with its consumers' wgmma groups ordered
    consumer0(t), consumer1(t), consumer0(t + 1), ..."""
    host = default_host()
    c = compile_named("warpspecialized-gemm", target="h100", host=host,
                      target_args={"stages": "4"})
    plain = AgentSpec(roles=[p.role for p in c.plan.programs], op_bytes=c.plan.op_bytes,
                      release_lag=c.plan.ring("empty").release_lag)
    # the spec rebuilt from the plan lowers to the schedule's own plan
    rebuilt = lower_agents(c.body, c.edges, H100_WGMMA_SYNC, stages=4, spec=plain)
    assert (rebuilt.programs, rebuilt.rings) == (c.plan.programs, c.plan.rings)
    consumers = [p.role for p in c.plan.programs[1:]]
    spec = attrs.evolve(plain, orders=[OrderSpec(name="pingpong", turns=[
        Turn(agent=r.name, ops=r.ops) for r in consumers])])
    plan = lower_agents(c.body, c.edges, H100_WGMMA_SYNC, stages=4, spec=spec, target="h100",
                        owner="schedule warpspecialized-gemm")
    return require_safe(attrs.evolve(c, plan=attrs.evolve(plan, launch=c.plan.launch), proof=None),
                        host)


def test_the_pingpong_gemm_is_proven_and_each_named_edit_refused():
    c = _pingpong()
    assert c.proof.safe
    assert c.plan.orders[0].barriers == (1, 2) and c.plan.orders[0].counts == (256, 256)
    cats = ("drop_named_arrive", "drop_named_sync", "swap_named_id")
    picked = {}
    for m in agent_mutations(c.plan, cats):
        picked.setdefault((m.category, m.agent), m)
    assert len(picked) == 6
    for m in picked.values():
        with pytest.raises(UnsafeScheduleError):
            mutate_compiled(c, m)


def test_the_emitter_writes_one_branch_per_consumer_with_its_named_barriers():
    src = emit_wgmma(_pingpong())
    assert "if (consumer == 0) {" in src and "} else if (consumer == 1) {" in src
    c0 = src[src.index("if (consumer == 0) {"):src.index("} else if (consumer == 1) {")]
    c1 = src[src.index("} else if (consumer == 1) {"):]
    # consumer0 waits on barrier 1 (from the loop's second tile) and arrives on 2; consumer1
    # the other way round
    assert 'bar.sync 1, 256;' in c0 and 'bar.arrive 2, 256;' in c0 and 'bar.sync 2' not in c0
    assert 'bar.sync 2, 256;' in c1 and 'bar.arrive 1, 256;' in c1 and 'bar.sync 1' not in c1


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_the_named_barriers_reach_the_machine_code(tmp_path):
    src = tmp_path / "pp.cu"
    src.write_text(emit_wgmma(_pingpong()))
    cubin = tmp_path / "pp.cubin"
    proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                           "-Xptxas=-v", "-o", str(cubin), str(src)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    sass = subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout
    found = set(re.findall(r"\bBAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[12]), 0x100\b", sass))
    assert found == {("SYNC.DEFER_BLOCKING", "0x1"), ("SYNC.DEFER_BLOCKING", "0x2"),
                     ("ARV", "0x1"), ("ARV", "0x2")}, found
