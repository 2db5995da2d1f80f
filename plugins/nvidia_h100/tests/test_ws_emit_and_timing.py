"""The cuda-wgmma emitter's options and selection, the tensor-map launcher, and the H100 timing
figures `analyze` reports (calibrated machine numbers, benchmarks/h100/GEMM_NOTES.md)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.plugin_api import simulate_agents  # noqa: E402

from pipeline_core_nvidia_h100 import tma  # noqa: E402
from pipeline_core_nvidia_h100.costs import ISSUE_RATES, MMA_SYNC_GEMM_EFFICIENCY, H100Tag  # noqa: E402
from pipeline_core_nvidia_h100.machine import H100_AGENT_MACHINE  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import PEAK_MMA_FLOP_PER_CYCLE  # noqa: E402

WS = ["warpspecialized-gemm", "--target", "h100", "-T", "stages=4"]


def test_emit_picks_the_emitter_that_writes_the_schedule(pipeline_cli):
    res = pipeline_cli(["emit", *WS])
    assert res.exit_code == 0, res.stderr
    assert "emitter cuda-wgmma" in res.stdout.splitlines()[0]
    ms = pipeline_cli(["emit", "multistage-gemm", "--target", "h100"])
    assert ms.exit_code == 0 and "emitter cuda)" in ms.stdout.splitlines()[0]


@pytest.mark.parametrize("args, message", [
    (["--emitter", "cuda"], "an emitter for kernel family gemm-wgmma of schedule "
                            "warpspecialized-gemm (it writes kernel family gemm-mma-sync)"),
    (["-O", "foo=1"], "Unknown -O parameter of emitter cuda-wgmma 'foo'. Known parameters of "
                      "emitter cuda-wgmma: watchdog."),
    (["-O", "watchdog=0"], "-O watchdog=0 is invalid for emitter cuda-wgmma: an integer in "
                           f"[1, {2**63 - 1}]"),
    # issue 23: a count that does not fit the kernel's unsigned long long was emitted (exit 0)
    (["-O", f"watchdog={2**70}"], f"-O watchdog={2**70} is invalid for emitter cuda-wgmma: an "
                                  f"integer in [1, {2**63 - 1}]"),
    # issue 23: superscript digits passed isdigit() and failed int(), blaming the plugin (exit 3)
    (["-O", "watchdog=\u00b2\u00b3"], "-O watchdog=\u00b2\u00b3 is invalid for emitter cuda-wgmma: "
                                  "'\u00b2\u00b3' is not an integer (use the ASCII digits 0-9)"),
])
def test_emit_refuses_an_emitter_or_option_in_one_line(pipeline_cli, args, message):
    res = pipeline_cli(["emit", *WS, *args])
    assert res.exit_code == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_watchdog_bounds_every_mbarrier_wait(pipeline_cli):
    def kernel(args):  # the kernel body, after the helpers the header defines
        return pipeline_cli(["emit", *WS, *args]).stdout.split('extern "C"')[1]

    plain, bounded = kernel([]), kernel(["-O", "watchdog=1000"])
    waits = plain.count("mbar_wait(")
    assert waits >= 3 and "mbar_wait_bounded(" not in plain
    assert bounded.count("mbar_wait_bounded(") == waits and "1000ull" in bounded
    largest = kernel(["-O", f"watchdog={2**63 - 1}"])  # the bound's top still fits the literal
    assert f"{2**63 - 1}ull" in largest


class _FakeBuilder:
    def __init__(self):
        self.launches = []
        self.smem = None

    def set_max_dynamic_shared(self, kernel, nbytes):
        self.smem = nbytes

    def launch(self, kernel, grid, block, args, *, shared_mem=0, stream=None):
        self.launches.append((grid, block, args, shared_mem))


class _Array:
    def __init__(self, address):
        self.__cuda_array_interface__ = {"data": (address, False)}


def test_the_launcher_encodes_each_tensor_map_once_and_sizes_the_grid(monkeypatch):
    encoded = []
    monkeypatch.setattr(tma, "encode_tiled_2d",
                        lambda address, rows, cols, box_rows, box_cols:
                        encoded.append((address, rows, cols, box_rows, box_cols)) or address)
    c = compile_named("warpspecialized-gemm", target="h100", target_args={"stages": "4"})
    g = c.launch.geometry  # the geometry the schedule declared (kernel_launch())
    assert g.stages == 4
    builder = _FakeBuilder()
    a, b, out = _Array(0x1000), _Array(0x2000), _Array(0x3000)
    per_tile = tma.WsLauncher(builder, "k", g)
    for _ in range(3):
        per_tile(a, b, out, 1024, 1024, 512)
    assert encoded == [(0x1000, 1024, 512, g.bm, g.bk), (0x2000, 1024, 512, g.bn, g.bk)]
    assert builder.smem == g.smem_bytes
    assert {launch[0] for launch in builder.launches} == {((1024 // 128) * (1024 // 256),)}
    persistent = tma.WsLauncher(builder, "k", g, ctas=5)
    persistent(a, b, out, 1024, 1024, 512)
    assert builder.launches[-1][0] == (5,)
    with pytest.raises(ValueError, match="multiple of 256"):
        per_tile(a, b, out, 1024, 1000, 512)


def test_analyze_runs_the_plan_on_the_calibrated_agents_machine(pipeline_cli):
    res = pipeline_cli(["analyze", *WS, "--json"])
    assert res.exit_code == 0, res.stderr
    steady = json.loads(res.stdout)["steady_state"]
    # two consumers' 64 x 256 x 64 groups per K tile at the fitted share of the peak rate
    work = 2 * (2 * 64 * 256 * 64 // PEAK_MMA_FLOP_PER_CYCLE) / H100_AGENT_MACHINE.mma_efficiency
    assert steady["mma_bound_cycles"] == round(work)
    assert steady["groups"] == 3 and steady["cycles_per_iteration"] >= work


def test_analyze_names_the_epilogue_the_model_charges(pipeline_cli):
    """The TMA store's and split-K's epilogue steps are on the model (docs/guide/agents.md,
    "Timing model"); the direct store is the fitted CTA overhead, so it has no epilogue line."""
    direct = pipeline_cli(["analyze", *WS])
    assert direct.exit_code == 0, direct.stderr
    assert "epilogue" not in direct.stdout
    tma = pipeline_cli(["analyze", *WS, "-p", "store=tma"])
    assert tma.exit_code == 0, tma.stderr
    line = next(x for x in tma.stdout.splitlines() if x.strip().startswith("epilogue"))
    assert "store: a bulk store of 4 sub-tiles of 8192 bytes per agent through 2 buffers" in line
    assert "consumer0" in line and "consumer1" in line and "not charged" in line
    split = pipeline_cli(["analyze", *WS, "-p", "split_k=true", "--json"])
    assert split.exit_code == 0, split.stderr
    epi = json.loads(split.stdout)["epilogue"]
    assert epi["splits"] == 2 and epi["credit"] == 0 and set(epi["held"]) == {"consumer0",
                                                                               "consumer1"}
    assert "split_k: the finish as the last of 2 splits, a 65536-byte slice per agent" in (
        epi["what"])


def test_the_tma_store_shortens_the_modelled_tile():
    def per_tile(params):
        c = compile_named("warpspecialized-gemm", target="h100", params=params,
                          target_args={"stages": "4"})
        return simulate_agents(c.plan, c.body, H100_AGENT_MACHINE, 64).cycles

    assert per_tile({"store": "tma"}) < per_tile({})


def test_multistage_mma_is_costed_at_the_sms_calibrated_rate():
    c = compile_named("multistage-gemm", target="h100", target_args={"stages": "3"})
    mma = next(o for o in c.body if o.tag == H100Tag.MMA)
    p = c.params
    warps = p["warps_m"] * p["warps_n"]
    per_warp = (p["BM"] // p["warps_m"] // 16) * (p["BN"] // p["warps_n"] // 8)
    assert mma.latency == round(per_warp * warps * ISSUE_RATES.mma_per_sm
                                / MMA_SYNC_GEMM_EFFICIENCY)
