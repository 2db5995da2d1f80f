"""The last stage of every compile: prove the emitted schedule race-free, or refuse it.

Why a compiler stage and not a separate command: a schedule a kernel unrolls must not race,
and a user who never runs ``check`` must not receive one that does.  The proof runs the
hazard checker (pipeline_core/check/README.md) on exactly the document ``compile --format
json`` emits, under the execution model the compile derived (warp groups, stagger and the
warps per group the schedule or target declares) and the counter model of the target's sync
model.  An unsafe result raises :class:`UnsafeScheduleError` naming the first hazard, its fix
and the knobs known to race; a target without a sync model cannot be proven, so its schedules
are refused too (:class:`UnprovableScheduleError`).  ``allow_unsafe`` emits either anyway,
with the hazards attached to the compiled schedule (the document's ``hazards`` key).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from pipeline_core.compiled import Proof
from pipeline_core.errors import PipelineError, ProgramError, TargetFactError, UnknownNameError
from pipeline_core.ops import FrameworkTag

if TYPE_CHECKING:
    from pipeline_core.check.verdict import Fix, Verdict
    from pipeline_core.compiled import CompiledSchedule
    from pipeline_core.plugins import PluginHost
    from pipeline_core.sync.model import SyncModel

#: kernel iterations the proof executes: the stagger, a steady state and the hand-off to the
#: epilogue all appear within three (the checker's own default, pipeline_core/check/checker.py)
from pipeline_core.check.checker import DEFAULT_ITERATIONS as PROOF_ITERATIONS  # noqa: E402

#: the metadata key a ScheduleConfig field carries when setting it is known to make the
#: reference's output race (pipeline_core/config.py); a refusal names such knobs
RACES_KEY = "races"


ALLOW_TEXT = "pass --allow-unsafe (API: allow_unsafe=True) to emit it anyway with its hazards listed"


class UnsafeScheduleError(PipelineError):
    """Compile refused a schedule the hazard checker does not prove race-free.

    ``verdict`` is the checker's verdict (None when nothing could be proven), ``knobs`` the
    racing ``-c`` knobs the caller set.  The CLI exits 1 (unsafe), as ``check`` does.
    """

    def __init__(self, finding: str, *, verdict: Verdict | None = None,
                 knobs: tuple[str, ...] = ()) -> None:
        self.finding = finding
        self.verdict = verdict
        self.knobs = knobs
        text = f"{finding}; {ALLOW_TEXT}"
        head, colon, rest = finding.partition(": ")
        if knobs and colon:  # the way out first: the hazards that follow can run to 1,000 chars
            these = "these knobs are" if len(knobs) > 1 else "this knob is"
            text = (f"{head}: the configuration sets {', '.join(knobs)}, and {these} known to "
                    f"make the reference's output race: drop {' and '.join(knobs)}, or "
                    f"{ALLOW_TEXT}; {rest}")
        super().__init__(text)

    def naming_knobs(self, knobs: tuple[str, ...]) -> "UnsafeScheduleError":
        """The same refusal, naming the racing knobs the caller set."""
        return UnsafeScheduleError(self.finding, verdict=self.verdict, knobs=knobs)


class UnprovableScheduleError(UnsafeScheduleError):
    """The schedule's target declares no sync model, so no proof is possible."""

    def __init__(self, finding: str, *, target: str) -> None:
        self.target = target
        super().__init__(finding)

    def naming_knobs(self, knobs: tuple[str, ...]) -> "UnsafeScheduleError":
        """No knob makes a schedule unprovable: the refusal stays as it is."""
        return self


#: the -c knob whose value a manual wait of the block template takes as it is
#: (``auto_waits=false``; config.py), by the template's wait it sets (pipeline_core/program)
MANUAL_WAIT_KNOBS = {FrameworkTag.WAIT_LGKM: "wait_lgkm_first", FrameworkTag.WAIT_VM: "wait_vm_last"}


