"""Property-based robustness: compile returns a schedule the hazard checker proves safe, or
raises one of our documented errors with a message; never another exception, never a hang.

Two generators: random double- and single-buffer bodies (mutated grids, foreign ops, every
knob and strategy) on a target with the MI355X sync model, through the API; and every
registered schedule on every registered target (the H100 ones included) through the command
line, with its declared -p/-T parameters, ScheduleConfig's -c knobs and --allow-unsafe.
Every compile that returns is checked again, independently of the proof stage, from its
JSON document: an emitted schedule the checker rejects fails the test.

CI runs the ``ci`` profile (the default: the same 25 examples per test on every run, a few
seconds); ``tox -e fuzz`` runs the ``fuzz`` profile (HYPOTHESIS_PROFILE=fuzz): 12 shards x
1,000 fresh examples of each generator (``FUZZ_EXAMPLES=N`` sets the examples per shard), the
shards spread over the cores (pytest-xdist).  ``FUZZ_TABLE=FILE`` appends one line per case, written at once so that a
killed run keeps its counts: ``schedule<TAB>target<TAB>compile exit N<TAB>check VERDICT`` for
the command-line cases, ``DEFECT<TAB>command line: what went wrong`` for each problem found;
``sort FILE | uniq -c`` is the table of outcomes.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import zlib

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core.check.checker import check_document
from pipeline_core.cli import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_UNSAFE
from pipeline_core.compiler import compile_schedule
from pipeline_core.config import BlockSizing, ScheduleConfig, WarpStagger, field_bound
from pipeline_core.costs import annotate
from pipeline_core.document import to_document
from pipeline_core.errors import PipelineError
from pipeline_core.ops import KOffset, barrier, logical, wait_lgkm, wait_vm
from pipeline_core.proof import UnprovableScheduleError, UnsafeScheduleError
from pipeline_core.testing import CliResult, fresh_host, run_cli

# ci: the same examples on every run (a suite that passes or fails by the draw is no gate)
settings.register_profile("ci", max_examples=25, deadline=None, database=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=int(os.environ.get("FUZZ_EXAMPLES", "1000")),
                          deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
SHARDS = 12 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 1
OUTCOMES: collections.Counter = collections.Counter()

HOST = fresh_host()
TIME_LIMIT_S = 20


class Generated:
    """A registered schedule's body and configurations, mutated: compiled as a schedule of its
    own on the registered schedule's target (the MI355X sync model and costs, so that what
    compiles can be proven)."""

    name = "generated"

    def __init__(self, base, config, body, sched):
        self._config, self._body, self._sched = config, body, sched
        self.target = base.target
        self.warps_per_group = getattr(base, "warps_per_group", None)

    def config(self):
        return self._config

    def build_body(self):
        return self._body

    def schedule_config(self):
        return self._sched


@functools.cache
def _base(double: bool, a: int, b: int):
    """The body to mutate: matmul-grid's ``a x b`` MMA grid per warp group (double buffer; the
    pingpong body at 2 x 2) or default-matmul's ``a`` K tiles per iteration (single buffer).
    Both compile as they are: a mutation, not the generator, is what a refusal is about."""
    from pipeline_core.api import build_named

    if double:
        return build_named("matmul-grid", params={"m": str(a), "n": str(b)})[0]
    return build_named("default-matmul", params={"num_k_tiles": str(a)})[0]


def _sometimes(draw, value, strategy):
    """``value`` two times in three, else a value drawn from ``strategy``."""
    return draw(strategy) if draw(st.integers(0, 2)) == 2 else value


@st.composite
def cases(draw):
    double = draw(st.sampled_from([True, True, True, False]))
    base = _base(True, draw(st.integers(2, 4)), draw(st.integers(2, 4))) if double \
        else _base(False, draw(st.integers(1, 4)), 0)
    body = list(base.build_body())
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
    c = base.config()
    config = attrs.evolve(
        c, block_sizing=_sometimes(draw, c.block_sizing, st.builds(
            BlockSizing, st.integers(0, 5), st.integers(0, 5), st.integers(0, 2))),
        vm_per_load_a=_sometimes(draw, c.vm_per_load_a, st.integers(0, 4)),
        vm_per_load_b=_sometimes(draw, c.vm_per_load_b, st.integers(0, 4)),
        lgkm_per_load_a=_sometimes(draw, c.lgkm_per_load_a, st.integers(0, 8)),
        lgkm_per_load_b=_sometimes(draw, c.lgkm_per_load_b, st.integers(0, 8)),
        warp_stagger=_sometimes(draw, c.warp_stagger, st.sampled_from(
            [WarpStagger.auto(), WarpStagger.none(), WarpStagger.fixed(3)])),
        cross_stage_rotation=_sometimes(draw, c.cross_stage_rotation, st.booleans()))
    small = len(body) <= 14
    sc = base.schedule_config()
    sched = attrs.evolve(
        sc, scheduling=_sometimes(draw, sc.scheduling, st.sampled_from(["IDENTITY", "GREEDY"] + (["CSP"] if small else []))),
        search_node_limit=2000,  # a search cut at the same point on every machine
        sched_barrier_mask=_sometimes(draw, sc.sched_barrier_mask, st.integers(0, 255)),
        auto_waits=_sometimes(draw, sc.auto_waits, st.booleans()),
        drain_lgkm_mask=_sometimes(draw, sc.drain_lgkm_mask, st.integers(0, 255)),
        auto_drain=_sometimes(draw, sc.auto_drain, st.booleans()),
        lds_contention_penalty=_sometimes(draw, sc.lds_contention_penalty, st.sampled_from([0, 0, 15])),
        wait_lgkm_first=_sometimes(draw, sc.wait_lgkm_first, st.sampled_from([0, 4, 8, 255])),
        wait_vm_last=_sometimes(draw, sc.wait_vm_last, st.integers(0, 12)),
        minimal_barriers=_sometimes(draw, sc.minimal_barriers, st.booleans()),
        omit_mma_set_prio=_sometimes(draw, sc.omit_mma_set_prio, st.booleans()),
        global_before_frag=_sometimes(draw, sc.global_before_frag, st.booleans()),
        barrier_before_pre_ops=_sometimes(draw, sc.barrier_before_pre_ops, st.booleans()),
        inter_block_lgkm_drain=_sometimes(draw, sc.inter_block_lgkm_drain, st.booleans()),
        partial_prologue_drain=_sometimes(draw, sc.partial_prologue_drain, st.booleans()),
        wrap_waits_with_sched_barrier=_sometimes(draw, sc.wrap_waits_with_sched_barrier, st.booleans()))
    return Generated(base, config, annotate(body, base.target.cost_model), sched)


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
        # single-buffer: the body in its order, nothing dropped; derived waits, barriers and
        # hint entries may come between (a staggered kernel gets its wait + barrier pairs)
        kernel = iter(e.op for e in compiled.kernel)
        assert all(any(k == o for k in kernel) for o in body), "a body op is missing or moved"
    for phase in (compiled.prologue, compiled.kernel, compiled.epilogue):
        assert [e.time_slot for e in phase] == list(range(len(phase)))


# --- every registered schedule on every registered target, through the command line ----------
#
# The cases come from what the installed plugins register: each schedule and target by name,
# their declared -p/-T parameters (inside their bounds and choices, at the edges, and a step
# outside), ScheduleConfig's -c knobs with their own bounds, and --allow-unsafe.  The target
# is the schedule's default half the time, one it builds on with its defaults a quarter
# (pingpong on h100-pingpong), any registered target otherwise, so the pairs that do not
# belong together are drawn too (the table shows what each pair does).  A new schedule,
# target, parameter or knob is fuzzed without an edit here.
#
# Per case: `compile ... --format json`; now and then again in this process and in a fresh
# interpreter with another hash seed (the same exit and bytes, README: deterministic); a
# document it emits is checked again: `check --input` (an agents document is proven by
# compile, not from its JSON: docs/document-format.md, so `check SCHEDULE` with the same
# arguments), which must say SAFE, or UNSAFE exactly when the document lists hazards
# (--allow-unsafe); a refused unsafe compile (exit 1) must be UNSAFE under `check SCHEDULE`
# too.  Never exit 70 (internal error), never exit 3 (a bundled plugin failing), never a
# traceback, never a hang; a refusal ends with one `error:` line.
#
# Under the ``ci`` profile the first problem fails the test (Hypothesis shrinks it to a
# short command line); under ``fuzz`` a shard runs all its examples and then fails with
# every problem it found, each with the command line that reproduces it.

CHECK_AGREES = {EXIT_OK: "SAFE", EXIT_UNSAFE: "UNSAFE"}
SURVEY = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
#: A drawn search strategy always gets a node budget: a search cut by its seconds budget
#: differs from machine to machine (README: tests never read the clock).
SEARCH_NODES = st.integers(1, 4000)
# Each rare choice is the last value of its draw: Hypothesis favours the first (zero), and
# replays and mutates earlier cases, so the common choice comes first.
#: Determinism: one case in REPEAT_EVERY compiles again in this process, one in RESEED_EVERY
#: in a fresh interpreter with another hash seed (each costs a compile; the fresh one ten).
REPEAT_EVERY, RESEED_EVERY = 4, 64
#: what the CLI says on stderr when the search budget in seconds cut an order (the one output
#: that may differ from run to run, and it says so with the fix, -c search_node_limit:
#: pipeline_core/scheduling/registry.py, SchedulingRequest.warn_cut)
TIME_CUT = "reached (-c search_time_limit_ms)"
#: the repeatable node budget such a case is judged under instead
TIME_CUT_NODES = 4000


@functools.cache
def _registry():
    from pipeline_core.plugins import default_host

    return default_host()


def _int_text(draw, default, bound, *, declared: bool, outside: bool) -> str:
    """An int parameter or knob as typed: inside its bound (near its default, at the edges,
    small), or with ``outside`` at times one step beyond it."""
    lo, hi = int(bound.low), int(bound.high)
    base = default if isinstance(default, int) and not isinstance(default, bool) else lo
    if outside and draw(st.integers(0, 3)) == 3:
        return str(draw(st.sampled_from([lo - 1, hi + 1])))
    near = {lo, base, min(hi, base * 2), max(lo, base // 2), min(hi, base + 1), max(lo, base - 1)}
    if declared:  # an undeclared bound (limits.PARAM_INT) is the core's guard, not a real size
        near.add(hi)
    if draw(st.integers(0, 3)) == 3:
        return str(draw(st.integers(lo, max(lo, min(hi, max(base, 8) * 2)))))
    return str(draw(st.sampled_from(sorted(near))))


def _param_text(draw, param, *, outside: bool) -> str:
    """A ``-p``/``-T`` value for ``param`` (pipeline_core.schedule.Param), as the user types it."""
    wrong = outside and draw(st.integers(0, 3)) == 3
    if param.type is bool:
        return "maybe" if wrong else draw(st.sampled_from(["true", "false"]))
    if param.type is int:
        return _int_text(draw, param.default, param.int_bound, declared=param.bound is not None,
                         outside=outside)
    if param.choices:
        return "bogus" if wrong else draw(st.sampled_from([str(c) for c in param.choices]))
    return str(param.default) if param.default is not None and not wrong else "bogus"


def _params(draw, params, *, outside: bool) -> tuple[tuple[str, str], ...]:
    """Half the time none (the declared defaults), else up to three of ``params``."""
    if not params or not draw(st.booleans()):
        return ()
    chosen = draw(st.lists(st.sampled_from(params), min_size=1, max_size=3, unique_by=lambda p: p.name))
    return tuple((p.name, _param_text(draw, p, outside=outside)) for p in chosen)


@functools.cache
def _knob_rules() -> dict:
    """``{schedule: {knob: forced value or REFUSED}}`` (pipeline_core.knobs.schedule_rules)."""
    from pipeline_core.knobs import schedule_rules

    return schedule_rules(_registry())[0]


def _knobs(draw, schedule: str, *, outside: bool) -> tuple[tuple[str, str], ...]:
    """``-c`` knobs: every ScheduleConfig field but the clock-bound search budget; a knob the
    schedule forces mostly gets its forced value and one it refuses is mostly left out
    (always drawn freely with ``outside``)."""
    from pipeline_core.knobs import value_text
    from pipeline_core.schedule import REFUSED

    fields = [f for f in attrs.fields(ScheduleConfig)
              if f.name not in ("search_time_limit_ms", "search_node_limit")]
    chosen = draw(st.lists(st.sampled_from(fields), max_size=4, unique_by=lambda f: f.name))
    rules = _knob_rules().get(schedule, {})
    knobs = []
    for f in chosen:
        if f.name in rules and not outside and draw(st.integers(0, 7)) < 7:
            if rules[f.name] is not REFUSED:
                knobs.append((f.name, value_text(rules[f.name])))
            continue
        if f.name == "scheduling":
            knobs.append((f.name, draw(st.sampled_from(sorted(_registry().strategies)))))
            knobs.append(("search_node_limit", str(draw(SEARCH_NODES))))
        elif isinstance(f.default, bool):
            knobs.append((f.name, draw(st.sampled_from(["true", "false"]))))
        else:
            bound = field_bound(ScheduleConfig, f.name)
            assert bound is not None, f"knob {f.name} has no bound to draw from"
            knobs.append((f.name, _int_text(draw, f.default, bound, declared=True, outside=outside)))
    return tuple(knobs)


@attrs.frozen(kw_only=True)
class CliCase:
    """One command line's worth of choices; renders the compile and check command lines."""

    schedule: str
    target: str
    params: tuple[tuple[str, str], ...]
    target_args: tuple[tuple[str, str], ...]
    knobs: tuple[tuple[str, str], ...]
    allow_unsafe: bool

    def selection(self) -> list[str]:
        argv = [self.schedule, "--target", self.target]
        for flag, pairs in (("-p", self.params), ("-T", self.target_args), ("-c", self.knobs)):
            argv += [a for k, v in pairs for a in (flag, f"{k}={v}")]
        return argv

    def compile_argv(self) -> list[str]:
        return ["compile", *self.selection(), *(["--allow-unsafe"] if self.allow_unsafe else []),
                "--format", "json"]


