"""Issue 17's machine-level views: ISA names, one op notation, header, redundant syncs,
compact / kernel-only text, and analyze's stall breakdown, named recurrences and register budget."""
from __future__ import annotations

import json

import pytest

from pipeline_core.export.notation import op_text
from pipeline_core.export.redundant import duplicate_barriers
from pipeline_core.ops import (Entry, FrameworkTag, Op, OpRole, Phase, ResourceKind, barrier,
                               set_prio)
from pipeline_core.sync import BarrierKind, Channel, SyncModel


def test_text_view_speaks_the_targets_isa_and_prologue_loads_name_their_operand(cli):
    out = cli("compile", "pingpong").stdout
    for form in ("s_waitcnt vmcnt(0)", "s_waitcnt lgkmcnt(0)", "s_barrier", "s_setprio 1",
                 "sched_barrier 0"):
        assert form in out, form
    prologue = out.split("PROLOGUE")[1].split("KERNEL")[0]
    assert "LOAD_B[B s0.0 K0]" in prologue and "LOAD_A[A s0.0 K0]" in prologue
    assert "WAIT_VM(" not in out and "stage 0, sub 0" not in out


def test_text_header_names_target_warps_cycles_and_syncs_per_iteration(cli):
    lines = cli("compile", "pingpong").stdout.splitlines()
    assert lines[0].startswith("schedule pingpong on mi355x (sync model amd-mi355x)")
    assert lines[1] == "warps: 2 warp group(s) x 4 warp(s)"
    assert lines[2].startswith("timing model: ") and "cycles/iteration" in lines[2]
    assert lines[3] == "per kernel iteration: 10 waits, 16 barriers, 70 entries"


def test_redundant_waits_are_flagged_from_the_checkers_run(cli):
    out = cli("compile", "pingpong").stdout
    flagged = [line for line in out.splitlines() if "[redundant: never waits" in line]
    assert flagged and all("s_waitcnt" in line for line in flagged)
    assert "redundant syncs (proven by the checker's run):" in out


def test_a_barrier_right_after_a_barrier_is_flagged_but_not_one_after_real_work():
    from pipeline_core_amd_mi355x.sync import MI355X_SYNC

    mma = Op(tag=5, resource=ResourceKind.MMA_UNIT, role=OpRole.COMPUTE, latency=16)
    entries = tuple(Entry(op=o, time_slot=i, phase=Phase.KERNEL)
                    for i, o in enumerate((barrier(), set_prio(0), barrier(), mma, barrier())))
    assert duplicate_barriers(entries, MI355X_SYNC) == {2: "redundant: repeats the barrier at [0]"}


def test_compact_view_of_a_5x8_grid_fits_well_under_200_lines(cli):
    full = cli("compile", "matmul-grid", "-p", "m=5", "-p", "n=8").stdout
    compact = cli("compile", "matmul-grid", "-p", "m=5", "-p", "n=8", "--compact").stdout
    assert len(full.splitlines()) > 1000
    assert len(compact.splitlines()) < 170
    assert compact.count(": ") > 80 and " b0 p0: " in compact  # one line per kernel block


def test_kernel_only_drops_prologue_epilogue_and_blocks(cli):
    out = cli("compile", "pingpong", "--kernel-only").stdout
    assert "KERNEL (70 entries)" in out
    assert "PROLOGUE" not in out and "EPILOGUE" not in out and "BLOCKS" not in out


def test_check_sites_use_the_same_notation_as_the_text_view():
    from pipeline_core.check.program import Instr, Kind

    load = Instr(Kind.LOAD, "kernel", 2, tag=0, name="LOAD_A", channel=0, stage=1, subtile=1,
                 k_shift=-1)
    op = Op(tag=0, stage=1, subtile=1, channel=0, role=OpRole.GLOBAL_LOAD,
            resource=ResourceKind.GLOBAL_MEM, k_offset=3)
    assert load.describe() == op_text(op, {0: "LOAD_A"}) == "LOAD_A[A s1.1 K-1]"


def test_isa_forms_must_format_over_the_ops_fields():
    with pytest.raises(ValueError, match="isa_forms"):
        SyncModel(name="bad", channels=(Channel(name="c", label="c", wait_tag=140,
                                                wait_name="W"),), effects=(),
                  barriers=(BarrierKind(tag=int(FrameworkTag.BARRIER), name="b"),),
                  isa_forms={140: "wait {count}"})


def test_analyze_reports_stalls_by_cause_and_names_recurrence_ops(cli):
    text = cli("analyze", "pingpong").stdout
    assert "stall cycles by cause (all groups, whole run): barrier " in text
    assert "(cycle MMA_LOAD_A[A s1.0] (#13) -> LOAD_A[A s1.0 K1] (#17)" in text
    doc = json.loads(cli("analyze", "pingpong", "--format", "json").stdout)
    assert set(doc["steady_state"]["stall_cycles_by_cause"]) >= {"barrier", "vmcnt"}
    assert doc["recurrence"]["names"] == ["MMA_LOAD_A[A s1.0]", "LOAD_A[A s1.0 K1]"]
    assert doc["register_budget"] == {"budget": 512, "peak": 96, "over": False}


def test_analyze_exits_1_when_the_vgpr_peak_exceeds_the_targets_budget(cli):
    result = cli("analyze", "matmul-grid", "-p", "m=5", "-p", "n=8", "--no-timing")
    assert result.exit_code == 1
    assert "VGPR peak 528, PROBLEM: over the target's budget of 512 by 16" in result.stdout
    assert result.stderr.strip().endswith("exceeds the target's register budget of 512 per wave")
    assert cli("analyze", "matmul-grid", "-p", "m=6", "-p", "n=6", "--no-timing").exit_code == 0


def test_trace_has_a_flow_arrow_from_each_retired_load_to_its_wait(cli, tmp_path):
    out = tmp_path / "pp.json"
    assert cli("export", "pingpong", "-o", str(out)).exit_code == 0
    events = json.loads(out.read_text())["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and set(starts) == set(finishes)
    for fid, s in starts.items():
        f = finishes[fid]
        assert s["ts"] <= f["ts"] and s["tid"] == f["tid"] and "LOAD_" in s["name"].split(" retires ")[1]
        assert s["name"].startswith("s_waitcnt ")


def test_dot_is_laid_out_compactly_and_loop_carried_edges_do_not_rank(cli):
    from pipeline_core.export.dot import graph_from

    text = cli("export", "pingpong", "--format", "dot").stdout
    assert "rankdir=LR" in text and "nodesep" in text
    from pipeline_core.api import compile_named
    g = graph_from(compile_named("pingpong"))
    assert {d["group"] for _, d in g.nodes(data=True)} == {"stage0", "stage1"}
    carried = [d for *_, d in g.edges(data=True) if d["distance"]]
    assert carried and all(d["constraint"] == "false" for d in carried)


def test_png_marks_the_steady_state_window():
    pytest.importorskip("matplotlib")
    from pipeline_core.api import compile_named
    from pipeline_core.export.picture import draw, steady_window_cycles
    from pipeline_core.simulate import simulate

    tl = simulate(compile_named("pingpong"), 8)
    span = steady_window_cycles(tl, tl.summary())
    assert span is not None and 0 < span[0] < span[1] < tl.makespan
    fig = draw(tl)
    # named under the axis (issue 39: inside the band it overprinted the lowest lane's bars)
    assert "steady state, iterations" in fig.axes[0].get_xlabel()
