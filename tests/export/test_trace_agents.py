"""A warp-specialized plan on the one timing entry point (pipeline_core.simulate.run.model_run):
the trace and the picture show the agents model's run, not an empty timeline (issue 24)."""
from __future__ import annotations

import json

import pytest

from pipeline_core.api import compile_named
from pipeline_core.export import trace
from pipeline_core.metrics import steady_state
from pipeline_core.simulate import SimulationError, model_run


@pytest.fixture(scope="module")
def compiled():
    return compile_named("warpspecialized-gemm", target="h100")


def test_the_trace_has_a_producer_and_consumer_tracks_over_the_run(compiled):
    doc = trace.to_trace(model_run(compiled, 8))
    threads = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == trace.PID_GROUPS}
    assert set(threads) == {"producer", "consumer0", "consumer1"}
    for name, tid in threads.items():
        slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == tid]
        assert slices, name
        assert max(e["ts"] + e["dur"] for e in slices) - min(e["ts"] for e in slices) >= 500
    assert int(doc["otherData"]["makespan_cycles"]) >= 500
    assert doc["otherData"]["warp_groups"] == "3"
    # the consumers' MMA groups occupy the MMA unit; the producer's copies are in flight
    mma = [e for e in doc["traceEvents"] if e["pid"] == trace.PID_MMA and e["ph"] == "X"]
    copies = [e for e in doc["traceEvents"] if e["pid"] == trace.PID_GLOBAL and e["ph"] == "X"]
    assert mma and copies
    # stalls name the ring or counter the agent waited on, and slices speak the plan's ISA forms
    stalls = {e["args"]["reason"] for e in doc["traceEvents"] if e.get("cat") == "stall"}
    assert "full" in stalls and "empty" in stalls
    assert any("parity" in e["name"] for e in doc["traceEvents"] if e["ph"] == "X")


def test_analyze_and_the_trace_report_the_same_run(compiled):
    tl = model_run(compiled, 12)
    s = steady_state(compiled, 12)
    assert s is not None and s.groups == len(tl.groups) == 3
    assert s.cycles_per_iteration == tl.summary().steady_state_cycles
    assert dict(s.stalls) and sum(dict(s.stalls).values()) == sum(g.stall_cycles for g in tl.groups)


def test_the_cli_trace_is_not_empty(tmp_path, compiled):
    from pipeline_core.cli import main

    out = tmp_path / "ws.json"
    assert main(["export", "warpspecialized-gemm", "--target", "h100", "--format", "trace",
                 "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert int(doc["otherData"]["makespan_cycles"]) >= 500


def test_a_target_without_an_agents_machine_is_refused_in_one_line(compiled):
    import attrs

    bare = attrs.evolve(compiled, target_profile=attrs.evolve(compiled.target_profile,
                                                              agent_machine=None))
    with pytest.raises(SimulationError, match="declares no agents timing machine"):
        model_run(bare, 8)
    assert steady_state(bare, 8) is None


def test_the_picture_has_a_lane_per_agent_and_the_mma_unit(compiled):
    pytest.importorskip("matplotlib")
    from pipeline_core.export import picture

    tl = model_run(compiled, 8)
    fig = picture.draw(tl)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:3] == ["producer", "consumer0", "consumer1"] and "MMA unit" in labels
    assert ax.get_xlim()[1] >= 500
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "stall: full" in legend and "stall: empty" in legend