@functools.cache
def _buildable(schedule: str) -> tuple[str, ...]:
    """The targets ``schedule`` builds on with its defaults: those it is made for (a target it
    refuses to build on is drawn as often as any other, not more)."""
    from pipeline_core.api import build_named

    host, fits = _registry(), []
    for target in sorted(_registry().targets):
        try:
            build_named(schedule, target=target, host=host)
        except PipelineError:
            continue
        fits.append(target)
    return tuple(fits)


@functools.cache
def _pairs() -> tuple[tuple[str, str], ...]:
    """Every (schedule, target) pair the fuzzer draws, each schedule's default target twice and
    the targets it builds on once more than the rest. One list sampled once: every pair is a
    single draw away whatever the other draws look like (a schedule then a target drawn apart,
    derandomized, missed ("pingpong", "h100-pingpong") in 1000 draws twice, once a schedule's
    parameters changed the shape of the other draws)."""
    host, pairs = _registry(), []
    for name in sorted(host.schedules):
        default = host.schedules[name].default_target
        pairs += [(name, default)] * 2 if default else []
        pairs += [(name, target) for target in _buildable(name)]
        pairs += [(name, target) for target in sorted(host.targets)]
    return tuple(pairs)


@st.composite
def cli_cases(draw) -> CliCase:
    host = _registry()
    name, target = draw(st.sampled_from(_pairs()))
    record = host.schedules[name]
    outside = draw(st.integers(0, 2)) == 2  # some cases type values out of range
    return CliCase(schedule=name, target=target, params=_params(draw, record.params, outside=outside),
                   target_args=_params(draw, host.targets[target].params, outside=outside),
                   knobs=_knobs(draw, name, outside=outside),
                   allow_unsafe=draw(st.integers(0, 3)) == 3)


