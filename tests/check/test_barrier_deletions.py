"""Delete each barrier of every bundled schedule's compiled document, one at a time, and check
the result as ``pipeline-core check --input`` does (the warps the document records, the
iterations ``check`` picks): every deletion is flagged with the hazard the table expects, or
belongs to a group of barriers that back each other up, shown harmless here by the rule the
group states (pipeline_core/check/README.md, "Mutation testing").

A group's ``needed`` is how many of its barriers the proof needs: removing any ``len - needed``
of them stays SAFE, removing any one more is flagged with the group's hazard; ``needed`` 0 means
the barriers order no shared-memory access at all (removing all of them together stays SAFE).
The agents schedule (``warpspecialized-gemm``) has no barrier entries; its proof is tested in
tests/test_agents_prove.py.
"""
from __future__ import annotations

import argparse
import io
import itertools
import json

import attrs
import pytest

from pipeline_core.api import compile_named
from pipeline_core.check import check_document
from pipeline_core.check.cli import add_arguments, run
from pipeline_core.check.mutate import mutations
from pipeline_core.document import dumps

RAW, WAR = "LDS_RAW", "LDS_WAR"
Where = tuple[str, int]  #: (phase, entry index) of a barrier in the compiled document


@attrs.frozen(kw_only=True)
class Redundant:
    """Barriers that back each other up: the proof needs ``needed`` of them."""

    sites: tuple[Where, ...]
    needed: int
    kind: str | None  #: the hazard once fewer than ``needed`` remain (None when ``needed`` is 0)
    why: str


@attrs.frozen(kw_only=True)
class Case:
    schedule: str
    target: str
    flagged: dict[Where, str]  #: barrier -> the first hazard its deletion causes
    redundant: tuple[Redundant, ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    target_args: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in (*self.params, *self.target_args))
        return f"{self.schedule}@{self.target}" + (f"[{extra}]" if extra else "")


def _k(*indices: int) -> tuple[Where, ...]:
    return tuple(("kernel", i) for i in indices)


def _e(*indices: int) -> tuple[Where, ...]:
    return tuple(("epilogue", i) for i in indices)


# Ping-pong on the MI355X (matmul-grid's default m=2 n=2 body is the same program).  Group 1
# runs one barrier behind group 0, so an access of one group is ordered before an access of the
# other only with two barriers between them in the program text.
AMD_PINGPONG_FLAGGED = {
    # publishes the first stage's loads (waited at prologue[4]) before group 0's first reads
    ("prologue", 5): RAW,
    # a group's first reads of a stage vs the other group's prefetch into it (kernel[12]/[47])
    ("kernel", 4): WAR, ("kernel", 9): WAR, ("kernel", 39): WAR, ("kernel", 44): WAR,
    # publish the prefetches retired by wait_vm(12) at kernel[29]/[64] before the next half reads
    ("kernel", 30): RAW, ("kernel", 34): RAW, ("kernel", 65): RAW, ("kernel", 69): RAW,
}
AMD_PINGPONG_REDUNDANT = (
    Redundant(sites=_k(13, 18, 21, 26), needed=2, kind=WAR,
              why="the barriers around MMA[m0,n1] and MMA[m1,n0] all lie between block 1's read "
                  "of B s0.1 (kernel[11]) and block 3's prefetch into it (kernel[28]): the other "
                  "group's read is ordered before the write by any 2 of the 4"),
    Redundant(sites=_k(48, 53, 56, 61), needed=2, kind=WAR,
              why="the same 4 barriers of partition 1, between block 5's read of B s1.1 "
                  "(kernel[46]) and block 7's prefetch into it (kernel[63])"),
    Redundant(sites=_e(13, 18, 22, 28), needed=2, kind=RAW,
              why="after wait_vm(0) at epilogue[12] retired the last iteration's prefetches "
                  "(kernel[47] B s1.0 ...), any 2 of these 4 publish them to the other group "
                  "before the epilogue reads stage 1 (epilogue[30])"),
    Redundant(sites=_e(4, 9, 33, 38, 42, 47, 50, 56, 57), needed=0, kind=None,
              why="MMA pacing only (they keep the two groups alternating on the MMA unit): the "
                  "epilogue loads nothing after epilogue[3], epilogue[4]/[9] come before the "
                  "wait that retires that load (a barrier publishes only retired data), and "
                  "everything read after epilogue[28] was published by then"),
)
# Ping-pong on h100-pingpong: the same program with cp.async waits (no lgkm waits, so other
# indices); ldmatrix is synchronous, so the WAR fixes name a barrier, not a counter.
H100_PINGPONG_FLAGGED = {
    ("prologue", 5): RAW,
    ("kernel", 3): WAR, ("kernel", 7): WAR, ("kernel", 34): WAR, ("kernel", 38): WAR,
    ("kernel", 26): RAW, ("kernel", 30): RAW, ("kernel", 57): RAW, ("kernel", 61): RAW,
}
H100_PINGPONG_REDUNDANT = (
    Redundant(sites=_k(11, 15, 18, 22), needed=2, kind=WAR,
              why="between block 1's read of B s0.1 (kernel[9]) and block 3's prefetch into it "
                  "(kernel[24]): any 2 of the 4 order the other group's read before the write"),
    Redundant(sites=_k(42, 46, 49, 53), needed=2, kind=WAR,
              why="the same 4 barriers of partition 1 (read kernel[40], prefetch kernel[55])"),
    Redundant(sites=_e(10, 14, 17, 22), needed=2, kind=RAW,
              why="after cp.async.wait_group 0 at epilogue[9], any 2 of these 4 publish the last "
                  "prefetches (kernel[41] B s1.0 ...) before the epilogue reads stage 1"),
    Redundant(sites=_e(3, 7, 26, 30, 33, 37, 39, 44, 45), needed=0, kind=None,
              why="MMA pacing only: no load after epilogue[2], epilogue[3]/[7] precede the wait "
                  "that retires it, and everything read after epilogue[22] was published by then"),
)
GENERIC_RING = {("kernel", 1): RAW, ("kernel", 18): RAW, ("kernel", 35): RAW,
                ("epilogue", 1): RAW, ("epilogue", 15): RAW}
