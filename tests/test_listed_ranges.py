"""The ranges ``pipeline-core schedules`` and ``targets`` list are the ones compile enforces.

For every installed schedule, on every target it is made for, each int ``-p`` parameter and
each int ``-T`` parameter of the target is read from the JSON listing (the text listing prints
the same ``allowed`` words).  A value just outside the listed range (or beside a listed
choice) must be refused with exit 2 and one line naming the key and quoting the listed range;
a value at either end (each choice) must not be refused by that parameter alone: the compile
succeeds, or its refusal names another parameter the value has to agree with (``BM`` a
multiple of ``MMA_M``, ``-T stages`` against the tile's shared memory), or it makes a wait
the target cannot encode (``-T vm_per_load_a=1024`` with the loads a schedule keeps in flight:
a limit of the pair, which :class:`UnencodableWaitError` names with the fix).  A schedule whose
factory checks a tighter range than its ``Param`` declares fails here (issue 25: matmul-grid
listed ``m`` and ``partitions`` as [0, 65536] while compile enforced [2, 16] and 2).
"""
from __future__ import annotations

import json
import re

import pytest

from pipeline_core.api import compile_named
from pipeline_core.errors import PipelineError
from pipeline_core.proof import UnencodableWaitError
from pipeline_core.plugins import default_host
from pipeline_core.testing import run_cli

_RANGE = re.compile(r"^an integer in \[(-?\d+), (-?\d+)\]$")
_CHOICES = re.compile(r"^one of (-?\d+(?:, -?\d+)*)$")


def _listing(what: str) -> dict[str, dict]:
    result = run_cli([what, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return {entry["name"]: entry for entry in json.loads(result.stdout)[what]}


SCHEDULES = _listing("schedules")
TARGETS = _listing("targets")
#: the -c knobs a refusal may name as the other side of a value (``scheduling``)
KNOBS = sorted(_listing("knobs"))
CASES = [(s, t) for s in sorted(SCHEDULES) for t in SCHEDULES[s]["targets"]]


def _values(allowed: str) -> tuple[list[int], list[int]]:
    """(values the listing accepts at its edges, values just outside it) for one int listing."""
    if m := _RANGE.match(allowed):
        low, high = int(m[1]), int(m[2])
        return sorted({low, high}), [low - 1, high + 1]
    m = _CHOICES.match(allowed)
    assert m, f"an int parameter listed as {allowed!r}: neither a range nor choices"
    choices = sorted(int(v) for v in m[1].split(", "))
    beside = {v for c in choices for v in (c - 1, c + 1)} - set(choices)
    return choices, sorted(beside)


def _int_params(entry: dict) -> list[tuple[str, str]]:
    """(name, listed range) of an entry's int parameters (an emitter's are its ``options``)."""
    return [(p["name"], p["allowed"]) for p in entry.get("params", entry.get("options", []))
            if p["type"] == "int"]


def _flags(schedule: str, target: str) -> list[tuple[str, str, str]]:
    """(flag, key, listed range) of every int parameter a compile of the pair takes."""
    return ([("-p", name, allowed) for name, allowed in _int_params(SCHEDULES[schedule])]
            + [("-T", name, allowed) for name, allowed in _int_params(TARGETS[target])])


def test_every_listed_int_parameter_is_covered():
    """The sweep below reaches the parameters the issue named, so it cannot pass vacuously."""
    flags = {(s, flag, key) for s, t in CASES for flag, key, _ in _flags(s, t)}
    assert {("matmul-grid", "-p", "m"), ("matmul-grid", "-p", "partitions"),
            ("default-matmul", "-p", "MMA_M"), ("pingpong", "-T", "max_globals")} <= flags


@pytest.mark.parametrize("schedule, target", CASES)
def test_values_just_outside_the_listed_range_are_refused_quoting_it(schedule, target):
    for flag, key, allowed in _flags(schedule, target):
        for value in _values(allowed)[1]:
            result = run_cli(["compile", schedule, "--target", target, flag, f"{key}={value}"])
            assert result.exit_code == 2, (flag, key, value, result.stdout[:200])
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
            assert f"{flag} {key}={value}" in result.stderr and allowed in result.stderr, result.stderr


@pytest.mark.parametrize("schedule, target", CASES)
def test_values_at_the_listed_ends_are_refused_only_for_another_parameter(schedule, target):
    host = default_host()
    alone = []
    for flag, key, allowed in _flags(schedule, target):
        others = {p["name"] for p in SCHEDULES[schedule]["params"] + TARGETS[target]["params"]}
        others = (others | set(KNOBS)) - {key}
        for value in _values(allowed)[0]:
            given = {key: str(value)}
            try:
                compile_named(schedule, target=target, host=host,
                              params=given if flag == "-p" else None,
                              target_args=given if flag == "-T" else None)
            except UnencodableWaitError:
                pass  # the pair's loads in flight: a wait the target cannot count (named fix)
            except PipelineError as exc:
                named = [o for o in others if re.search(rf"(?<![A-Za-z_]){re.escape(o)}(?![A-Za-z_])",
                                                        str(exc))]
                if not named:
                    alone.append(f"{flag} {key}={value} (listed: {allowed}): {exc}")
    assert not alone, f"{schedule} on {target} refuses listed values on their own:\n" + "\n".join(alone)


EMITTERS = _listing("emitters")
EMIT_CASES = [(e, s, t) for e in sorted(EMITTERS) for s in EMITTERS[e]["schedules"]
              for t in EMITTERS[e]["targets"] if t in SCHEDULES[s]["targets"]]


@pytest.mark.parametrize("emitter, schedule, target", EMIT_CASES)
def test_emitter_options_are_enforced_as_listed(emitter, schedule, target):
    """The same two rules for each ``-O`` option ``pipeline-core emitters`` lists."""
    alone = []
    for key, allowed in _int_params(EMITTERS[emitter]):
        others = {p["name"] for p in EMITTERS[emitter]["options"]} - {key}
        accepted, outside = _values(allowed)
        for value in outside:
            result = run_cli(["emit", schedule, "--target", target, "--emitter", emitter,
                              "-O", f"{key}={value}"])
            assert result.exit_code == 2 and result.stdout == "", (key, value)
            assert f"-O {key}={value}" in result.stderr and allowed in result.stderr, result.stderr
        for value in accepted:
            result = run_cli(["emit", schedule, "--target", target, "--emitter", emitter,
                              "-O", f"{key}={value}"])
            if result.exit_code and not any(
                    re.search(rf"(?<![A-Za-z_]){re.escape(o)}(?![A-Za-z_])", result.stderr)
                    for o in others):
                alone.append(f"-O {key}={value} (listed: {allowed}): {result.stderr.strip()}")
    assert not alone, f"{emitter} refuses listed values on their own:\n" + "\n".join(alone)


def test_every_emitter_option_is_covered():
    swept = {(e, key) for e, _, _ in EMIT_CASES for key, _ in _int_params(EMITTERS[e])}
    assert {("cuda-pingpong", "BM"), ("cuda-pingpong", "BK"), ("cuda-wgmma", "watchdog")} <= swept