def _sampled(command: str, every: int) -> bool:
    """One command line in ``every``, the same ones on every run (Hypothesis replays and
    mutates cases, so a drawn coin would land far more often)."""
    return zlib.crc32(command.encode()) % every == 0


def _command(argv) -> str:
    return shlex.join(["pipeline-core", *argv])


def _run(argv) -> CliResult:
    """``pipeline-core argv`` in this process under the hang alarm (exit -1: it hung)."""
    fired = []

    def alarm(signum, frame):
        fired.append(signum)
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        result = run_cli(argv)
    except _Timeout:  # raised outside main's own handler
        fired.append(signal.SIGALRM)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if fired:  # main reports the alarm as an internal error: it is a hang
        return CliResult(exit_code=-1, stdout="", stderr=f"no answer within {TIME_LIMIT_S} s")
    return result


def _misbehaviour(result: CliResult, argv) -> list[str]:
    """What is wrong with how one command ended, whatever its verdict (README: exit codes).
    A refusal (exit 2, or 1 from compile) ends with one ``error:`` line; check's exit 1 is
    its UNSAFE verdict, printed on stdout."""
    first = (result.stderr.strip().splitlines() or [""])[0]
    cmd = _command(argv)
    if result.exit_code == -1:
        return [f"{cmd}: hang ({result.stderr})"]
    if result.exit_code == EXIT_INTERNAL:
        return [f"{cmd}: exit 70, {first}"]
    if result.exit_code not in (EXIT_OK, EXIT_UNSAFE, EXIT_INPUT):
        return [f"{cmd}: exit {result.exit_code} (a bundled plugin failed), {first}"]
    if "Traceback (most recent call last)" in result.stderr:
        return [f"{cmd}: exit {result.exit_code} with a traceback"]
    last = (result.stderr.strip().splitlines() or [""])[-1]
    refused = result.exit_code == EXIT_INPUT or (result.exit_code == EXIT_UNSAFE and argv[0] == "compile")
    if refused and not last.startswith("error: "):
        return [f"{cmd}: exit {result.exit_code} without an `error:` line: {last!r}"]
    return []