HELLO_RING = {("kernel", 1): RAW, ("kernel", 9): RAW, ("kernel", 17): RAW,
              ("epilogue", 1): RAW, ("epilogue", 6): RAW}

CASES = [
    Case(schedule="pingpong", target="mi355x", flagged=AMD_PINGPONG_FLAGGED,
         redundant=AMD_PINGPONG_REDUNDANT),
    Case(schedule="matmul-grid", target="mi355x", flagged=AMD_PINGPONG_FLAGGED,
         redundant=AMD_PINGPONG_REDUNDANT),
    Case(schedule="pingpong", target="h100-pingpong", flagged=H100_PINGPONG_FLAGGED,
         redundant=H100_PINGPONG_REDUNDANT),
    # 4-wave: one group of 4 warps; every barrier but the last publishes a stage
    Case(schedule="4wave", target="mi355x",
         flagged={("prologue", 9): RAW, ("prologue", 12): RAW, ("kernel", 3): RAW,
                  ("kernel", 19): RAW, ("kernel", 35): RAW, ("kernel", 51): RAW,
                  ("epilogue", 1): RAW},
         redundant=(Redundant(sites=_e(33), needed=0, kind=None,
                              why="the epilogue's last entry: no access follows it"),)),
    Case(schedule="default-matmul", target="mi355x-single-buffer",
         flagged={("prologue", 2): RAW, ("kernel", 2): WAR, ("kernel", 6): RAW,
                  ("epilogue", 2): WAR, ("epilogue", 7): RAW}),
    # the ring lowering's rings: one wait + barrier per K tile, each publishing one stage
    # to the other warps (cp.async data is visible to the waiting thread only)
    Case(schedule="multistage-gemm", target="h100", flagged=GENERIC_RING),
    Case(schedule="hello", target="toy-gpu", flagged=HELLO_RING),
    Case(schedule="hello", target="h100", flagged=HELLO_RING),
]


def _document(case: Case) -> dict:
    compiled = compile_named(case.schedule, target=case.target, params=dict(case.params),
                             target_args=dict(case.target_args))
    return json.loads(dumps(compiled))  # exactly the bytes `compile --format json` writes


def _barriers(document: dict) -> list[Where]:
    return [(m.phase, m.index) for m in mutations(document) if m.category == "remove_barrier"]


def _without(document: dict, sites) -> dict:
    doc = dict(document)
    for phase in ("prologue", "kernel", "epilogue"):
        drop = {i for p, i in sites if p == phase}
        if drop:
            kept = [dict(e) for i, e in enumerate(document[phase]) if i not in drop]
            for n, e in enumerate(kept):
                e["index"] = n
            doc[phase] = kept
    return doc


