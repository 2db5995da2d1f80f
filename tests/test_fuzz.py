"""Property-based robustness: compile returns a schedule the hazard checker proves safe, or
raises one of our documented errors with a message; never another exception, never a hang.

Two generators: random double- and single-buffer bodies (mutated grids, foreign ops, every
knob and strategy) on a target with the MI355X sync model, and the registered schedules by
name with random grids, parameters, knobs and strategies.  Every compile that returns is
checked again, independently of the proof stage, from its JSON document with the warps it
declares: an emitted schedule the checker rejects fails the test.

CI runs the ``ci`` profile (the default: a few dozen examples per test); ``tox -e fuzz`` runs
the ``fuzz`` profile (HYPOTHESIS_PROFILE=fuzz): 12 shards x 1,000 examples = 12,000 compiles,
with ``FUZZ_TABLE=FILE`` to append one line per outcome (``sort FILE | uniq -c`` is the table).
"""
from __future__ import annotations

import collections
import json
import os
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core.check.checker import check_document
from pipeline_core.compiler import compile_schedule
from pipeline_core.config import BlockSizing, PipelineConfig, ScheduleConfig, TargetProfile, WarpStagger
from pipeline_core.costs import CostModel, OpCost, annotate
from pipeline_core.document import to_document
from pipeline_core.errors import PipelineError
from pipeline_core.ops import KOffset, Op, OpRole, ResourceKind, barrier, logical, wait_lgkm, wait_vm
from pipeline_core.proof import UnprovableScheduleError, UnsafeScheduleError
from pipeline_core.testing import fresh_host