def _mismatch(case: CliCase, result: CliResult, cmd: str) -> list[str]:
    """A schedule on a target it is not made for (``ScheduleRecord.fits``) is refused with exit
    2 naming both, whatever else the command line says (docs/guide/schedule-plugin.md)."""
    host = _registry()
    if host.schedules[case.schedule].fits(host.targets[case.target]):
        return []
    first = (result.stderr.strip().splitlines() or [""])[0]
    if result.exit_code != EXIT_INPUT or case.target not in first:
        return [f"{cmd}: schedule {case.schedule} is not made for target {case.target}, but it "
                f"exits {result.exit_code}: {first!r}"]
    return []


def _in_fresh_interpreter(argv, seed: str) -> CliResult:
    """``pipeline-core argv`` in a new interpreter with ``PYTHONHASHSEED=seed``."""
    done = subprocess.run([sys.executable, "-m", "pipeline_core.cli", *argv], capture_output=True,
                          text=True, env={**os.environ, "PYTHONHASHSEED": seed},
                          timeout=TIME_LIMIT_S * 3, check=False)
    return CliResult(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)


def judge_cli_case(case: CliCase, scratch: str) -> tuple[str, list[str]]:
    """Run one case; its table row (schedule, target, compile exit, check verdict) and problems."""
    argv = case.compile_argv()
    cmd = _command(argv)
    compiled = _run(argv)
    if TIME_CUT in compiled.stderr:
        # the order depends on the machine's speed, as stderr says: judge the case on the
        # repeatable cut the message names (a default strategy that searches, such as CSP on
        # pingpong fp8, hits the seconds budget on a busy machine)
        argv = [*argv, "-c", f"search_node_limit={TIME_CUT_NODES}"]
        cmd = _command(argv)
        compiled = _run(argv)
    problems = _misbehaviour(compiled, argv) or _mismatch(case, compiled, cmd)
    if _sampled(cmd, REPEAT_EVERY) and not problems:
        again = _run(argv)
        if again != compiled:
            problems.append(f"{cmd}: a second run in the same process differs (exit "
                            f"{compiled.exit_code} -> {again.exit_code})")
    if _sampled(cmd, RESEED_EVERY) and not problems:
        seed = "1" if os.environ.get("PYTHONHASHSEED") == "0" else "0"
        fresh = _in_fresh_interpreter(argv, seed)
        if (fresh.exit_code, fresh.stdout) != (compiled.exit_code, compiled.stdout):
            problems.append(f"{cmd}: PYTHONHASHSEED={seed} in a fresh interpreter differs (exit "
                            f"{compiled.exit_code} -> {fresh.exit_code})")
    verdict = "not checked"
    expect = None
    check_argv = ["check", *case.selection()]
    if compiled.exit_code == EXIT_OK and not problems:
        try:
            doc = json.loads(compiled.stdout)
        except ValueError as exc:
            return f"{_pair(case)}\tcompile exit 0\tnot JSON", [f"{cmd}: not JSON: {exc}"]
        expect = EXIT_UNSAFE if doc.get("hazards") else EXIT_OK
        if doc.get("lowering") != "agents":
            with open(scratch, "w", encoding="utf-8") as fh:
                fh.write(compiled.stdout)
            check_argv = ["check", "--input", scratch]
    elif compiled.exit_code == EXIT_UNSAFE and not case.allow_unsafe:
        expect = EXIT_UNSAFE
    if expect is not None:
        checked = _run(check_argv)
        shown = _command(check_argv).replace(scratch, "DOC.json")
        verdict = CHECK_AGREES.get(checked.exit_code, f"exit {checked.exit_code}")
        trouble = _misbehaviour(checked, check_argv)
        problems += [p.replace(scratch, "DOC.json") + f" (after {cmd})" for p in trouble]
        if not trouble and checked.exit_code != expect:
            first = (checked.stderr.strip().splitlines() or [""])[0]
            problems.append(f"{cmd}: exit {compiled.exit_code}, but {shown} exits "
                            f"{checked.exit_code} (expected {expect}) {first}".rstrip())
    return f"{_pair(case)}\tcompile exit {compiled.exit_code}\tcheck {verdict}", problems


