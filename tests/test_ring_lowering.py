"""The ring lowering (pipeline_core/lowering/ring.py) on m x n MMA grids per K tile.

A test plugin declares ``ring-grid``: one K tile of LOAD_A, LOAD_B, ``m`` A fragments, ``n``
B fragments and the ``m x n`` MMAs (fragments first, or interleaved row by row), for every
copy-ring target (``COPY_RING``).  Beside the installed copy-ring targets (the example's
toy-gpu and the H100, whose fragment loads are synchronous under a register interlock) it
registers ``toy-async``: the toy's copy ring plus an asynchronous, in-order fragment channel
and no register interlock, so a compute reads its operands only after an explicit fragment
wait retired their loads (pipeline_core/sync/derive.py, step 4); and three variants of it:
an out-of-order fragment channel, one counted in commit groups, and one with a register
interlock (whose MMAs retire the reads: no fragment wait at all).

Every compile runs the proof stage: a compile that returns is proven SAFE.  The derived waits
are the loosest the proof accepts at their places: raising any one of them by 1 is UNSAFE.
"""
from __future__ import annotations

import attrs
import pytest

from pipeline_core import hookimpl
from pipeline_core.api import compile_named
from pipeline_core.config import ScheduleConfig, TargetProfile
from pipeline_core.costs import annotate
from pipeline_core.ops import Op, OpRole, Phase, logical
from pipeline_core.proof import prove
from pipeline_core.schedule import COPY_RING, Param, ScheduleRecord, TargetRecord
from pipeline_core.sync import Channel, Effect, SyncModel
from pipeline_core.sync.derive import derive_waits
from pipeline_core.testing import fresh_host

from hello_schedule.plugin import TAG_NAMES, TOY_SYNC, toy_gpu

LOAD_A, LOAD_B, FRAG_A, FRAG_B, MMA = range(5)  #: the copy-ring family's kernel tags
#: the fragment channel's wait and commit (the toy's own sync tags are 140-142)
WAIT_FRAG, COMMIT_FRAG = 143, 144


def async_sync(name: str, *, interlock: bool = False, in_order: bool = True,
               group: bool = False) -> SyncModel:
    """The toy's sync model with fragment loads counted on their own channel ``frag``."""
    frag = Channel(name="frag", label="fragment loads", wait_tag=WAIT_FRAG,
                   wait_name="WAIT_FRAG", in_order=in_order, owner="thread", max_wait=15,
                   commit_tag=COMMIT_FRAG if group else None, unit="group" if group else "op")
    return attrs.evolve(
        TOY_SYNC, name=name, channels=TOY_SYNC.channels + (frag,),
        effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="copy"),
                 Effect(role=OpRole.FRAGMENT_LOAD, counter="frag"),
                 Effect(role=OpRole.COMPUTE, counter=None)),
        register_interlock=interlock,
        isa_forms={**TOY_SYNC.isa_forms, WAIT_FRAG: "frag.wait {wait_value}",
                   COMMIT_FRAG: "frag.commit"})


#: test targets: name -> fragment channel variant (toy-async: in order, no interlock)
ASYNC_TARGETS = {"toy-async": {}, "toy-async-ooo": {"in_order": False},
                 "toy-async-group": {"group": True}, "toy-async-interlock": {"interlock": True}}


def _target_factory(name: str):
    def make(stages: int = 3) -> TargetProfile:
        return attrs.evolve(toy_gpu(stages), sync=async_sync(name, **ASYNC_TARGETS[name]))
    return make