class UnencodableWaitError(ProgramError):
    """An emitted wait value its channel cannot encode (:func:`check_encodable`).

    ``sources`` are the document fields the sync model takes the channel's ticks from
    (``Effect.ticks_from``, e.g. ``config.lgkm_per_load_a``) and ``manual_knob`` the ``-c``
    knob a manual wait on the channel takes its value from ("" if none), so that
    :meth:`naming_keys` can name the ``-p`` / ``-T`` / ``-c`` keys of the user's that set the
    wait (issue 23: a refusal names the user's key that caused it).
    """

    def __init__(self, where: str, *, value: int, allowed: str, sources: tuple[str, ...],
                 manual_knob: str = "", hint: str = "") -> None:
        self.where = where
        self.value = value
        self.allowed = allowed
        self.sources = sources
        self.manual_knob = manual_knob
        self.hint = hint
        super().__init__(f"{where}{hint}")

    def naming_keys(self, given: Mapping[str, Mapping[str, str]]) -> "UnencodableWaitError":
        """The same refusal naming the user's keys (``given``: flag -> {key: value as typed})
        behind the wait: those that set the channel's ticks per load, and a manual wait knob
        whose value is the wait's; else every key the user gave (the schedule was built from
        them).  Unchanged when the user gave none."""
        fields = {source.rpartition(".")[2] for source in self.sources}

        def is_the_wait(flag: str, key: str, text: str) -> bool:
            if flag != "-c" or key != self.manual_knob:
                return False
            from pipeline_core.limits import parse_int
            try:
                return parse_int(text) == self.value
            except ValueError:
                return False

        typed = [(flag, key, text) for flag, pairs in given.items() for key, text in pairs.items()]
        linked = [t for t in typed if t[1] in fields or is_the_wait(*t)]
        if not typed:
            return self
        keys = ", ".join(f"{flag} {key}={text}" for flag, key, text in linked or typed)
        if linked:
            why = (f" (set by your {keys}: lower {'it' if len(linked) == 1 else 'them'} until "
                   f"every such wait is {self.allowed})")
        else:
            why = (f" (the schedule was built with your {keys}; none of them sets this wait's "
                   f"ticks, which come from {', '.join(self.sources) or 'the schedule'})")
        return UnencodableWaitError(self.where, value=self.value, allowed=self.allowed,
                                    sources=self.sources, manual_knob=self.manual_knob, hint=why)


def racing_overrides(overrides: Mapping[str, str]) -> tuple[str, ...]:
    """``-c NAME=VALUE`` for every given ScheduleConfig override that sets a knob declared
    (field metadata ``races``, pipeline_core/config.py) to make the reference's output race."""
    from pipeline_core.config import ScheduleConfig, apply_overrides

    fields = {f.name: f for f in attrs.fields(ScheduleConfig)}
    racing = {k: v for k, v in overrides.items() if k in fields and fields[k].metadata.get(RACES_KEY)}
    if not racing:
        return ()
    parsed = apply_overrides(ScheduleConfig(), racing, what="ScheduleConfig", flag="-c")
    default = ScheduleConfig()
    return tuple(f"-c {k}={v}" for k, v in racing.items()
                 if getattr(parsed, k) != getattr(default, k))


def check_encodable(compiled: CompiledSchedule, sync: SyncModel) -> None:
    """Every emitted wait fits its channel's encoding (``Channel.max_wait``; None: unknown).

    A wait above the largest encodable value cannot be emitted at all (each target declares
    its limits; the AMD plugin's, with sources, are in docs/design/amd-waits-and-warps.md), and
    a negative one means nothing; either
    is an :class:`UnencodableWaitError` naming the entry, the channel and the limit.
    """
    from pipeline_core.program.binding import lowering_for

    channels = {c.wait_tag: c for c in sync.channels}
    bound = lowering_for(sync).tags  # the template's waits as the target's
    manual = {bound.get(int(tag)): knob for tag, knob in MANUAL_WAIT_KNOBS.items()}
    for phase, entries in (("prologue", compiled.prologue), ("kernel", compiled.kernel),
                           ("epilogue", compiled.epilogue)):
        for i, entry in enumerate(entries):
            channel = channels.get(entry.op.tag)
            if channel is None:
                continue
            value = entry.op.wait_value
            limit = channel.max_wait
            if value < 0 or (limit is not None and value > limit):
                allowed = f"0..{limit}" if limit is not None else "a value >= 0"
                sources = tuple(dict.fromkeys(
                    field for effect in sync.effects if effect.counter == channel.name
                    for field in effect.ticks_from))
                raise UnencodableWaitError(
                    f"schedule {compiled.schedule_name}: {phase}[{i}] {channel.wait_name}({value}) "
                    f"cannot be encoded: {channel.label} waits on target "
                    f"{compiled.target_name or sync.name!r} take {allowed}", value=value,
                    allowed=f"in {allowed}" if limit is not None else allowed, sources=sources,
                    manual_knob=manual.get(channel.wait_tag, ""),
                    hint=(f" (a manual wait: lower -c {manual[channel.wait_tag]})"
                          if not compiled.schedule_config.auto_waits and channel.wait_tag in manual
                          else ""))