def _pair(case: CliCase) -> str:
    """The table's first columns: schedule, target (and --allow-unsafe)."""
    return f"{case.schedule}\t{case.target}" + (" --allow-unsafe" if case.allow_unsafe else "")


@pytest.mark.parametrize("shard", range(SHARDS))
def test_registered_schedules_on_every_target_through_the_cli(shard, tmp_path):
    found: collections.Counter = collections.Counter()
    scratch = str(tmp_path / "doc.json")

    @given(cli_cases())
    def one(case):
        row, problems = judge_cli_case(case, scratch)
        _record(row)
        for problem in problems:
            _record(f"DEFECT\t{problem}")
        if problems and not SURVEY:
            raise AssertionError("\n".join(problems))
        found.update(problems)

    one()
    assert not found, f"{len(found)} distinct problems:\n" + "\n".join(
        f"{n} x {p}" for p, n in found.most_common())


# --- the fuzzer's own rules, each made to fire on a command that breaks it -----------------

FUZZ = sys.modules[__name__]
CASE = CliCase(schedule="pingpong", target="mi355x", params=(("fp8", "true"),), target_args=(),
               knobs=(("minimal_barriers", "false"),), allow_unsafe=False)


@pytest.mark.parametrize("argv,result,flagged", [
    (["compile", "x"], CliResult(exit_code=70, stdout="", stderr="internal error: KeyError: None\nThis is a bug"),
     "exit 70, internal error: KeyError: None"),
    (["compile", "x"], CliResult(exit_code=3, stdout="", stderr="error: plugin 'p' failed"), "a bundled plugin failed"),
    (["compile", "x"], CliResult(exit_code=-1, stdout="", stderr="no answer"), "hang"),
    (["compile", "x"], CliResult(exit_code=2, stdout="", stderr="Traceback (most recent call last):\nerror: x"),
     "with a traceback"),
    (["compile", "x"], CliResult(exit_code=2, stdout="", stderr="usage: pipeline-core ..."), "without an `error:` line"),
    (["compile", "x"], CliResult(exit_code=1, stdout="", stderr=""), "without an `error:` line"),
    (["check", "x"], CliResult(exit_code=1, stdout="x: UNSAFE", stderr=""), None),  # a verdict, not a refusal
    (["compile", "x"], CliResult(exit_code=2, stdout="", stderr="warning: w\nerror: -p BM=7 ..."), None),
])
def test_the_fuzzer_flags_each_way_a_command_may_end_badly(argv, result, flagged):
    problems = FUZZ._misbehaviour(result, argv)
    if flagged is None:
        assert problems == []
    else:
        assert len(problems) == 1 and flagged in problems[0], problems


