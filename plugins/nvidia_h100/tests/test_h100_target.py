"""The h100 target: registration, sync model, cost and machine models, the run-time builder (no GPU)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.ops import FrameworkTag, OpRole  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.sync.resolve import sync_for_target  # noqa: E402

from pipeline_core_nvidia_h100 import costs, machine, runtime  # noqa: E402
from pipeline_core_nvidia_h100.cuda import MAX_WAIT_GROUP, header_source  # noqa: E402
from pipeline_core_nvidia_h100.sync import (BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED,  # noqa: E402
                                            COMMIT_CP_ASYNC, H100_SYNC, WAIT_CP_ASYNC)
from pipeline_core_nvidia_h100.targets import h100_target  # noqa: E402

MICROBENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "h100_microbench.json"
AMD_TAGS = {int(FrameworkTag.WAIT_VM), int(FrameworkTag.WAIT_LGKM), int(FrameworkTag.SET_PRIO),
            int(FrameworkTag.SCHEDULE_BARRIER), int(FrameworkTag.SCHED_GROUP_BARRIER)}


# ---- registration ------------------------------------------------------------------------------

def test_targets_command_lists_h100_from_this_distribution(pipeline_cli):
    res = pipeline_cli(["targets"])
    assert res.exit_code == 0
    line = next(l for l in res.stdout.splitlines() if l.startswith("h100:"))
    # what h100 offers follows its family (issue 39's capability contracts)
    assert "[pipeline-core-nvidia-h100, family copy-ring, offers sync channels cp_async" in line
    assert "stages (int, default 3" in res.stdout


def test_target_profile_carries_the_h100_models():
    record = default_host().get_target("h100")
    assert record.provider == "pipeline-core-nvidia-h100"
    profile = record.factory(stages=4)
    assert profile == h100_target(stages=4)
    assert profile.sync is H100_SYNC
    assert profile.pipeline.depth == 4
    assert profile.clock_ghz == machine.SUSTAINED_MMA_CLOCK_GHZ
    assert sync_for_target("h100", default_host()) is H100_SYNC


@pytest.mark.parametrize("stages", ["1", "9"])  # the ring's depth: 2..8 (targets.STAGES)
def test_stages_outside_the_ring_range_are_refused_in_one_line(pipeline_cli, stages):
    pytest.importorskip("hello_schedule")
    res = pipeline_cli(["compile", "hello", "--target", "h100", "-T", f"stages={stages}"])
    assert res.exit_code != 0
    assert "stages" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# ---- sync model --------------------------------------------------------------------------------

def test_sync_model_channel_and_barrier_names():
    assert [c.name for c in H100_SYNC.channels] == ["cp_async"]
    ch = H100_SYNC.channel("cp_async")
    assert (ch.label, ch.unit, ch.owner, ch.in_order) == ("cp.async groups", "group", "thread", True)
    assert (ch.wait_tag, ch.commit_tag, ch.max_wait) == (WAIT_CP_ASYNC, COMMIT_CP_ASYNC, 63)
    assert [(b.name, b.tag, b.aligned) for b in H100_SYNC.barriers] == [
        ("bar.sync", BAR_SYNC_ALIGNED, True), ("barrier.sync", BARRIER_SYNC_NONALIGNED, False)]
    assert H100_SYNC.barrier.name == "bar.sync"  # the CTA-wide barrier a schedule's BARRIER means


def test_ldmatrix_and_mma_are_synchronous_and_loads_count_on_cp_async():
    bound = H100_SYNC.bind()
    assert bound.effect(OpRole.GLOBAL_LOAD, 0).counter == "cp_async"
    assert bound.effect(OpRole.GLOBAL_LOAD, 1).counter == "cp_async"
    assert bound.effect(OpRole.FRAGMENT_LOAD, 0).counter is None
    assert bound.effect(OpRole.COMPUTE, -1).counter is None
    assert H100_SYNC.register_interlock and not H100_SYNC.shared_in_order
    assert H100_SYNC.priority_tag is None


def test_max_wait_is_the_one_the_header_encodes():
    assert MAX_WAIT_GROUP == 63
    assert f"#define PCH100_MAX_WAIT_GROUP {MAX_WAIT_GROUP}" in header_source()


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
def test_generic_lowering_derives_wait_group_stages_minus_two(stages):
    """The core's wait derivation over this sync model gives CUTLASS's wait_group<S-2> + barrier."""
    pytest.importorskip("hello_schedule")
    from pipeline_core.api import compile_named
    from pipeline_core.check import check_document
    from pipeline_core.export.json import to_document

    result = compile_named("hello", target="h100", target_args={"stages": str(stages)})
    doc = to_document(result)
    kernel = [e["op"] for e in doc["kernel"]]
    waits = [op["wait_value"] for op in kernel if op["tag"] == WAIT_CP_ASYNC]
    assert waits == [stages - 2] * stages
    tags = [op["tag"] for op in kernel]
    for i, tag in enumerate(tags):  # every wait is followed by the barrier that publishes it
        if tag == WAIT_CP_ASYNC:
            assert tags[i + 1] == BAR_SYNC_ALIGNED
    every = [e["op"]["tag"] for part in ("prologue", "kernel", "epilogue") for e in doc[part]]
    assert not AMD_TAGS & set(every)
    assert every.count(COMMIT_CP_ASYNC) >= stages - 1
    assert check_document(doc).safe


# ---- cost and machine models -------------------------------------------------------------------

@pytest.fixture(scope="module")
def microbench():
    if not MICROBENCH.is_file():
        pytest.skip("benchmarks/results/h100_microbench.json is not beside this checkout")
    return json.loads(MICROBENCH.read_text())


def _one(bench, name, **params):
    found = [m for m in bench["measurements"] if m["name"] == name
             and all(m["params"].get(k) == v for k, v in params.items())]
    assert len(found) == 1, (name, params, len(found))
    return found[0]


def test_latencies_match_the_measurements(microbench):
    assert costs.CP_ASYNC_L2_LATENCY == round(
        _one(microbench, "cp_async_model", source="L2", threads=256, ctas=132)["cycles"])
    assert costs.CP_ASYNC_L2_LATENCY_ONE_WARP == _one(microbench, "cp_async_latency", source="L2",
                                                      lanes=32)["cycles"]
    assert costs.CP_ASYNC_DRAM_LATENCY == _one(microbench, "cp_async_latency", source="DRAM",
                                               lanes=32)["cycles"]
    assert costs.LDMATRIX_X4_LATENCY == round(_one(microbench, "ldmatrix_latency", variant="x4")["cycles"])
    assert costs.MMA_LATENCY == round(_one(microbench, "mma_latency")["cycles"])


def test_issue_rates_match_the_measurements(microbench):
    r = costs.ISSUE_RATES
    close = lambda a, b: abs(a - b) <= 0.01 * max(abs(b), 1)  # noqa: E731 - copies keep 3 digits
    assert close(r.ldmatrix_x4_per_warp,
                 _one(microbench, "ldmatrix_throughput", variant="x4", warps_per_sm=1)["cycles"])
    assert close(r.ldmatrix_x4_per_sm, _one(microbench, "ldmatrix_throughput", variant="x4",
                                            warps_per_sm=8)["derived"]["cycles_per_instr_per_sm"])
    assert close(r.mma_per_warp, _one(microbench, "mma_throughput", warps_per_sm=1, chains_per_warp=8,
                                      ctas=1)["cycles"])
    assert close(r.mma_per_sm, _one(microbench, "mma_throughput", warps_per_sm=8, chains_per_warp=8,
                                    ctas=132)["derived"]["cycles_per_mma_per_sm"])
    assert close(r.cp_async_l2_bytes_per_cycle_per_sm, _one(
        microbench, "cp_async_model", source="L2", threads=256, ctas=132)["derived"]["bytes_per_cycle_per_sm"])
    assert close(r.cp_async_dram_bytes_per_cycle_per_sm, _one(
        microbench, "cp_async_model", source="DRAM", threads=256, ctas=132)["derived"]["bytes_per_cycle_per_sm"])
    assert close(r.bar_sync_128, _one(microbench, "bar_sync", threads=128)["cycles"])
    assert close(r.bar_sync_256, _one(microbench, "bar_sync", threads=256)["cycles"])
    assert close(r.wait_group_nothing_pending,
                 _one(microbench, "cp_async_wait_empty", op="wait_group 0", threads=128)["cycles"])
    assert close(r.commit_then_wait, _one(microbench, "cp_async_wait_empty",
                                          op="commit_group + wait_group 0", threads=128)["cycles"])


def test_cost_model_tags_use_the_measured_latencies():
    model = costs.h100_cost_model()
    assert model.get(costs.H100Tag.LOAD_A).latency == costs.CP_ASYNC_L2_LATENCY
    assert model.get(costs.H100Tag.FRAG_B).role == OpRole.FRAGMENT_LOAD
    assert model.get(costs.H100Tag.MMA).latency == costs.MMA_LATENCY
    assert model.tag_names() == {0: "LOAD_A", 1: "LOAD_B", 2: "FRAG_A", 3: "FRAG_B", 4: "MMA"}


def test_machine_matches_the_measured_device(microbench):
    dev = microbench["device"]
    m = machine.H100_SXM
    assert m.sms == dev["sms"]
    assert m.smem_per_cta_optin == dev["smem_per_block_optin"]
    assert m.l2_bytes == dev["l2_bytes"]
    assert m.max_clock_ghz == dev["max_sm_clock_khz"] / 1e6
    sustained = microbench["clocks"]["after_3s_full_mma_load_mhz"][0]
    assert m.clock_ghz == round(sustained / 1000, 2)


@pytest.mark.parametrize("threads,regs,smem,ctas", [
    (256, 210, 196608, 1),   # 128x256x64, 4 stages: one CTA per SM
    (128, 246, 98304, 2),    # 128x128x64, 3 stages, 246 registers: two
    (128, 206, 32768, 2),    # first light: registers, not shared memory, stop a third
    (1024, 32, 0, 2),        # 64 warps per SM: two CTAs of 32 warps
])
def test_occupancy(threads, regs, smem, ctas):
    assert machine.H100_SXM.ctas_per_sm(threads, regs, smem) == ctas


# ---- runtime (no GPU packages needed) ----------------------------------------------------------

def test_source_key_depends_on_source_name_and_options():
    k = runtime.source_key("src", "k", ("-a",))
    assert k == runtime.source_key("src", "k", ("-a",))
    assert len({k, runtime.source_key("src2", "k", ("-a",)), runtime.source_key("src", "k2", ("-a",)),
                runtime.source_key("src", "k", ("-b",))}) == 4


def test_default_build_targets_sm_90a():
    assert "--gpu-architecture=sm_90a" in runtime.DEFAULT_OPTIONS


def test_missing_cupy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    with pytest.raises(runtime.MissingGPUPackage, match=r"pipeline-core-nvidia-h100\[cuda\]"):
        runtime.KernelBuilder().compile("__global__ void k() {}", "k")


def test_plugin_import_pulls_in_no_gpu_package():
    import subprocess

    code = ("import sys, pipeline_core_nvidia_h100.plugin, pipeline_core_nvidia_h100.runtime; "
            "print(sorted(m for m in ('cupy', 'torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
