"""``export --format trace``: the Chrome trace-event / Perfetto JSON, checked against the
trace-event format rules by a validator written here, on ping-pong and 4-wave."""
from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import golden_data  # noqa: E402
from test_simulate import compile_case  # noqa: E402

from pipeline_core.export import cli_export, trace  # noqa: E402
from pipeline_core.ops import ResourceKind  # noqa: E402
from pipeline_core.simulate import simulate  # noqa: E402

CASES = ("pingpong_bf16", "fourwave_fp8")
PHASES = {"X", "i", "I", "M", "C", "B", "E", "s", "f"}
METADATA = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
            "thread_sort_index": "sort_index"}


def validate_trace(doc) -> list[str]:
    """Problems that would make Perfetto / chrome://tracing warn or mis-draw (empty = valid).

    Rules (Trace Event Format): a JSON object with a ``traceEvents`` list; every event has
    name, ph, ts, pid, tid; ts/dur are finite numbers, dur >= 0; instant events have scope
    g/p/t; metadata events carry their argument; counters have numeric args; complete events
    on one thread nest properly (no partial overlap); tids are not shared between processes;
    every track has a name; displayTimeUnit is "ms" or "ns".
    """
    problems: list[str] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    if doc.get("displayTimeUnit") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit must be 'ms' or 'ns', not {doc.get('displayTimeUnit')!r}")
    owner: dict[int, int] = {}
    named_threads, named_processes = set(), set()
    used_threads, used_processes = set(), set()
    slices: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for k, e in enumerate(doc["traceEvents"]):
        where = f"event {k} ({e.get('name')!r})"
        for key in ("name", "ph", "ts", "pid", "tid"):
            if key not in e:
                problems.append(f"{where}: missing {key}")
        if not isinstance(e.get("name"), str) or not e.get("name"):
            problems.append(f"{where}: name must be a non-empty string")
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"{where}: unknown ph {ph!r}")
        for key in ("ts", "dur"):
            if key in e and (not isinstance(e[key], (int, float)) or isinstance(e[key], bool)
                             or not math.isfinite(e[key])):
                problems.append(f"{where}: {key} must be a finite number")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problems.append(f"{where}: pid and tid must be integers")
            continue
        pid, tid = e["pid"], e["tid"]
        if owner.setdefault(tid, pid) != pid:
            problems.append(f"{where}: tid {tid} used in processes {owner[tid]} and {pid}")
        if "args" in e and not isinstance(e["args"], dict):
            problems.append(f"{where}: args must be an object")
        if ph == "M":
            arg = METADATA.get(e["name"])
            if arg is None or arg not in e.get("args", {}):
                problems.append(f"{where}: metadata needs args.{arg or '?'}")
            if e["name"] == "thread_name":
                named_threads.add((pid, tid))
            if e["name"] == "process_name":
                named_processes.add(pid)
            continue
        used_processes.add(pid)
        if ph == "X":
            if "dur" not in e or e["dur"] < 0:
                problems.append(f"{where}: complete event needs dur >= 0")
                continue
            used_threads.add((pid, tid))
            slices.setdefault((pid, tid), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
        elif ph in ("i", "I"):
            if e.get("s", "t") not in ("g", "p", "t"):
                problems.append(f"{where}: instant scope must be g, p or t")
            if e.get("s", "t") == "t":
                used_threads.add((pid, tid))
        elif ph == "C":
            args = e.get("args", {})
            if not args or not all(isinstance(v, (int, float)) for v in args.values()):
                problems.append(f"{where}: counter args must be numbers")
        elif ph in ("B", "E"):
            problems.append(f"{where}: use complete events (X), not B/E pairs")
        elif ph in ("s", "f"):  # flow events: an id binds the start to its finish
            if not isinstance(e.get("id"), int) or not e.get("cat"):
                problems.append(f"{where}: a flow event needs an integer id and a cat")
            if ph == "f" and e.get("bp") != "e":
                problems.append(f"{where}: a flow finish binds to its enclosing slice (bp e)")
    for track, items in slices.items():
        items.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        stack: list[tuple[float, float, str]] = []
        for start, end, name in items:
            while stack and start >= stack[-1][1]:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"track {track}: {name!r} [{start}, {end}] partially overlaps "
                                f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}]")
                break
            stack.append((start, end, name))
    for track in sorted(used_threads - named_threads):
        problems.append(f"thread {track} has events but no thread_name")
    for pid in sorted(used_processes - named_processes):
        problems.append(f"process {pid} has events but no process_name")
    return problems