def _fake_cli(monkeypatch, answers):
    """Make the fuzzer's commands answer from ``answers`` ({first two argv words: results})."""
    calls = []

    def run(argv):
        calls.append(list(argv))
        key = argv[1] if argv[0] == "check" and argv[1] == "--input" else argv[0]
        return answers[key].pop(0)

    monkeypatch.setattr(FUZZ, "_run", run)
    return calls


@pytest.mark.parametrize("document,check_exit,expected", [
    ({"kernel": []}, 1, "exits 1 (expected 0)"),                   # compile proved it, check does not
    ({"kernel": [], "hazards": [{"kind": "LDS_RAW"}]}, 0, "exits 0 (expected 1)"),  # listed, not found
    ({"kernel": []}, 0, None),
    ({"kernel": [], "lowering": "agents"}, 1, "exits 1 (expected 0)"),  # re-proven by name
])
def test_the_fuzzer_flags_a_compile_check_disagreement(monkeypatch, tmp_path, document, check_exit, expected):
    monkeypatch.setattr(FUZZ, "_sampled", lambda command, every: False)
    checked = CliResult(exit_code=check_exit, stdout="verdict", stderr="")
    calls = _fake_cli(monkeypatch, {"compile": [CliResult(exit_code=0, stdout=json.dumps(document), stderr="")],
                                    "--input": [checked], "check": [checked]})
    row, problems = judge_cli_case(CASE, str(tmp_path / "doc.json"))
    assert row == f"pingpong\tmi355x\tcompile exit 0\tcheck {'SAFE' if check_exit == 0 else 'UNSAFE'}"
    agents = document.get("lowering") == "agents"
    assert calls[-1] == (["check", *CASE.selection()] if agents else ["check", "--input", str(tmp_path / "doc.json")])
    assert [expected in p for p in problems] == ([True] if expected else [])