class RingGrid:
    """One K tile with an ``m x n`` grid of MMAs (the ring lowering does the rest)."""

    name = "ring-grid"

    def __init__(self, target: TargetProfile, m: int, n: int, interleaved: bool) -> None:
        self.target, self.m, self.n, self.interleaved = target, m, n, interleaved

    def config(self):
        return self.target.pipeline

    def lowering(self) -> str:
        return "ring"

    def build_body(self) -> list[Op]:
        ops = [logical(LOAD_A, channel=0), logical(LOAD_B, channel=1)]
        frag_a = [logical(FRAG_A, channel=0, subtile=i) for i in range(self.m)]
        frag_b = [logical(FRAG_B, channel=1, subtile=j) for j in range(self.n)]
        if self.interleaved:  # row i: its A fragment, (the B fragments once), its MMAs
            for i in range(self.m):
                ops.append(frag_a[i])
                for j in range(self.n):
                    ops += ([frag_b[j]] if i == 0 else []) + [logical(MMA, stage=i, subtile=j)]
        else:
            ops += frag_a + frag_b + [logical(MMA, stage=i, subtile=j)
                                      for i in range(self.m) for j in range(self.n)]
        return annotate(ops, self.target.cost_model)

    def schedule_config(self):
        return ScheduleConfig()

    def tag_names(self):
        return {**TAG_NAMES, WAIT_FRAG: "WAIT_FRAG", COMMIT_FRAG: "COMMIT_FRAG"}


class RingGridPlugin:
    @hookimpl
    def pipeline_core_register_targets(self):
        return [TargetRecord(name, "the toy copy ring with asynchronous fragment loads",
                             _target_factory(name), family=COPY_RING,
                             params=[Param("stages", int, 3, "ring stages")])
                for name in ASYNC_TARGETS]

    @hookimpl
    def pipeline_core_register_schedules(self):
        return [ScheduleRecord(
            "ring-grid", "an m x n MMA grid per K tile through the ring lowering",
            lambda ctx: RingGrid(ctx.make_target(), ctx.params["m"], ctx.params["n"],
                                 ctx.params["interleaved"]),
            params=[Param("m", int, 2, "MMA rows"), Param("n", int, 2, "MMA columns"),
                    Param("interleaved", bool, False, "fragments row by row")],
            default_target="toy-async", families=(COPY_RING,))]


@pytest.fixture(scope="module")
def host():
    return fresh_host(RingGridPlugin(), autoload=True)


def _compile(host, target, m, n, stages=3, interleaved=False, **kw):
    return compile_named("ring-grid", target=target, host=host,
                         params={"m": str(m), "n": str(n), "interleaved": str(interleaved).lower()},
                         target_args={"stages": str(stages)}, **kw)


def _ops(entries) -> list[Op]:
    return [e.op for e in entries]


GRIDS = [(1, 1), (2, 1), (1, 2), (2, 2)]


@pytest.mark.parametrize("target", ["toy-gpu", "h100", *ASYNC_TARGETS])
@pytest.mark.parametrize("m,n", GRIDS)
def test_every_grid_compiles_safe_on_every_copy_ring_target(host, target, m, n):
    compiled = _compile(host, target, m, n)  # the proof stage refuses an unsafe one
    assert compiled.proof is not None and compiled.proof.safe
    kernel = _ops(compiled.kernel)
    assert sum(o.role == OpRole.COMPUTE for o in kernel) == 3 * m * n  # 3 stages, one tile each
    assert sum(o.role == OpRole.FRAGMENT_LOAD for o in kernel) == 3 * (m + n)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("m,n", GRIDS)
@pytest.mark.parametrize("target", ["toy-async", "toy-async-ooo", "toy-async-group"])
def test_asynchronous_fragments_get_a_wait_before_every_compute_in_every_phase(
        host, target, m, n, stages, interleaved):
    compiled = _compile(host, target, m, n, stages, interleaved)
    assert compiled.proof.safe
    for phase in (compiled.kernel, compiled.epilogue):  # the epilogue once omitted its waits
        pending: set[tuple[int, int]] = set()  # fragment registers loaded and not yet waited on
        for o in _ops(phase):
            if o.role == OpRole.FRAGMENT_LOAD:
                pending.add((o.channel, o.subtile))
            elif o.tag == WAIT_FRAG:
                assert o.wait_value == 0  # every fragment wait has a compute reading the last load
                pending.clear()
            elif o.role == OpRole.COMPUTE:
                assert not pending & {(0, o.stage), (1, o.subtile)}, o


