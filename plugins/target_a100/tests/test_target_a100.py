"""The a100 targets run the schedules other plugins wrote, where their contracts fit (issue 39).

``multistage-gemm`` (the H100 plugin's) and ``hello`` compile, are proven, are timed with the
A100's own costs and are emitted for sm_80 on ``a100``; ``pingpong`` on ``a100-pingpong``; a
schedule that needs wgmma or TMA is refused in one line naming what the A100 lacks.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipeline_core.plugin_api import PipelineConfig, compile_named, default_host

from pipeline_core_target_a100 import plugin
from pipeline_core_target_a100.machine import A100, MMA_M16N8K16_INTERVAL

HOST = default_host()


@pytest.fixture(autouse=True)
def _schedules_installed():
    missing = [n for n in ("multistage-gemm", "pingpong", "warpspecialized-gemm", "hello")
               if n not in HOST.schedules]
    if missing:
        pytest.skip(f"the schedules' plugins are not installed: {', '.join(missing)}")


def _mma_latency(compiled) -> int:
    return next(op.latency for op in compiled.body if op.tag == plugin.MMA)


def test_multistage_gemm_compiles_proven_on_a100_with_its_own_costs():
    compiled = compile_named("multistage-gemm", target=plugin.TARGET, host=HOST)
    assert compiled.proof is not None and compiled.proof.safe
    g = compiled.launch.geometry
    # the CTA's mma.sync per k-step at the A100's interval (2.5 cycles), not the H100's
    assert _mma_latency(compiled) == round(g.mma_per_k_step * g.warps * MMA_M16N8K16_INTERVAL)
    h100 = compile_named("multistage-gemm", target="h100", host=HOST)
    assert _mma_latency(h100) != _mma_latency(compiled)
    assert compiled.target_profile.clock_ghz == A100.clock_ghz == 1.41


def test_check_and_analyze_on_a100(pipeline_cli):
    check = pipeline_cli(["check", "multistage-gemm", "--target", "a100"])
    assert check.exit_code == 0, check.stderr
    assert check.stdout.startswith("multistage-gemm: SAFE (1 warp group x 8 warps")
    assert "counter model nvidia-a100-cp-async" in check.stdout
    analyze = pipeline_cli(["analyze", "multistage-gemm", "--target", "a100"])
    assert analyze.exit_code == 0, analyze.stderr
    # 8 warps x 32 mma.sync per k-step (a 64 x 64 warp tile) at 2.5 cycles, 4 k-steps: 2560
    # cycles per K tile (the H100's interval, 1.5 / 0.644, would make it 2384)
    assert "MMA unit busy 2560 cycles" in analyze.stdout


def test_emit_multistage_gemm_for_sm80(pipeline_cli):
    res = pipeline_cli(["emit", "multistage-gemm", "--target", "a100"])
    assert res.exit_code == 0, res.stderr
    head = res.stdout.splitlines()[:2]
    assert head[0] == ("// Emitted by pipeline-core (emitter cuda) from schedule multistage-gemm "
                       "on target a100.")
    assert head[1].startswith("// Architecture sm_80 (target a100): build with -arch=sm_80")
    # the a100's own sync tags became the kernel's cp.async and barrier calls
    assert "cp_async_wait_group<1>();" in res.stdout and "bar_sync_aligned<0>();" in res.stdout


def test_the_h100_source_names_no_architecture(pipeline_cli):
    """The h100's kernels are written as they always were (the emitter's own architecture)."""
    res = pipeline_cli(["emit", "multistage-gemm", "--target", "h100"])
    assert res.exit_code == 0 and "// Architecture" not in res.stdout


def test_pingpong_on_a100_pingpong(pipeline_cli):
    check = pipeline_cli(["check", "pingpong", "--target", plugin.PINGPONG_TARGET])
    assert check.exit_code == 0 and " SAFE (2 warp groups x 4 warps" in check.stdout, check.stderr
    res = pipeline_cli(["emit", "pingpong", "--target", plugin.PINGPONG_TARGET])
    assert res.exit_code == 0, res.stderr
    assert "// Architecture sm_80 (target a100-pingpong)" in res.stdout
    assert "barrier_sync<0>();" in res.stdout  # the staggered groups' non-aligned barrier


def test_both_pingpong_targets_take_the_familys_one_double_buffer():
    """a100-pingpong and h100-pingpong write no ping-pong loop of their own: each is
    ``PipelineConfig.ping_pong_double_buffer`` with the machine's MMA latency."""
    for name, latency in ((plugin.PINGPONG_TARGET, plugin.MMA_LATENCY), ("h100-pingpong", None)):
        pipeline = HOST.targets[name].factory().pipeline
        latency = pipeline.mma_latency if latency is None else latency
        assert pipeline == PipelineConfig.ping_pong_double_buffer(mma_latency=latency), name
    assert HOST.targets["h100-pingpong"].factory().pipeline.mma_latency != plugin.MMA_LATENCY


def test_hello_fits_a100_by_its_family():
    compiled = compile_named("hello", target=plugin.TARGET, host=HOST)
    assert compiled.proof is not None and compiled.proof.safe


#: the installed schedules made for wgmma fed by TMA (their records' ``requires=WGMMA_TMA``)
WGMMA_TMA_SCHEDULES = ["warpspecialized-gemm", "gemv", "flash-attention-fwd", "flash-attention-bwd"]
ATTENTION = ["flash-attention-bwd", "flash-attention-fwd"]