def test_the_fuzzer_rechecks_a_refused_compile_by_name(monkeypatch, tmp_path):
    monkeypatch.setattr(FUZZ, "_sampled", lambda command, every: False)
    refused = CliResult(exit_code=1, stdout="", stderr="error: compile refused schedule pingpong: UNSAFE")
    calls = _fake_cli(monkeypatch, {"compile": [refused],
                                    "check": [CliResult(exit_code=0, stdout="SAFE", stderr="")]})
    row, problems = judge_cli_case(CASE, str(tmp_path / "doc.json"))
    assert calls[-1] == ["check", *CASE.selection()]
    assert row.endswith("compile exit 1\tcheck SAFE")
    assert len(problems) == 1 and "exits 0 (expected 1)" in problems[0]


def test_the_fuzzer_flags_a_document_that_is_not_json(monkeypatch, tmp_path):
    monkeypatch.setattr(FUZZ, "_sampled", lambda command, every: False)
    _fake_cli(monkeypatch, {"compile": [CliResult(exit_code=0, stdout="prologue:\n  LOAD_A", stderr="")]})
    row, problems = judge_cli_case(CASE, str(tmp_path / "doc.json"))
    assert row.endswith("compile exit 0\tnot JSON")
    assert len(problems) == 1 and ": not JSON: " in problems[0]