@pytest.mark.parametrize("interleaved", [False, True])
def test_with_an_interlock_the_mmas_retire_the_reads_and_no_fragment_wait_is_emitted(
        host, interleaved):
    # only a write after read could need the fragment channel, and every read's MMA (which
    # the interlock stalls until the read is done) comes before the barrier after which
    # another warp refills the stage: the placeholder waits all vanish, and the proof agrees
    compiled = _compile(host, "toy-async-interlock", 2, 2, interleaved=interleaved)
    assert compiled.proof.safe
    assert not any(e.op.tag == WAIT_FRAG for ph in (compiled.kernel, compiled.epilogue)
                   for e in ph)


def test_a_group_channel_commits_the_fragments_before_waiting_on_them(host):
    kernel = _ops(_compile(host, "toy-async-group", 2, 2).kernel)
    waits = [i for i, o in enumerate(kernel) if o.tag == WAIT_FRAG]
    assert waits and all(kernel[i - 1].tag == COMMIT_FRAG for i in waits)
    assert sum(o.tag == COMMIT_FRAG for o in kernel) == len(waits)


def test_the_refill_shares_the_fragment_wait_that_guards_the_computes(host):
    # one WAIT_FRAG per kernel step covers both the reads of the refilled stage (write after
    # read) and the operands of the step's MMAs; a second one would be dead weight
    kernel = _ops(_compile(host, "toy-async", 2, 2).kernel)
    waits = [i for i, o in enumerate(kernel) if o.tag == WAIT_FRAG]
    refills = [i for i, o in enumerate(kernel) if o.role == OpRole.GLOBAL_LOAD and o.tag == LOAD_A]
    assert len(waits) == 3 and [r - w for w, r in zip(waits, refills)] == [1, 1, 1]


@pytest.mark.parametrize("target,m,n,interleaved", [
    ("toy-async", 2, 2, False), ("toy-async", 2, 2, True), ("toy-async", 2, 1, False),
    ("toy-async-group", 1, 2, True), ("toy-async-interlock", 2, 2, False),
    ("toy-gpu", 2, 2, False)])
def test_each_derived_wait_is_the_loosest_the_proof_accepts_at_its_place(
        host, target, m, n, interleaved):
    compiled = _compile(host, target, m, n, 3, interleaved)
    sync = compiled.target_profile.sync
    waits = [(phase, i) for phase in ("prologue", "kernel", "epilogue")
             for i, e in enumerate(getattr(compiled, phase)) if e.op.tag in sync.wait_tags]
    assert waits
    for phase, i in waits:
        entries = list(getattr(compiled, phase))
        e = entries[i]
        entries[i] = attrs.evolve(e, op=e.op.evolve(wait_value=e.op.wait_value + 1))
        looser = compiled.with_entries(**{phase: tuple(entries)})
        assert not prove(looser, host).safe, (phase, i, e.op)


def test_dropping_the_epilogue_fragment_wait_is_the_reported_register_race(host):
    # the defect this lowering had: no fragment wait in the epilogue, REG_RAW at epilogue[4]
    compiled = _compile(host, "toy-async", 1, 1)
    epilogue = [e for e in compiled.epilogue if e.op.tag != WAIT_FRAG]
    epilogue = tuple(attrs.evolve(e, time_slot=i) for i, e in enumerate(epilogue))
    proof = prove(compiled.with_entries(epilogue=epilogue), host)
    assert not proof.safe
    first = proof.hazards()[0]
    assert (first["kind"], first["phase"], first["index"]) == ("REG_RAW", "epilogue", 4)


def test_the_derivation_reads_a_stage_as_one_region_for_the_ring(host):
    # a fragment of subtile 1 reads the stage LOAD_A (subtile 0) filled: with whole_stage the
    # derivation sees its write-after-read on the refill (the proof's ordinal tiles agree)
    compiled = _compile(host, "toy-async", 2, 1)
    bound = compiled.target_profile.sync.bind()
    args = (compiled.prologue, compiled.kernel, compiled.epilogue, bound, compiled.execution)
    whole = derive_waits(*args, body=compiled.body, whole_stage=True, config=compiled.config)
    split = derive_waits(*args, body=compiled.body, whole_stage=False, config=compiled.config)
    assert whole.unmet == () and split.unmet == ()
    assert sum(s.needs for s in whole.sites) > sum(s.needs for s in split.sites)
    assert [s for s in whole.sites if s.phase == Phase.KERNEL and s.channel == "frag"]