def _check_input(document: dict, *argv: str) -> tuple[int, dict | str]:
    """``pipeline-core check --input FILE --format json [argv]``: exit status, verdict or error."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    status = run(parser.parse_args(["--format", "json", *argv]), document, out=out, err=err)
    return status, (json.loads(out.getvalue()) if status in (0, 1) else err.getvalue())


def _first(document: dict, sites) -> str:
    status, verdict = _check_input(_without(document, sites))
    assert status in (0, 1), verdict
    assert isinstance(verdict, dict)
    return "SAFE" if verdict["safe"] else verdict["violations"][0]["kind"]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.id)
def compiled(request):
    return request.param, _document(request.param)


def test_every_barrier_is_judged(compiled):
    case, document = compiled
    judged = list(case.flagged) + [s for group in case.redundant for s in group.sites]
    assert len(judged) == len(set(judged))
    assert sorted(judged) == sorted(_barriers(document))


def test_each_deletion_gets_its_verdict(compiled):
    case, document = compiled
    got = {site: _first(document, [site]) for site in _barriers(document)}
    want = {**case.flagged, **{s: "SAFE" for group in case.redundant for s in group.sites}}
    assert got == want


def test_redundant_barriers_back_each_other_up(compiled):
    case, document = compiled
    for group in case.redundant:
        spare = len(group.sites) - group.needed
        for sites in itertools.combinations(group.sites, spare):
            assert _first(document, sites) == "SAFE", (group.why, sites)
        if group.needed:
            for sites in itertools.combinations(group.sites, spare + 1):
                assert _first(document, sites) == group.kind, (group.why, sites)


def test_every_flagged_deletion_names_a_fix_it_can_apply(compiled):
    """The checker reports every hazard without crashing; a fix names a counter only for an op
    a counter tracks (ldmatrix has none: its hazards need a barrier or a reorder)."""
    case, document = compiled
    for site in case.flagged:
        status, verdict = _check_input(_without(document, [site]))
        assert status == 1 and isinstance(verdict, dict)
        for v in verdict["violations"]:
            fix = v["fix"]
            assert fix["action"] in ("lower_wait", "insert_wait", "insert_barrier", "move_entry",
                                     "review"), fix
            if fix["action"] in ("lower_wait", "insert_wait"):
                assert fix["counter"] is not None and fix["value"] is not None, fix


@pytest.mark.parametrize("params,target_args", [
    ((), (("stages", "2"),)), ((), (("stages", "4"),)),
    ((("warps_m", "1"), ("warps_n", "1"), ("BK", "32"), ("BM", "64"), ("BN", "64")), ()),
    ((("warps_m", "4"), ("warps_n", "2")), ()),
    pytest.param((("warps_m", "4"), ("warps_n", "8"), ("BM", "256"), ("BN", "256")), (),
                 marks=pytest.mark.slow),  # 32 warps, a full CTA: the sweep's longest proofs
])
def test_every_multistage_barrier_is_needed_at_every_shape(params, target_args):
    """The ring's barriers publish each stage to the other warps: with the real warp count
    (one warp still counts as 2 agents, its threads reading each other's copies) every one is
    needed, whatever the stage count or warp grid."""
    case = Case(schedule="multistage-gemm", target="h100", flagged={}, params=params,
                target_args=target_args)
    document = _document(case)
    g = dict(params)
    warps = int(g.get("warps_m", 2)) * int(g.get("warps_n", 4))
    assert document["execution"]["warps_per_group"] == max(warps, 2)
    barriers = _barriers(document)
    assert len(barriers) == 2 * int(dict(target_args).get("stages", 3)) - 1
    assert {site: _first(document, [site]) for site in barriers} == {s: RAW for s in barriers}


def test_h100_pingpong_with_minimal_barriers_reports_instead_of_crashing(cli):
    """Issue 23: `KeyError: None` (exit 70) while building the fix of an LDS_WAR whose read,
    an ldmatrix, has no counter.  Now: exit 1, and the fix asks for a barrier, not a wait."""
    result = cli("compile", "pingpong", "--target", "h100-pingpong", "-c", "minimal_barriers=true")
    assert result.exit_code == 1, result.stderr
    assert "LDS_WAR" in result.stderr and "add a barrier between them" in result.stderr
    result = cli("check", "pingpong", "--target", "h100-pingpong", "-c", "minimal_barriers=true",
                 "--format", "json")
    assert result.exit_code == 1, result.stderr
    war = [v for v in json.loads(result.stdout)["violations"] if v["kind"] == WAR]
    assert war and all(v["fix"] == {**v["fix"], "action": "insert_barrier", "counter": None,
                                    "value": None} for v in war)


def test_a_proof_never_models_fewer_warps_than_the_kernel_runs():
    """`check --input` models what the document records; asking for fewer is refused with one
    line (a barrier between the missing warps would go unchecked), more is modelled and said."""
    document = _document(Case(schedule="multistage-gemm", target="h100", flagged={}))
    assert document["execution"] == {"groups": 1, "warps_per_group": 8}
    broken = _without(document, [("kernel", 1)])
    status, verdict = _check_input(broken)
    assert status == 1 and isinstance(verdict, dict) and verdict["warps_per_group"] == 8
    assert check_document(broken).warps_per_group == 8  # the API reads the record too
    status, error = _check_input(broken, "--warps-per-group", "2")
    assert status == 2 and isinstance(error, str) and error.count("\n") == 1
    assert "--warps-per-group 2: the document records execution.warps_per_group 8" in error
    assert "pass --warps-per-group 8 or more" in error
    status, verdict = _check_input(broken, "--warps-per-group", "16")
    assert status == 1 and isinstance(verdict, dict) and verdict["warps_per_group"] == 16


def test_a_per_thread_channel_is_never_proven_with_one_agent():
    """cp.async-like channels (per thread, data seen by the issuer only): even a document that
    records no warps, or a request for one, is modelled as at least 2 agents."""
    document = _document(Case(schedule="hello", target="toy-gpu", flagged={}))
    assert document["execution"]["warps_per_group"] == 2  # toy-gpu declares none: the floor
    unrecorded = _without({k: v for k, v in document.items() if k != "execution"}, [("kernel", 1)])
    status, verdict = _check_input(unrecorded)
    assert status == 1 and isinstance(verdict, dict) and verdict["warps_per_group"] == 2
    status, error = _check_input(unrecorded, "--warps-per-group", "1")
    assert status == 2 and isinstance(error, str)
    assert "--warps-per-group 1: the toy-gpu sync model counts a channel per thread" in error


def test_a_fix_for_an_op_no_counter_tracks_names_a_barrier_or_a_reorder():
    """``completion_fix`` with no counter (the op is synchronous for its issuer): between two
    warps a barrier, inside one warp a reorder; never a wait, which could not retire it."""
    from pipeline_core.check.counters import model_for_document
    from pipeline_core.check.fixes import completion_fix
    from pipeline_core.check.program import Kind, decode
    from pipeline_core.check.trace import expand

    document = _document(Case(schedule="hello", target="toy-gpu", flagged={}))
    one, other = expand(decode(document, model_for_document(document)), 1, 2)
    frag = next(p for p, e in enumerate(one.events) if e.instr.kind is Kind.FRAG)
    load = next(p for p in range(frag, len(one.events)) if one.events[p].instr.kind is Kind.LOAD
                and one.bphase[p] == one.bphase[frag])  # no barrier between the two
    fix = completion_fix(one, frag, other, load, None)
    assert (fix.action, fix.counter, fix.value) == ("insert_barrier", None, None)
    assert "add a barrier between them" in fix.text and "wait" not in fix.text
    fix = completion_fix(one, load, one, frag, None)  # the op comes after its use
    assert fix.action == "review" and "reorder the entries" in fix.text


@pytest.mark.parametrize("record", ["deleted", None, {"groups": 1, "warps_per_group": 1}])
def test_a_racy_document_is_not_proven_by_editing_its_execution_record(record):
    """Issue 33: the warps a document's proof models come from its schedule on its target;
    its ``execution`` record may ask for more, never fewer.  Every barrier deletion of 4wave
    that races stays UNSAFE with the record deleted or null, and is refused in one line with
    the record shrunk to 1 group x 1 warp."""
    document = _document(Case(schedule="4wave", target="mi355x", flagged={}))
    assert document["execution"]["warps_per_group"] == 4
    racy = [s for s in _barriers(document) if _check_input(_without(document, [s]))[0] == 1]
    assert len(racy) >= 7
    for site in racy:
        broken = _without(document, [site])
        if record == "deleted":
            del broken["execution"]
        else:
            broken["execution"] = record
        status, out = _check_input(broken)
        if record is None or record == "deleted":
            assert status == 1 and isinstance(out, dict) and out["warps_per_group"] == 4, site
        else:
            assert status == 2 and isinstance(out, str) and out.count("\n") == 1
            assert "execution.warps_per_group: 1, but schedule 4wave runs 4 warps" in out


def test_a_document_of_a_schedule_not_installed_must_record_its_warps():
    document = _document(Case(schedule="4wave", target="mi355x", flagged={}))
    del document["execution"]
    document["schedule"] = "not-installed"
    status, out = _check_input(document)
    assert status == 2 and isinstance(out, str) and "execution: missing" in out
