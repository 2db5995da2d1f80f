"""The ranges ``pipeline-core schedules`` and ``targets`` list are the ones compile enforces.

For every installed schedule, on every target it is made for, each int ``-p`` parameter and
each int ``-T`` parameter of the target is read from the JSON listing (its ``bound`` or
``choices``; the text listing prints the same range as ``allowed`` words, checked below).  A value just outside the listed range (or beside a listed
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
from pipeline_core.plugins import default_host
from pipeline_core.proof import UnencodableWaitError
from pipeline_core.testing import run_cli


def _listing(what: str) -> dict[str, dict]:
    result = run_cli([what, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return {entry["name"]: entry for entry in json.loads(result.stdout)[what]}


SCHEDULES = _listing("schedules")
TARGETS = _listing("targets")
#: the -c knobs a refusal may name as the other side of a value (``scheduling``)
KNOBS = sorted(_listing("knobs"))
CASES = [(s, t) for s in sorted(SCHEDULES) for t in SCHEDULES[s]["targets"]]


def _values(row: dict) -> tuple[list[int], list[int]]:
    """(values the listing accepts at its edges, values just outside it) of one int row: its
    ``bound`` ends, or its ``choices`` and their neighbours."""
    if "choices" in row:
        choices = sorted(row["choices"])
        beside = {v for c in choices for v in (c - 1, c + 1)} - set(choices)
        return choices, sorted(beside)
    low, high = row["bound"]["low"], row["bound"]["high"]
    return sorted({low, high}), [low - 1, high + 1]


def _int_params(entry: dict) -> list[dict]:
    """The listing rows of an entry's int parameters (an emitter's are its ``options``)."""
    return [p for p in entry.get("params", entry.get("options", [])) if p["type"] == "int"]


def _flags(schedule: str, target: str) -> list[tuple[str, dict]]:
    """(flag, listing row) of every int parameter a compile of the pair takes."""
    return ([("-p", row) for row in _int_params(SCHEDULES[schedule])]
            + [("-T", row) for row in _int_params(TARGETS[target])])


def _names(text: str, names: set[str]) -> list[str]:
    """The ``names`` that appear in ``text`` as whole words."""
    return [n for n in sorted(names)
            if re.search(rf"(?<![A-Za-z_]){re.escape(n)}(?![A-Za-z_])", text)]


def test_every_listed_int_parameter_is_covered():
    """The sweep below reaches the parameters the issue named, so it cannot pass vacuously."""
    flags = {(s, flag, row["name"]) for s, t in CASES for flag, row in _flags(s, t)}
    assert {("matmul-grid", "-p", "m"), ("matmul-grid", "-p", "partitions"),
            ("default-matmul", "-p", "MMA_M"), ("pingpong", "-T", "max_globals")} <= flags
    swept_targets = {t for _, t in CASES}
    assert {t for t, entry in TARGETS.items() if _int_params(entry)} <= swept_targets


@pytest.mark.parametrize("listing", [SCHEDULES, TARGETS], ids=["schedules", "targets"])
def test_the_words_and_the_data_of_a_range_agree(listing):
    """``allowed`` (what the text listing prints) says the range ``bound``/``choices`` hold."""
    for entry in listing.values():
        for row in _int_params(entry):
            if "choices" in row:
                assert row["allowed"] == "one of " + ", ".join(map(str, row["choices"]))
            else:
                assert row["allowed"] == (f"an integer in [{row['bound']['low']}, "
                                          f"{row['bound']['high']}]"), row


@pytest.mark.parametrize("schedule, target", CASES)
def test_values_just_outside_the_listed_range_are_refused_quoting_it(schedule, target):
    for flag, row in _flags(schedule, target):
        key, allowed = row["name"], row["allowed"]
        for value in _values(row)[1]:
            result = run_cli(["compile", schedule, "--target", target, flag, f"{key}={value}"])
            assert result.exit_code == 2, (flag, key, value, result.stdout[:200])
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
            assert f"{flag} {key}={value}" in result.stderr and allowed in result.stderr, result.stderr


@pytest.mark.parametrize("schedule, target", CASES)
def test_values_at_the_listed_ends_are_refused_only_for_another_parameter(schedule, target):
    host = default_host()
    names = {p["name"] for p in SCHEDULES[schedule]["params"] + TARGETS[target]["params"]}
    alone = []
    for flag, row in _flags(schedule, target):
        key = row["name"]
        for value in _values(row)[0]:
            given = {key: str(value)}
            try:
                compile_named(schedule, target=target, host=host,
                              params=given if flag == "-p" else None,
                              target_args=given if flag == "-T" else None)
            except UnencodableWaitError:
                pass  # the pair's loads in flight: a wait the target cannot count (named fix)
            except PipelineError as exc:
                if not _names(str(exc), (names | set(KNOBS)) - {key}):
                    alone.append(f"{flag} {key}={value} (listed: {row['allowed']}): {exc}")
    assert not alone, f"{schedule} on {target} refuses listed values on their own:\n" + "\n".join(alone)


EMITTERS = _listing("emitters")
EMIT_CASES = [(e, s, t) for e in sorted(EMITTERS) for s in EMITTERS[e]["schedules"]
              for t in EMITTERS[e]["targets"] if t in SCHEDULES[s]["targets"]]


@pytest.mark.parametrize("emitter, schedule, target", EMIT_CASES)
def test_emitter_options_are_enforced_as_listed(emitter, schedule, target):
    """The same two rules for each ``-O`` option ``pipeline-core emitters`` lists; a refusal
    naming one of the schedule's or target's own parameters (an emitter that does not write
    every variant of the schedule, e.g. cuda-attention's refusal of -p block_m=256) is for another
    parameter."""
    names = ({p["name"] for p in EMITTERS[emitter]["options"]}
             | {p["name"] for p in SCHEDULES[schedule]["params"] + TARGETS[target]["params"]})
    alone = []
    for row in _int_params(EMITTERS[emitter]):
        key, allowed = row["name"], row["allowed"]
        accepted, outside = _values(row)
        for value in outside + accepted:
            result = run_cli(["emit", schedule, "--target", target, "--emitter", emitter,
                              "-O", f"{key}={value}"])
            if value in outside:
                assert result.exit_code == 2 and result.stdout == "", (key, value)
                assert f"-O {key}={value}" in result.stderr and allowed in result.stderr, result.stderr
            elif result.exit_code and not _names(result.stderr, names - {key}):
                alone.append(f"-O {key}={value} (listed: {allowed}): {result.stderr.strip()}")
    assert not alone, f"{emitter} refuses listed values on their own:\n" + "\n".join(alone)


def test_every_emitter_option_is_covered():
    swept = {(e, row["name"]) for e, _, _ in EMIT_CASES for row in _int_params(EMITTERS[e])}
    assert {("cuda-pingpong", "BM"), ("cuda-pingpong", "BK"), ("cuda-wgmma", "watchdog")} <= swept