def prove(compiled: CompiledSchedule, host: PluginHost | None = None) -> Proof:
    """Run the hazard checker on ``compiled`` as emitted, with its declared warps per group."""
    if not compiled.plan.lockstep:  # one program per role, on rings: the agents checker
        from pipeline_core.agents.prove import prove_agents
        return prove_agents(compiled)
    from pipeline_core.check.checker import check_program
    from pipeline_core.check.counters import counter_model
    from pipeline_core.check.program import decode
    from pipeline_core.document import to_document
    from pipeline_core.sync.resolve import sync_for_compiled

    try:
        sync = sync_for_compiled(compiled, host)
    except (TargetFactError, UnknownNameError) as exc:
        return Proof(verdict=None, unprovable=str(exc))
    check_encodable(compiled, sync)
    document = to_document(compiled)
    model = counter_model(sync, document)
    execution = compiled.plan.execution
    program = decode(document, model, groups=execution.groups if execution is not None else None)
    warps = execution.warps_per_group if execution is not None else 1
    return Proof(verdict=check_program(program, iterations=PROOF_ITERATIONS,
                                       warps_per_group=warps))


def refusal(compiled: CompiledSchedule, proof: Proof, host: PluginHost | None = None
            ) -> UnsafeScheduleError:
    """The one-line error for a schedule the proof did not accept; its fix names the flags
    or the schedule method that apply it (:func:`how_to_apply`)."""
    who = f"schedule {compiled.schedule_name}"
    if proof.verdict is None:
        target = compiled.target_name or "(the schedule's own)"
        return UnprovableScheduleError(
            f"compile refused {who}: it cannot be proven race-free: {proof.unprovable}",
            target=target)
    verdict = proof.verdict
    first = verdict.first
    assert first is not None  # an unsafe verdict carries its violations
    multi = verdict.warps_per_group > 1
    if first.site.agent:  # the agents checker: name the agent; its assumptions are in `check`
        model = verdict.model
        text = (f"compile refused {who}: UNSAFE (agents {', '.join(model['agents'])}, "
                f"{model['stages']} ring stages, every timing over K-tile counts "
                f"{', '.join(map(str, model['tile_counts']))}"
                + (f" on {' and '.join(map(str, model['output_tiles']))} output tiles"
                   if model.get("output_tiles") else "")
                + f"): {first.kind.value} in agent "
                f"{first.site.agent} at {first.site.phase}[{first.site.index}]: {first.site.op}: "
                f"{first.message}")
    else:
        text = (f"compile refused {who}: UNSAFE under {verdict.assumptions_text()}: "
                f"{first.kind.value} at {first.site.text(multi)}: {first.message}")
    if first.fix is not None:
        text += f"; fix: {first.fix.text}"
        how = how_to_apply(compiled, first.fix, host)
        if how:
            text += f"; {how}"
    if compiled.plan.explicit_source:
        text += f" (the program's explicit blocks come from {compiled.plan.explicit_source})"
    more = len(verdict.distinct()) - 1
    if more:
        text += (f" ({more} more distinct hazard{'s' if more > 1 else ''}: "
                 "`pipeline-core check` lists them)")
    return UnsafeScheduleError(text, verdict=verdict)


def how_to_apply(compiled: CompiledSchedule, fix: Fix, host: PluginHost | None) -> str:
    """What the user types to apply ``fix`` to ``compiled`` ("" when nothing names it): the
    plan's lowering answers (``LoweringDetails.how_to_apply``; the block program names its
    ``-c`` knobs, pipeline_core/lowering/knob_fixes.py) under the target's sync model."""
    from pipeline_core.sync.resolve import sync_for_compiled

    try:
        sync = sync_for_compiled(compiled, host)
    except (TargetFactError, UnknownNameError):
        return ""
    return compiled.plan.details.how_to_apply(compiled.plan, sync, fix)


def require_safe(compiled: CompiledSchedule, host: PluginHost | None = None, *,
                 allow_unsafe: bool = False) -> CompiledSchedule:
    """``compiled`` with its proof attached; raises :class:`UnsafeScheduleError` unless it is
    proven safe or ``allow_unsafe`` is set."""
    # a schedule settled by pipeline_core/sync/settle.py arrives with the proof of what it emits
    proof = compiled.proof if compiled.proof is not None else prove(compiled, host)
    if not proof.safe and not allow_unsafe:
        raise refusal(compiled, proof, host)
    return attrs.evolve(compiled, proof=proof)