@pytest.fixture(scope="module", params=CASES)
def case(request):
    return request.param


@pytest.fixture(scope="module")
def traced():
    cache = {}

    def get(case: str, iterations: int = 3):
        if (case, iterations) not in cache:
            tl = simulate(compile_case(case), iterations)
            doc = json.loads(trace.dumps(tl))
            cache[(case, iterations)] = (tl, doc)
        return cache[(case, iterations)]
    return get


def test_trace_is_valid_trace_event_json(case, traced):
    tl, doc = traced(case)
    assert validate_trace(doc) == []
    json.dumps(doc, allow_nan=False)


def test_validator_catches_broken_traces():
    ok = {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 2}
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 2, "args": {"name": "p"}},
            {"name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 2, "args": {"name": "t"}}]
    base = {"traceEvents": meta + [ok], "displayTimeUnit": "ms"}
    assert validate_trace(base) == []
    overlap = dict(ok, name="b", ts=5, dur=10)
    assert any("partially overlaps" in p for p in validate_trace(dict(base, traceEvents=meta + [ok, overlap])))
    nested = dict(ok, name="c", ts=2, dur=3)
    assert validate_trace(dict(base, traceEvents=meta + [ok, nested])) == []
    assert validate_trace(dict(base, traceEvents=meta + [dict(ok, dur=-1)]))
    assert validate_trace(dict(base, traceEvents=meta + [{k: v for k, v in ok.items() if k != "tid"}]))
    assert validate_trace(dict(base, traceEvents=meta + [dict(ok, ph="i", s="x")]))
    assert validate_trace(dict(base, traceEvents=meta + [dict(ok, pid=3)]))  # tid 2 in two processes
    assert validate_trace(dict(base, traceEvents=[ok]))  # unnamed track
    assert validate_trace({"traceEvents": meta + [ok]})  # no displayTimeUnit


def tracks(doc):
    names = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    return names


def test_one_track_per_group_and_unit(case, traced):
    tl, doc = traced(case)
    names = set(tracks(doc).values())
    for g in tl.groups:
        assert f"group {g.group}" in names
    assert "MMA unit" in names
    assert any(n.startswith("LDS") for n in names)
    assert any(n.startswith("global memory") for n in names)
    processes = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"MMA unit", "LDS (in flight)", "global memory (in flight)"} <= processes


def test_ops_carry_their_identity_in_args(case, traced):
    tl, doc = traced(case)
    group_tids = {trace.group_tid(g.group) for g in tl.groups}
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] in group_tids
           and e["cat"] not in ("phase", "stall")]
    assert len(ops) == sum(1 for g in tl.groups for s in g.steps if not s.is_marker)
    for e in ops:
        for key in ("op", "stage", "subtile", "k_offset", "phase", "iteration", "entry_index",
                    "group", "role", "resource"):
            assert key in e["args"], (e["name"], key)
    kernel = [e for e in ops if e["args"]["phase"] == "KERNEL"]
    assert {e["args"]["iteration"] for e in kernel} == {0, 1, 2}
    mma = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == trace.PID_MMA]
    assert len(mma) == len(tl.busy_on(ResourceKind.MMA_UNIT))
    assert all(e["name"].startswith(f"G{e['args']['group']} MMA") for e in mma)


def test_stalls_and_barriers_are_visible(case, traced):
    tl, doc = traced(case)
    stalls = [e for e in doc["traceEvents"] if e.get("cat") == "stall"]
    assert len(stalls) == sum(1 for g in tl.groups for s in g.steps if s.stall is not None)
    assert sum(e["dur"] for e in stalls) == sum(g.stall_cycles for g in tl.groups)
    waits = [e for e in stalls if e["args"]["reason"] in ("vmcnt", "lgkmcnt")]
    assert waits and all("waited_on" in e["args"] for e in waits)
    releases = [e for e in doc["traceEvents"] if e.get("cat") == "barrier"]
    assert len(releases) == len(tl.barriers) and all(e["ph"] == "i" for e in releases)
    if case == "pingpong_bf16":
        assert any(e["args"]["reason"] == "barrier" for e in stalls)
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert "group 0 vmcnt" in counters and "group 0 lgkmcnt" in counters