settings.register_profile("ci", max_examples=25, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=1000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SHARDS = 12 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 1
OUTCOMES: collections.Counter = collections.Counter()

COSTS = CostModel({
    0: OpCost(ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, name="LOAD_A"),
    1: OpCost(ResourceKind.GLOBAL_MEM, 200, OpRole.GLOBAL_LOAD, name="LOAD_B"),
    3: OpCost(ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="FRAG_A"),
    4: OpCost(ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, vgpr_def=8, name="FRAG_B"),
    5: OpCost(ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, vgpr_def=4, name="MMA"),
    6: OpCost(ResourceKind.LDS, 20, OpRole.SHARED_STORE, name="STORE"),
    7: OpCost(ResourceKind.VALU, 8, OpRole.VALU_COMPUTE, name="VALU"),
})
HOST = fresh_host()
TIME_LIMIT_S = 20


def _mi355x_sync():
    from pipeline_core_amd_mi355x.sync import MI355X_SYNC
    return MI355X_SYNC


class Generated:
    name = "generated"

    def __init__(self, config, body, sched):
        self._config, self._body, self._sched = config, body, sched
        # the MI355X sync model, so that what compiles can be proven (the counters of its
        # vm/lgkm waits are the ones this body's loads tick)
        self.target = TargetProfile(COSTS, config, sync=_mi355x_sync(), warps_per_group=2)

    def config(self):
        return self._config

    def build_body(self):
        return self._body

    def schedule_config(self):
        return self._sched


def _grid_partition(p: int, m: int, n: int) -> list[Op]:
    """A ping-pong-like partition: loads for the next K step, frags, the MMA grid."""
    k = KOffset.K0 if p == 0 else KOffset.K1
    ops = [logical(0, channel=0, stage=1 - p % 2, subtile=1, k_offset=KOffset.K_PREV if p == 0 else KOffset.K0)]
    ops += [logical(0, channel=0, stage=p % 2, subtile=i, k_offset=k) for i in range(m)][: max(m - 1, 1)]
    ops += [logical(1, channel=1, stage=p % 2, subtile=j, k_offset=k) for j in range(n)]
    ops += [logical(3, channel=0, stage=p % 2, subtile=i) for i in range(m)]
    ops += [logical(4, channel=1, stage=p % 2, subtile=j) for j in range(n)]
    ops += [logical(5, stage=i, subtile=j) for i in range(m) for j in range(n)]
    return ops


@st.composite
def cases(draw):
    depth = draw(st.sampled_from([1, 2, 2, 2]))
    partitions = draw(st.integers(1, 3)) if depth >= 2 else 1
    m, n = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    body = [o for p in range(partitions) for o in _grid_partition(p, m, n)]
    # mutations: drop, duplicate, perturb fields, insert foreign ops
    for _ in range(draw(st.integers(0, 4))):
        if not body:
            break
        i = draw(st.integers(0, len(body) - 1))
        action = draw(st.sampled_from(["drop", "dup", "stage", "subtile", "channel", "k", "foreign", "swap"]))
        o = body[i]
        if action == "drop":
            body.pop(i)
        elif action == "dup":
            body.insert(i, o)
        elif action == "stage":
            body[i] = o.evolve(stage=draw(st.integers(0, 2)))
        elif action == "subtile":
            body[i] = o.evolve(subtile=draw(st.integers(0, 3)))
        elif action == "channel":
            body[i] = o.evolve(channel=draw(st.integers(-1, 2)))
        elif action == "k":
            body[i] = o.evolve(k_offset=draw(st.sampled_from(list(KOffset))))
        elif action == "swap" and i + 1 < len(body):
            body[i], body[i + 1] = body[i + 1], body[i]
        elif action == "foreign":
            body.insert(i, draw(st.sampled_from([barrier(), wait_vm(0), wait_lgkm(2), logical(6, channel=0),
                                                 logical(7), logical(9)])))
    config = PipelineConfig(
        depth=depth, num_partitions=partitions, m_mmas=m, n_mmas=n,
        block_sizing=BlockSizing(draw(st.integers(0, 5)), draw(st.integers(0, 5)), draw(st.integers(0, 2))),
        vm_per_load_a=draw(st.integers(0, 4)), vm_per_load_b=draw(st.integers(0, 4)),
        lgkm_per_load_a=draw(st.integers(0, 8)), lgkm_per_load_b=draw(st.integers(0, 8)),
        warp_stagger=draw(st.sampled_from([WarpStagger.auto(), WarpStagger.none(), WarpStagger.fixed(3)])),
        cross_stage_rotation=draw(st.booleans()))
    small = len(body) <= 14
    sched = ScheduleConfig(
        scheduling=draw(st.sampled_from(["IDENTITY", "GREEDY"] + (["CSP"] if small else []))),
        sched_barrier_mask=draw(st.integers(0, 255)), auto_waits=draw(st.booleans()),
        drain_lgkm_mask=draw(st.integers(0, 255)), auto_drain=draw(st.booleans()),
        lds_contention_penalty=draw(st.sampled_from([0, 0, 15])),
        wait_lgkm_first=draw(st.sampled_from([0, 4, 8, 255])), wait_vm_last=draw(st.integers(0, 12)),
        minimal_barriers=draw(st.booleans()), omit_mma_set_prio=draw(st.booleans()),
        global_before_frag=draw(st.booleans()), barrier_before_pre_ops=draw(st.booleans()),
        inter_block_lgkm_drain=draw(st.booleans()), partial_prologue_drain=draw(st.booleans()),
        wrap_waits_with_sched_barrier=draw(st.booleans()))
    return Generated(config, annotate(body, COSTS), sched)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _record(key: str) -> None:
    """Count an outcome; with FUZZ_TABLE, also append it at once (a killed run keeps its counts)."""
    OUTCOMES[key] += 1
    path = os.environ.get("FUZZ_TABLE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(key + "\n")


def _compile_and_judge(compile_fn, label: str) -> None:
    """Run one compile under the hang alarm; record its outcome; fail on anything undocumented."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        compiled = compile_fn()
    except UnprovableScheduleError:
        _record(f"{label}: refused, unprovable")
        return
    except UnsafeScheduleError as exc:
        assert "fix: " in str(exc) or exc.verdict is None, str(exc)
        _record(f"{label}: refused, unsafe")
        return
    except PipelineError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        _record(f"{label}: refused, {type(exc).__name__}")
        return
    except _Timeout:
        _record(f"{label}: hang")
        pytest.fail(f"compile did not finish within {TIME_LIMIT_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    # independent of the proof stage: the emitted document, checked with its declared warps
    from pipeline_core.check.counters import counter_model
    from pipeline_core.sync.resolve import sync_for_compiled

    doc = json.loads(json.dumps(to_document(compiled)))
    verdict = check_document(doc, iterations=3, model=counter_model(sync_for_compiled(compiled), doc),
                             warps_per_group=doc["execution"]["warps_per_group"])
    assert verdict.safe, verdict.render_text()
    _record(f"{label}: compiled, proven SAFE")
    return compiled


@pytest.mark.parametrize("shard", range(SHARDS))
@given(cases())
def test_compile_returns_a_proven_schedule_or_a_documented_error(shard, schedule):
    compiled = _compile_and_judge(lambda: compile_schedule(schedule, host=HOST), "generated body")
    if compiled is None:
        return
    body = schedule.build_body()
    data = [e.op for e in compiled.kernel if e.op.tag < 128]
    if compiled.config.depth >= 2:
        # nothing silently dropped: every data op of the body is in the kernel exactly once
        assert collections.Counter(data) == collections.Counter(body)
    else:
        # single-buffer: the kernel is the body 1:1 (plus any appended hint entries)
        assert [e.op for e in compiled.kernel[: len(body)]] == list(body)
    for phase in (compiled.prologue, compiled.kernel, compiled.epilogue):
        assert [e.time_slot for e in phase] == list(range(len(phase)))


BOOL_KNOBS = ("minimal_barriers", "omit_mma_set_prio", "global_before_frag",
              "barrier_before_pre_ops", "partial_prologue_drain", "inter_block_lgkm_drain",
              "auto_drain", "lgkm_after_last", "wrap_waits_with_sched_barrier", "auto_waits")


@st.composite
def named_cases(draw):
    name = draw(st.sampled_from(["pingpong", "4wave", "matmul-grid", "default-matmul", "hello"]))
    params: dict[str, str] = {}
    if name == "matmul-grid":
        params = {"m": str(draw(st.integers(1, 7))), "n": str(draw(st.integers(1, 7)))}
    elif name == "pingpong":
        params = {"fp8": draw(st.sampled_from(["true", "false"]))}
    elif name == "4wave":
        params = {"BM": draw(st.sampled_from(["64", "128"])),
                  "epilogue_guard": draw(st.sampled_from(["auto", "on", "off"]))}
    elif name == "default-matmul":
        params = {"num_k_tiles": str(draw(st.integers(1, 4)))}
    overrides: dict[str, str] = {}
    for knob in draw(st.lists(st.sampled_from(BOOL_KNOBS), max_size=3, unique=True)):
        overrides[knob] = draw(st.sampled_from(["true", "false"]))
    if draw(st.booleans()):
        overrides["scheduling"] = draw(st.sampled_from(["IDENTITY", "GREEDY", "CSP", "EXACT"]))
        overrides["search_time_limit_ms"] = "2000"
    if draw(st.booleans()):
        overrides["wait_vm_last"] = str(draw(st.integers(0, 80)))
        overrides["wait_lgkm_first"] = str(draw(st.integers(0, 20)))
    if draw(st.booleans()):
        overrides["lds_contention_penalty"] = str(draw(st.sampled_from([0, 1, 8, 15])))
    target_args = {}
    if name in ("pingpong", "matmul-grid") and draw(st.booleans()):
        target_args["max_globals"] = draw(st.sampled_from(["0", "1"]))
    return name, params, overrides, target_args, draw(st.booleans())


@pytest.mark.parametrize("shard", range(SHARDS))
@given(named_cases())
def test_named_compiles_are_proven_or_refused(shard, case):
    from pipeline_core.api import compile_named

    name, params, overrides, target_args, allow_unsafe = case
    if allow_unsafe:  # the reference's output: emitted, its hazards listed, never an error
        try:
            compiled = compile_named(name, params=params, config_overrides=overrides,
                                     target_args=target_args, allow_unsafe=True)
        except PipelineError as exc:
            assert str(exc).strip()
            assert not isinstance(exc, UnsafeScheduleError)
            _record(f"{name} --allow-unsafe: refused, {type(exc).__name__}")
            return
        key = "with hazards listed" if compiled.hazards else "proven SAFE"
        _record(f"{name} --allow-unsafe: compiled, {key}")
        return
    _compile_and_judge(lambda: compile_named(name, params=params, config_overrides=overrides,
                                             target_args=target_args, host=None), name)
