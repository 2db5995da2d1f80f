"""pipeline-core emit warpspecialized-gemm -> nvcc sm_90a -> SASS: each agent's derived waits, no spills."""
from __future__ import annotations

import re
import subprocess

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.toolchain import nvcc, sass_command  # noqa: E402

NVCC = nvcc() or "nvcc"  # the needs_nvcc rule (conftest.py) skips or fails without it
pytestmark = pytest.mark.needs_nvcc
#: label -> (-p / -T arguments, ring stages, release lag, consumer registers, producer registers)
VARIANTS = {"s4": (["-T", "stages=4"], 4, 1, 232, 40),
            "s2-bn128": (["-T", "stages=2", "-p", "BN=128"], 2, 1, 232, 40),
            "lag2-s4": (["-T", "stages=4", "-p", "release_lag=2"], 4, 2, 232, 40),
            "1c-s3": (["-T", "stages=3", "-p", "BM=64", "-p", "consumers=1",
                       "-p", "consumer_registers=240"], 3, 1, 240, 40)}


def _sass(tmp_path, pipeline_cli, args):
    out = tmp_path / "ws.cu"
    res = pipeline_cli(["emit", "warpspecialized-gemm", "--target", "h100", *args,
                        "--emitter", "cuda-wgmma", "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                           "-Xptxas=-v", "-o", str(tmp_path / "ws.cubin"), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr  # ptxas did not ignore setmaxnreg
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    return out.read_text(), subprocess.run([*tool, str(tmp_path / "ws.cubin")], capture_output=True,
                                           text=True, check=True).stdout


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_agent_carries_its_derived_waits(variant, tmp_path, pipeline_cli):
    args, stages, lag, consumer_regs, producer_regs = VARIANTS[variant]
    src, sass = _sass(tmp_path, pipeline_cli, args)
    # consumers: the kernel's wait_group keeps `lag` groups in flight, the epilogue drains to 0
    waits = {int(n, 16) for n in re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)", sass)}
    assert {0, lag} <= waits <= set(range(lag + 1)), waits
    # both agents wait on mbarrier phases (consumer: full; producer: empty), parity from the tile
    assert len(re.findall(r"SYNCS\.PHASECHK\.TRANS64\.TRYWAIT", sass)) >= 2
    assert "(((rb + t) / STAGES + (-1)) & 1)" in src and "(((rb + t) / STAGES + (0)) & 1)" in src
    assert re.search(r"SYNCS\.ARRIVE\.TRANS64", sass)        # expect_tx and releases
    assert len(re.findall(r"\bUTMALDG\.2D\b", sass)) == 2     # the producer's two copies
    assert re.search(rf"USETMAXREG\.DEALLOC\.CTAPOOL 0x{producer_regs:x}\b", sass)
    assert re.search(rf"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, 0x{consumer_regs:x}\b", sass)
    assert re.search(r"\bHGMMA\.64x\d+x16\.F32\.BF16\b", sass)
    assert not re.search(r"\b(LDL|STL)\b", sass)


def test_a_loosened_wait_is_refused_and_reaches_the_machine_code_when_forced(tmp_path):
    """The mutation the checker refuses, emitted anyway: the SASS carries the loosened wait."""
    from pipeline_core.api import compile_named
    from pipeline_core.check.mutate import agent_mutations, mutate_compiled
    from pipeline_core.proof import UnsafeScheduleError
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma

    c = compile_named("warpspecialized-gemm", target="h100", target_args={"stages": "4"})
    loosen = [m for m in agent_mutations(c.plan, ("loosen_counter_wait",))
              if m.section == "kernel"]
    assert {m.agent for m in loosen} == {"consumer0", "consumer1"}
    with pytest.raises(UnsafeScheduleError, match="SMEM_WAR"):
        mutate_compiled(c, loosen[0])
    mutated = c
    for m in loosen:  # the emitter writes one consumer program: loosen it in every consumer
        mutated = mutate_compiled(mutated, m, allow_unsafe=True)
    assert not mutated.proof.safe
    out = tmp_path / "loose.cu"
    out.write_text(emit_wgmma(mutated))
    subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                    "-o", str(tmp_path / "loose.cubin"), str(out)], check=True)
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    sass = subprocess.run([*tool, str(tmp_path / "loose.cubin")], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x2\b", sass)
