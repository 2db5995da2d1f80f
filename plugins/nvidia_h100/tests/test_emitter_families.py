"""Emitters keyed by (target, kernel family), not by schedule name (issue 24).

A schedule declares once, in ``kernel_launch()``, the kernel family its body is and the launch
geometry it built (pipeline_core/launch.py); ``pipeline-core emit`` picks the one emitter that
serves the target and writes that family, and the emitter sizes the kernel by the declared
geometry instead of re-deriving it from ``-p``.  This module is also a plugin (``--plugin``):
schedules of its own declare the bundled families, and a second emitter writes ``gemm-wgmma``.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core import hookimpl  # noqa: E402
from pipeline_core.agents import Step  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.config import ScheduleConfig  # noqa: E402
from pipeline_core.emitters import EmitterRecord  # noqa: E402
from pipeline_core.errors import ConfigError, ProgramError  # noqa: E402
from pipeline_core.launch import KernelLaunch  # noqa: E402
from pipeline_core.schedule import ScheduleRecord  # noqa: E402

from pipeline_core_nvidia_h100.multistage import (KERNEL_FAMILY, Geometry,  # noqa: E402
                                                  MultistageGemm)
from pipeline_core_nvidia_h100.skeleton import (Stretch, agent_stretches,  # noqa: E402
                                                entry_code, render, ring_step_line)
from pipeline_core_nvidia_h100.warpspecialized import KERNEL_FAMILY as WS_FAMILY  # noqa: E402

PLUGIN = ["--plugin", __name__]
#: the tile of the test schedules: not multistage-gemm's defaults, and they take no -p at all
TILE = {"BM": 64, "BN": 128, "BK": 32, "warps_m": 2, "warps_n": 2, "group_m": 4}


class _Narrow(MultistageGemm):
    """multistage-gemm's body under another name and a fixed tile; its kernel_launch() comes
    from MultistageGemm (kernel family gemm-mma-sync, its own geometry)."""

    name = "narrow-gemm"


class _Mislabelled(_Narrow):
    """Declares the wgmma family with an mma.sync geometry."""

    name = "mislabelled-gemm"

    def kernel_launch(self) -> KernelLaunch:
        return KernelLaunch(kernel_family=WS_FAMILY, geometry=self.geometry)


class _Broken(_Narrow):
    name = "broken-launch-gemm"

    def kernel_launch(self):
        return WS_FAMILY  # a name, not a KernelLaunch


def _factory(kind):
    def build(ctx):
        target = ctx.make_target()
        geometry = Geometry(stages=target.pipeline.depth, **{k.lower(): v for k, v in TILE.items()})
        geometry.validate()
        return kind(target, geometry, ctx.schedule_config(ScheduleConfig()))
    return build


@hookimpl
def pipeline_core_register_schedules():
    return [ScheduleRecord(k.name, "multistage body, fixed 64x128x32 tile", _factory(k),
                           default_target="h100", targets=("h100",))
            for k in (_Narrow, _Mislabelled, _Broken)]


@hookimpl
def pipeline_core_register_emitters():
    return [EmitterRecord("second-wgmma", "a second writer of gemm-wgmma", ("h100",),
                          lambda compiled, **o: "// second\n", kernel_families=(WS_FAMILY,))]


def _kernel(text: str) -> str:
    """The emitted kernel past its first line (which names the schedule)."""
    return text.split("\n", 1)[1]


def test_a_schedule_of_a_bundled_family_gets_its_emitter_without_being_named(pipeline_cli):
    # before: "0 serve schedule narrow-gemm" (emitters were keyed by schedule name)
    res = pipeline_cli([*PLUGIN, "emit", "narrow-gemm", "--target", "h100", "-T", "stages=3"])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("// Emitted by pipeline-core (emitter cuda) from schedule "
                                 "narrow-gemm on target h100.")
    # the declared geometry sizes the kernel (the schedule has no -p to re-derive it from)
    assert "constexpr int BM = 64, BN = 128, BK = 32, STAGES = 3, GROUP_M = 4;" in res.stdout
    same = pipeline_cli(["emit", "multistage-gemm", "--target", "h100", "-T", "stages=3",
                         *(a for k, v in TILE.items() for a in ("-p", f"{k}={v}"))])
    assert same.exit_code == 0, same.stderr
    assert _kernel(res.stdout) == _kernel(same.stdout)


def test_two_emitters_of_one_family_and_target_need_emitter(pipeline_cli):
    res = pipeline_cli([*PLUGIN, "emit", "warpspecialized-gemm", "--target", "h100"])
    assert res.exit_code == 2
    assert res.stderr == ("error: 2 emitters serve kernel family gemm-wgmma of schedule "
                          "warpspecialized-gemm on target h100: pass --emitter cuda-wgmma or "
                          "--emitter second-wgmma\n")
    picked = pipeline_cli([*PLUGIN, "emit", "warpspecialized-gemm", "--target", "h100",
                           "--emitter", "second-wgmma"])
    assert (picked.exit_code, picked.stdout) == (0, "// second\n")


def test_emitters_lists_the_kernel_families_each_writes(pipeline_cli):
    res = pipeline_cli(["emitters"])
    assert res.exit_code == 0, res.stderr
    lines = {l.split(":")[0]: l for l in res.stdout.splitlines() if not l.startswith(" ")}
    # cuda and cuda-pingpong serve a capability (issue 39): every installed target offering it
    served = "a100, a100-pingpong, h100, h100-pingpong"
    assert lines["cuda"].endswith(f"; targets {served}; kernel families gemm-mma-sync]")
    assert lines["cuda-wgmma"].endswith("; targets h100; kernel families gemm-wgmma]")
    assert lines["cuda-pingpong"].endswith(f"; targets {served}; kernel families gemm-pingpong]")


def test_an_emitter_of_another_family_is_refused_naming_both(pipeline_cli):
    res = pipeline_cli(["emit", "multistage-gemm", "--target", "h100", "--emitter", "cuda-wgmma"])
    assert res.exit_code == 2
    assert ("an emitter for kernel family gemm-mma-sync of schedule multistage-gemm (it writes "
            "kernel family gemm-wgmma)") in res.stderr
    hello = pipeline_cli(["emit", "hello", "--target", "h100"])
    assert hello.exit_code == 2
    assert hello.stderr == ("error: no emitter serves schedule hello (which declares no kernel "
                            "family) on target h100, nor on any target it is made for; "
                            "`pipeline-core emitters` lists the installed emitters and the kernel "
                            "families they write\n")


def test_emit_without_an_emitter_for_the_target_names_the_target_that_has_one(pipeline_cli):
    """Issue 25: ``emit pingpong`` on its default target (mi355x, no emitter) used to say
    "emit.--emitter = '(none given)' is invalid"; it names the --target to type instead."""
    res = pipeline_cli(["emit", "pingpong"])
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == ("error: no emitter serves kernel family gemm-pingpong of schedule "
                          "pingpong on target mi355x; try --target a100-pingpong or --target "
                          "h100-pingpong\n")
    fixed = pipeline_cli(["emit", "pingpong", "--target", "h100-pingpong"])
    assert fixed.exit_code == 0 and "emitter cuda-pingpong" in fixed.stdout.splitlines()[0]


def test_emitters_lists_the_schedules_each_writes(pipeline_cli):
    """The schedules come from the kernel family each declares on a target the emitter serves."""
    res = pipeline_cli(["emitters", "--format", "json"])
    assert res.exit_code == 0, res.stderr
    rows = {row["name"]: row for row in json.loads(res.stdout)["emitters"]
            if row["provider"] == "pipeline-core-nvidia-h100"}  # this plugin's own
    assert {name: row["schedules"] for name, row in rows.items()} == {
        "cuda": ["multistage-gemm"], "cuda-pingpong": ["pingpong"],
        "cuda-wgmma": ["warpspecialized-gemm"]}
    text = pipeline_cli(["emitters"]).stdout
    assert ("[pipeline-core-nvidia-h100; schedules pingpong; targets a100, a100-pingpong, h100, "
            "h100-pingpong;") in text
    # an option without a default says so, rather than a default outside its own range
    assert "    -O watchdog (int; an integer in [1, " in text


def test_a_geometry_not_of_the_family_is_refused_by_the_emitter(pipeline_cli):
    res = pipeline_cli([*PLUGIN, "emit", "mislabelled-gemm", "--emitter", "cuda-wgmma"])
    assert res.exit_code == 2
    assert res.stderr.strip() == ("error: emitter cuda-wgmma: schedule mislabelled-gemm declares "
                                  "no WsGeometry for kernel family gemm-wgmma (kernel_launch() "
                                  "gave Geometry)")


def test_a_kernel_launch_that_is_not_a_record_blames_the_plugin(pipeline_cli):
    res = pipeline_cli([*PLUGIN, "emit", "broken-launch-gemm"])
    assert res.exit_code == 3
    assert "kernel_launch" in res.stderr and "KernelLaunch" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kwargs, field", [
    ({"kernel_family": " "}, "KernelLaunch.kernel_family"),
    ({"kernel_family": KERNEL_FAMILY, "geometry": object()}, "KernelLaunch.geometry"),
])
def test_kernel_launch_refuses_a_blank_family_or_a_geometry_without_launch_facts(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        KernelLaunch(**kwargs)


def test_the_compiled_record_carries_the_declared_launch():
    compiled = compile_named("warpspecialized-gemm", target="h100", target_args={"stages": "3"})
    assert compiled.launch.kernel_family == WS_FAMILY
    assert (compiled.launch.geometry.stages, compiled.launch.geometry.threads) == (3, 384)


# --- the skeleton -------------------------------------------------------------------------------

def test_render_writes_heads_indented_steps_and_tails_in_order():
    lines = render([Stretch(steps=(1, 2), code=lambda s: f"op{s};", indent="  ",
                            head=("for (;;) {",), tail=("}",)),
                    Stretch(steps=(3,), code=lambda s: f"last{s};")])
    assert lines == ["for (;;) {", "  op1;", "  op2;", "}", "last3;"]


def test_entry_code_names_the_entry_and_refuses_a_tag_without_cuda():
    compiled = compile_named("multistage-gemm", target="h100")
    names = {int(k): v for k, v in compiled.tag_names.items()}
    first = compiled.kernel[0]
    code = entry_code({first.op.tag: lambda e: "x();"}, names, "probe")
    assert code(first) == f"x();  // kernel[{first.time_slot}] {names[first.op.tag]}"
    other = next(e for e in compiled.kernel if e.op.tag != first.op.tag)
    with pytest.raises(ProgramError, match=rf"^emitter probe: kernel\[{other.time_slot}\] "
                                           rf"{names[other.op.tag]}: no CUDA for this entry's tag$"):
        code(other)


def test_agent_stretches_bind_each_iterations_tile_and_loop_over_the_rest():
    compiled = compile_named("warpspecialized-gemm", target="h100", target_args={"stages": "3"})
    consumer = compiled.plan.programs[1]  # consumer0: a prologue and an epilogue iteration
    lines = render(agent_stretches(consumer, lambda s: s.kind.value, "p"))
    prologue, epilogue = len(consumer.prologue), len(consumer.epilogue)
    assert prologue and epilogue
    assert [l for l in lines if "const int t =" in l] == (
        [f"    const int t = {i};" for i in range(prologue)]
        + [f"    const int t = KT + {j};" for j in range(epilogue)])
    assert f"for (int t = {prologue}; t < KT; ++t) {{  // p kernel" in lines
    steps = sum(map(len, consumer.prologue)) + len(consumer.kernel) + sum(map(len, consumer.epilogue))
    assert sum(1 for l in lines if l.startswith("    ") and "const int t" not in l) == steps


@pytest.mark.parametrize("kind, single, watchdog, line", [
    ("phase_wait", True, 0, "mbar_wait(full_bar(s), p);"),
    ("phase_wait", False, 9, "mbar_wait_bounded(full_bar(s), p, 9ull);"),
    ("expect_tx", True, 0, "mbar_expect_tx(full_bar(s), 64u);"),
    ("arrive", True, 0, "mbar_arrive(full_bar(s));"),
    ("arrive", False, 0, "if (lane == 0) mbar_arrive(full_bar(s));"),
    ("commit", False, 0, None),  # the family's (a wgmma group), not the ring's
])
def test_ring_steps_are_the_skeletons_and_the_rest_the_familys(kind, single, watchdog, line):
    step = Step(kind=kind, channel="full", value=64)
    assert ring_step_line(step, "s", "p", single, watchdog) == line