@pytest.mark.parametrize("where", ["same process", "fresh interpreter"])
def test_the_fuzzer_flags_output_that_changes_between_runs(monkeypatch, tmp_path, where):
    first = CliResult(exit_code=0, stdout='{"kernel": [1, 2]}', stderr="")
    other = CliResult(exit_code=0, stdout='{"kernel": [2, 1]}', stderr="")
    monkeypatch.setattr(FUZZ, "_sampled", lambda command, every: (every == REPEAT_EVERY) == (where == "same process"))
    monkeypatch.setattr(FUZZ, "_in_fresh_interpreter", lambda argv, seed: other)
    _fake_cli(monkeypatch, {"compile": [first, other], "--input": [CliResult(exit_code=0, stdout="", stderr="")]})
    row, problems = judge_cli_case(CASE, str(tmp_path / "doc.json"))
    assert len(problems) == 1 and where.split()[-1] in problems[0], problems
    assert row.endswith("check not checked")  # a command that is not even repeatable is not checked on


@pytest.mark.parametrize("result,flagged", [
    (CliResult(exit_code=0, stdout="{}", stderr=""), True),
    (CliResult(exit_code=1, stdout="", stderr="error: compile refused schedule 4wave: UNSAFE"), True),
    (CliResult(exit_code=2, stdout="", stderr="error: -p BM=7 is invalid for schedule 4wave"), True),
    (CliResult(exit_code=2, stdout="", stderr="error: --target h100-pingpong is invalid for "
                                              "schedule 4wave: it is made for target mi355x"), False),
])
def test_the_fuzzer_flags_a_mismatched_pair_that_is_not_refused(result, flagged):
    case = attrs.evolve(CASE, schedule="4wave", target="h100-pingpong")
    assert bool(FUZZ._mismatch(case, result, "pipeline-core compile 4wave")) is flagged
    assert FUZZ._mismatch(attrs.evolve(case, target="mi355x"), result, "x") == []


def test_the_fuzzer_draws_every_registered_schedule_and_target():
    """The command-line cases come from the registry: the H100 schedules and targets too."""
    host = _registry()
    assert {"multistage-gemm", "pingpong", "warpspecialized-gemm"} <= set(host.schedules)
    assert {"h100", "h100-pingpong"} <= set(host.targets)
    assert "h100-pingpong" in _buildable("pingpong")
    assert "h100" in _buildable("warpspecialized-gemm") and "h100" in _buildable("multistage-gemm")
    pairs = set(_pairs())
    assert {("pingpong", "h100-pingpong"), ("multistage-gemm", "h100"),
            ("warpspecialized-gemm", "h100"), ("flash-attention-fwd", "h100"),
            ("hello", "toy-gpu")} <= pairs
    assert {(s, t) for s in host.schedules for t in host.targets} == pairs
    assert any(t not in _buildable(s) for s, t in pairs)  # and pairs that do not belong together


def test_the_time_cut_marker_is_what_a_seconds_budget_prints_and_a_node_budget_does_not(capsys):
    """judge_cli_case recognises a search cut by the seconds budget by TIME_CUT in stderr: the
    line SchedulingRequest.warn_cut prints for it, and not for the repeatable node budget it
    then judges the case under."""
    from pipeline_core.scheduling.registry import SchedulingRequest

    request = SchedulingRequest(body=(), edges=(), time_limit=10.0, node_limit=TIME_CUT_NODES)
    request.warn_cut("CSP", "time-limit")
    assert TIME_CUT in capsys.readouterr().err
    request.warn_cut("CSP", "node-limit")
    assert TIME_CUT not in capsys.readouterr().err