def test_time_scale_is_one_cycle_per_microsecond(traced):
    tl, doc = traced("pingpong_bf16")
    assert doc["otherData"]["time_unit"] == "1 trace microsecond = 1 model cycle(s)"
    assert float(doc["otherData"]["clock_ghz"]) == tl.model.clock_ghz
    assert int(doc["otherData"]["makespan_cycles"]) == tl.makespan
    last = max(e["ts"] + e.get("dur", 0) for e in doc["traceEvents"])
    assert last == tl.makespan
    assert all(isinstance(e["ts"], int) for e in doc["traceEvents"])
    half = trace.to_trace(tl, time_scale=0.5)
    assert validate_trace(half) == []
    assert max(e["ts"] + e.get("dur", 0) for e in half["traceEvents"]) == tl.makespan / 2


# --- CLI glue -------------------------------------------------------------------

def export_args(tmp_path=None, fmt="trace", name="out.json", **kw):
    parser = argparse.ArgumentParser()
    cli_export.add_arguments(parser)
    argv = ["--format", fmt] if fmt else []
    if tmp_path is not None:
        argv += ["-o", str(tmp_path / name)]
    for k, v in kw.items():
        argv += [f"--{k}", str(v)]
    return parser.parse_args(argv)


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_run_writes_a_trace_file(tmp_path, capsys, case):
    args = export_args(tmp_path, iterations=3)
    assert cli_export.run(args, compile_case(case)) == 0
    doc = json.loads((tmp_path / "out.json").read_text())
    assert validate_trace(doc) == []
    out, err = capsys.readouterr()
    assert "wrote" in out and "cycles/iteration" in out
    assert err == ""  # no progress when stderr is not a terminal


def test_run_to_stdout_and_from_a_document(capsys):
    args = export_args(None, iterations=2)
    assert cli_export.run(args, golden_data.load("fourwave_fp8")) == 0
    out, _ = capsys.readouterr()
    assert validate_trace(json.loads(out)) == []


def test_format_from_suffix_and_errors(tmp_path, capsys):
    src = golden_data.load("pingpong_bf16")
    assert cli_export.run(export_args(tmp_path, fmt=None, name="t.json", iterations=2), src) == 0
    assert validate_trace(json.loads((tmp_path / "t.json").read_text())) == []
    capsys.readouterr()
    assert cli_export.run(export_args(None, fmt=None), src) == 2
    assert "choose an export format" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the flag's bound is checked while parsing
        export_args(tmp_path, iterations=0)
    assert "argument --iterations: expected an integer in [1, 128], got 0" in capsys.readouterr().err
    args = export_args(tmp_path)
    args.iterations = 0  # a caller that builds its own arguments meets the same bound
    assert cli_export.run(args, src) == 2
    assert "--iterations 0: expected an integer in [1, 128]" in capsys.readouterr().err


def test_progress_only_on_a_terminal(tmp_path, monkeypatch):
    fake = FakeTTY()
    monkeypatch.setattr(sys, "stderr", fake)
    assert cli_export.run(export_args(tmp_path, iterations=3), golden_data.load("pingpong_bf16")) == 0
    shown = fake.getvalue()
    assert "iteration 3/3" in shown and "writing trace events" in shown
    assert shown.endswith("\r\x1b[K")  # the status line is cleared at the end
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    assert cli_export.run(export_args(tmp_path, iterations=3), golden_data.load("pingpong_bf16")) == 0
    assert plain.getvalue() == ""


def test_cli_command_end_to_end(tmp_path, cli, case):
    src = compile_case(case)
    if isinstance(src, dict):
        pytest.skip("schedule plugins not installed")
    doc = golden_data.load(case)
    argv = [a for a in doc["cli"][1:] if a not in ("--format", "json")]
    result = cli("export", *argv, "--format", "trace", "-o", str(tmp_path / "t.json"),
                 "--iterations", "3")
    assert result.exit_code == 0, result.stderr
    assert validate_trace(json.loads((tmp_path / "t.json").read_text())) == []
