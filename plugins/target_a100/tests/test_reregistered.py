"""A production schedule re-registered under a new name, on a new target: compile and check
agree, the timing model prices it with that target's costs, and the emitter writes it for that
target's architecture (issue 39: ``check`` refused what ``compile`` proved, and the timing kept
the H100's issue rates).
"""
from __future__ import annotations

import json
import re
import textwrap

import pytest

from pipeline_core.plugin_api import default_host

#: a third party's plugin module: an sm_86 target (the a100's records with a slower mma and its
#: own architecture) and multistage-gemm's record under another name, defaulting to it
MODULE = textwrap.dedent('''
    import attrs
    from pipeline_core.plugin_api import COPY_RING, TargetRecord, hookimpl
    from pipeline_core_nvidia_h100.multistage import SCHEDULES
    from pipeline_core_target_a100.plugin import MMA, OFFERS, RING_COSTS, a100

    SLOW = RING_COSTS.with_cost(MMA, attrs.evolve(RING_COSTS.get(MMA), interval=4.0))

    def my_sm86(stages=3):
        return attrs.evolve(a100(stages), cost_model=SLOW, arch="sm_86")

    @hookimpl
    def pipeline_core_register_targets():
        return [TargetRecord("my-sm86", "an sm_86 part", my_sm86, family=COPY_RING,
                             offers=OFFERS)]

    @hookimpl
    def pipeline_core_register_schedules():
        return [attrs.evolve(SCHEDULES[0], name="my-gemm", default_target="my-sm86")]
''')
PLUGIN = ["--plugin", "my_retargeted"]


@pytest.fixture
def cli(pipeline_cli, tmp_path, monkeypatch):
    if "multistage-gemm" not in default_host().schedules:
        pytest.skip("pipeline-core-nvidia-h100 is not installed")
    (tmp_path / "my_retargeted.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return lambda *argv: pipeline_cli([*PLUGIN, *argv])


def test_compile_and_check_agree_for_the_registered_name_and_target(cli, tmp_path):
    doc = tmp_path / "my-gemm.json"
    compiled = cli("compile", "my-gemm", "--format", "json", "-o", str(doc))
    assert compiled.exit_code == 0, compiled.stderr
    document = json.loads(doc.read_text())
    assert (document["schedule"], document["target"]) == ("my-gemm", "my-sm86")
    from_document = cli("check", "--input", str(doc))
    by_name = cli("check", "my-gemm")
    assert from_document.exit_code == by_name.exit_code == 0, (from_document.stderr, by_name.stderr)
    assert from_document.stdout.startswith("my-gemm: SAFE (1 warp group x 8 warps")
    assert by_name.stdout.split(" (")[0] == from_document.stdout.split(" (")[0] == "my-gemm: SAFE"


def _mma_busy(text: str) -> int:
    found = re.search(r"MMA unit busy (\d+) cycles", text)
    assert found, text
    return int(found.group(1))


def test_the_same_schedule_is_timed_with_each_targets_own_costs(cli):
    """One K tile: 4 k-steps of 8 warps x 32 mma.sync, at each target's mma interval."""
    slow = cli("analyze", "my-gemm")
    a100 = cli("analyze", "my-gemm", "--target", "a100")
    h100 = cli("analyze", "my-gemm", "--target", "h100")
    assert {slow.exit_code, a100.exit_code, h100.exit_code} == {0}, (slow.stderr, a100.stderr)
    assert _mma_busy(slow.stdout) == 4 * round(32 * 8 * 4.0)             # my-sm86: 4.0 cycles
    assert _mma_busy(a100.stdout) == 4 * round(32 * 8 * 2.5)             # a100: 2.5 cycles
    assert _mma_busy(h100.stdout) == 4 * round(32 * 8 * 1.5 / 0.644)     # h100's calibration


def test_the_emitter_writes_it_for_the_targets_architecture(cli):
    res = cli("emit", "my-gemm")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[1].startswith(
        "// Architecture sm_86 (target my-sm86): build with -arch=sm_86, or -arch=compute_86")