@pytest.mark.parametrize("schedule", WGMMA_TMA_SCHEDULES)
def test_a_wgmma_tma_schedule_is_refused_in_one_line_naming_what_a100_lacks(pipeline_cli,
                                                                            schedule):
    if schedule not in HOST.schedules:
        pytest.skip(f"{schedule} is not installed")
    res = pipeline_cli(["compile", schedule, "--target", "a100"])
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr.count("\n") == 1
    assert res.stderr == (
        f"error: --target a100 is invalid for schedule {schedule}: it needs sync channel "
        "mbarrier, sync channel wgmma, instruction wgmma, copy kind cp.async.bulk.tensor, which "
        "target a100 does not offer; targets that offer it: h100; pass --target h100\n")


def test_the_attention_schedules_still_list_and_fit_h100(pipeline_cli):
    """Their contract refuses the A100 by capability; the H100, which offers it, keeps them."""
    if any(name not in HOST.schedules for name in ATTENTION):
        pytest.skip("the attention schedules are not installed")
    assert all(HOST.schedules[name].fits(HOST.targets["h100"]) for name in ATTENTION)
    plain = pipeline_cli(["schedules", *ATTENTION])
    assert plain.exit_code == 0, plain.stderr
    heads = [line for line in plain.stdout.splitlines() if not line.startswith(" ")]
    assert [h.split(":")[0] for h in heads] == ATTENTION
    assert all(h.endswith("[pipeline-core-schedules-attention, default target h100; fits h100]")
               for h in heads), heads
    listing = pipeline_cli(["schedules", *ATTENTION, "--format", "json"])
    assert listing.exit_code == 0, listing.stderr
    for entry in json.loads(listing.stdout)["schedules"]:
        assert entry["targets"] == ["h100"], entry["name"]
        assert entry["made_for"]["requires"] == {
            "channels": ["mbarrier", "wgmma"], "instructions": ["wgmma"],
            "copies": ["cp.async.bulk.tensor"]}, entry["name"]


def test_a_target_of_another_family_is_refused_by_family(pipeline_cli):
    res = pipeline_cli(["compile", "pingpong", "--target", "a100"])
    assert res.exit_code == 2
    assert "not a100 (family copy-ring); targets that fit: a100-pingpong" in res.stderr


def test_stages_are_bounded_by_the_a100s_shared_memory(pipeline_cli):
    res = pipeline_cli(["compile", "multistage-gemm", "--target", "a100", "-T", "stages=4"])
    assert res.exit_code == 2 and "an integer in [2, 3]" in res.stderr
    assert 3 * (128 + 256) * 64 * 2 <= A100.smem_per_cta_optin < 4 * (128 + 256) * 64 * 2


#: a tile whose 3-stage ring (196,608 bytes) fits the H100's 232,448 bytes a CTA may use and
#: not the A100's 166,912: the stage count is within both targets' -T stages bounds
BIG_TILE = ["-p", "BM=256", "-p", "BN=256", "-p", "warps_m=4", "-p", "warps_n=4", "-T", "stages=3"]


def test_the_ring_is_checked_against_the_compiling_targets_shared_memory(pipeline_cli):
    ring = 3 * (256 + 256) * 64 * 2
    assert A100.smem_per_cta_optin < ring <= 227 * 1024
    h100 = pipeline_cli(["compile", "multistage-gemm", "--target", "h100", *BIG_TILE,
                         "--kernel-only", "--compact"])
    assert h100.exit_code == 0, h100.stderr
    a100 = pipeline_cli(["compile", "multistage-gemm", "--target", "a100", *BIG_TILE])
    assert (a100.exit_code, a100.stdout, a100.stderr.count("\n")) == (2, "", 1), a100.stderr
    assert a100.stderr == (
        f"error: schedule multistage-gemm: -T stages: 3 stages of 65536 bytes (the BM x BK and "
        f"BN x BK tiles) need {ring} bytes of shared memory, over the {A100.smem_per_cta_optin} "
        "a CTA may use on target a100; lower -T stages or shrink -p BM / BN / BK\n")


@pytest.mark.needs_nvcc
@pytest.mark.parametrize("flags", [["-arch=compute_80", "-ptx"],
                                   ["-gencode", "arch=compute_80,code=compute_80", "-c"]],
                         ids=["ptx", "gencode"])
def test_the_sm80_kernel_builds_for_compute_80(pipeline_cli, tmp_path, flags):
    source = tmp_path / "gemm_sm80.cu"
    res = pipeline_cli(["emit", "multistage-gemm", "--target", "a100", "-o", str(source)])
    assert res.exit_code == 0, res.stderr
    nvcc = shutil.which("nvcc") or "nvcc"
    out = subprocess.run([nvcc, *flags, str(source), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr.lower(), out.stderr


@pytest.mark.needs_nvcc
def test_the_gpu_checks_script_builds_every_variant_for_compute_80(capsys):
    """benchmarks/a100_on_hopper.py (the lead's GPU check) without a GPU: emit + nvcc PTX."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "a100_on_hopper.py"
    if not script.is_file():
        pytest.skip("not run from a checkout")
    spec = importlib.util.spec_from_file_location("a100_on_hopper", script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--build-only"]) == 0
    built = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in built] == [f"BUILT {v[0]}" for v in module.VARIANTS]
