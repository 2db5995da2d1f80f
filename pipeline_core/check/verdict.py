"""The checker's result records and their text / JSON renderings."""
from __future__ import annotations

import enum
import json
from typing import Any

import attrs


class HazardKind(enum.Enum):
    """What went wrong (the names are stable: tools match on them)."""

    LDS_RAW = "LDS_RAW"  #: a fragment read may see a tile whose load has not landed everywhere
    LDS_WAR = "LDS_WAR"  #: a load may overwrite a tile that a fragment read still reads
    REG_RAW = "REG_RAW"  #: an MMA may read a register before its fragment load retired
    REG_WAR = "REG_WAR"  #: a fragment load overwrote a register an MMA still needed
    WRONG_K_STEP = "WRONG_K_STEP"  #: an MMA's A and B come from different K steps
    MISSING_PRODUCT = "MISSING_PRODUCT"  #: an (m, n, k) product is never accumulated (or skipped)
    DUPLICATE_PRODUCT = "DUPLICATE_PRODUCT"  #: an (m, n, k) product is accumulated twice
    # the agents checker's (pipeline_core/agents/prove.py; docs/guide/agents.md)
    SMEM_RAW = "SMEM_RAW"  #: a read of a ring stage may see a tile whose copies have not landed
    SMEM_WAR = "SMEM_WAR"  #: a copy may overwrite a ring stage an async read still reads
    ACC_RAW = "ACC_RAW"  #: accumulators read (after the loop) or fenced while a group is pending
    PHASE_PARITY = "PHASE_PARITY"  #: a phase wait names the wrong phase, or tests a stale parity
    PHASE_LAG = "PHASE_LAG"  #: a phase wait may start after the phase after its own completed
    PHASE_OVERRUN = "PHASE_OVERRUN"  #: an arrival or copy may land in the phase before its own
    DEADLOCK = "DEADLOCK"  #: a wait whose phase never completes, or a cycle of waits
    WAIT_RANGE = "WAIT_RANGE"  #: a counter wait below 0 or above its channel's encodable maximum
    ORDER = "ORDER"  #: a declared ordering between consumer groups is not enforced (named barriers)
    #: two adds to one accumulator that several CTAs make may land in either order (a turn
    #: wait, a completion wait, a fence missing, or two adds given one turn): the sums are
    #: not the same bits every run
    ADD_ORDER = "ADD_ORDER"
    #: a step the kernel runs that no proof reads: its record (``Plan.store``, ``.reduction``,
    #: ``.split``) missing or not listing its agent, or the step in a section of another kind
    UNPROVEN = "UNPROVEN"


@attrs.frozen
class Site:
    """Where an event ran: phase list and entry index, kernel iteration, warp."""

    phase: str
    index: int
    iteration: int
    group: int
    lane: int = 0
    op: str = ""
    #: the agents checker: the agent (``group`` is its index) and the iteration's name for it
    agent: str = ""

    def text(self, multi: bool = False) -> str:
        where = f"{self.phase}[{self.index}]" if self.index >= 0 else self.phase
        if self.agent:  # an agent's step: the op text names the agent and the tile
            return f"{where} (agent {self.agent}): {self.op}"
        if self.phase == "kernel":
            where += f" iteration {self.iteration}"
        who = f"group {self.group}" + (f" warp {self.lane}" if multi else "")
        return f"{where} ({who}): {self.op}"

    def to_dict(self) -> dict[str, Any]:
        d = {"phase": self.phase, "index": self.index,
             "iteration": self.iteration if self.phase == "kernel" else None,
             "group": self.group, "warp": self.lane, "op": self.op}
        if self.agent:
            d["agent"] = self.agent
        return d


#: the ``phase`` a site or a fix names for the barriers the execution model adds around the
#: entry lists (docs/guide/reference-behaviours.md, "Warp stagger"): the checker's trace places
#: them, the settle stage (pipeline_core/sync/settle.py) reads a fix placed at one
STAGGER = "stagger barrier"
LAUNCH = "barrier after the prologue"
TAIL = "barrier after the epilogue"


@attrs.frozen
class Fix:
    """A change that removes the hazard: lower/insert a wait, add a barrier, move an entry."""

    action: str  #: "lower_wait" | "insert_wait" | "insert_barrier" | "move_entry" | "review"
    phase: str
    index: int
    text: str
    counter: str | None = None
    value: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "phase": self.phase, "index": self.index,
                "counter": self.counter, "value": self.value, "text": self.text}


@attrs.frozen
class Violation:
    """One hazard: the event that may misbehave, the event it conflicts with, a fix."""

    kind: HazardKind
    site: Site
    message: str
    other: Site | None = None
    fix: Fix | None = None
    order: tuple = attrs.field(default=(), eq=False, repr=False)  #: canonical position (sorting)

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": self.kind.value, **self.site.to_dict(), "message": self.message,
             "other": self.other.to_dict() if self.other else None,
             "fix": self.fix.to_dict() if self.fix else None}
        return d


@attrs.frozen
class WaitSlack:
    """For one wait entry: its value and the loosest value that keeps the schedule safe."""

    phase: str
    index: int
    counter: str
    value: int
    loosest_safe: int
    max_outstanding: int  #: any value >= this is a no-op at this entry
    #: the loosest value without the in-order-LDS assumption, when the model makes it and
    #: the answer differs (a loosening that rests on that assumption is a bet on the hardware)
    loosest_safe_strict: int | None = None

    @property
    def removable(self) -> bool:
        return self.loosest_safe >= self.max_outstanding

    @property
    def stronger_than_needed(self) -> bool:
        return self.loosest_safe > self.value

    def text(self) -> str:
        head = f"{self.phase}[{self.index}] wait_{self.counter}({self.value})"
        if self.removable:
            text = (f"{head}: removable (safe even as a no-op; at most {self.max_outstanding} "
                    f"ops are ever outstanding here)")
        elif self.stronger_than_needed:
            text = f"{head}: stronger than needed, loosest safe value {self.loosest_safe}"
        else:
            text = f"{head}: tight (loosest safe value {self.loosest_safe})"
        if self.loosest_safe_strict is not None:
            strict = ("tight" if self.loosest_safe_strict == self.value
                      else f"loosest safe value {self.loosest_safe_strict}")
            text += f"; only if LDS services requests in order (strict model: {strict})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "index": self.index, "counter": self.counter,
                "value": self.value, "loosest_safe": self.loosest_safe,
                "max_outstanding": self.max_outstanding, "removable": self.removable,
                "stronger_than_needed": self.stronger_than_needed,
                "loosest_safe_strict": self.loosest_safe_strict}


@attrs.frozen
class AntiEdgeFinding:
    """A same-iteration ANTI edge that the schedule's order violates, judged per subtile."""

    edge: int
    producer: int
    consumer: int
    producer_op: str
    consumer_op: str
    real_hazard: bool
    reason: str

    def text(self) -> str:
        verdict = "REAL HAZARD" if self.real_hazard else "not a hazard"
        return (f"edge {self.edge}: {self.producer} {self.producer_op} -> {self.consumer} "
                f"{self.consumer_op}: {verdict}: {self.reason}")

    def to_dict(self) -> dict[str, Any]:
        return {"edge": self.edge, "producer": self.producer, "consumer": self.consumer,
                "producer_op": self.producer_op, "consumer_op": self.consumer_op,
                "real_hazard": self.real_hazard, "reason": self.reason}


@attrs.frozen
class Verdict:
    """The checker's answer for one schedule."""

    safe: bool
    name: str
    groups: int
    warps_per_group: int
    iterations: int
    model: dict[str, Any]
    violations: tuple[Violation, ...] = ()
    wait_slack: tuple[WaitSlack, ...] | None = None
    anti_edges: tuple[AntiEdgeFinding, ...] = ()

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    def distinct(self) -> list[Violation]:
        """One violation per (kind, phase, entry index): iterations and groups repeat them."""
        seen, out = set(), []
        for v in self.violations:
            key = (v.kind, v.site.phase, v.site.index)
            if key not in seen:
                seen.add(key)
                out.append(v)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "safe": self.safe,
            "schedule": self.name,
            "groups": self.groups,
            "warps_per_group": self.warps_per_group,
            "iterations": self.iterations,
            "counter_model": self.model,
            "first_violation": self.first.to_dict() if self.first else None,
            "violations": [v.to_dict() for v in self.distinct()],
            "violation_count": len(self.violations),
            "wait_slack": None if self.wait_slack is None else [w.to_dict() for w in self.wait_slack],
            "anti_edges": [a.to_dict() for a in self.anti_edges],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def assumptions(self) -> list[str]:
        """Every assumption the verdict rests on, in words (the verdict line states them all)."""
        if "assumptions" in self.model:  # a checker that states its own (the agents checker)
            return list(self.model["assumptions"])
        who = f"{self.groups} warp group{'s' if self.groups > 1 else ''}"
        who += f" x {self.warps_per_group} warp{'s' if self.warps_per_group > 1 else ''}"
        out = [who, f"{self.iterations} kernel iterations",
               f"counter model {self.model.get('name', '?')}"]
        out.append("assuming in-order LDS" if self.model.get("lds_in_order")
                   else "no in-order LDS assumed")
        out.append("assuming the compiler interlocks fragment registers"
                   if self.model.get("register_interlock", True)
                   else "no register interlock assumed (explicit waits only)")
        if self.model.get("barrier_drains"):
            out.append("barriers drain the issuing warp's memory ops")
        return out

    def assumptions_text(self) -> str:
        return ", ".join(self.assumptions())

    def render_text(self) -> str:
        multi = self.warps_per_group > 1
        lines = []
        head = f"{self.name}: " if self.name else ""
        if self.safe:
            lines.append(f"{head}SAFE ({self.assumptions_text()})")
        else:
            v = self.first
            assert v is not None  # an unsafe verdict carries its violations
            lines.append(f"{head}UNSAFE: {v.kind.value} at {v.site.text(multi)}")
            lines.append(f"  assumptions: {self.assumptions_text()}")
            lines.append(f"  {v.message}")
            if v.other:
                lines.append(f"  conflicts with {v.other.text(multi)}")
            if v.fix:
                lines.append(f"  fix: {v.fix.text}")
            rest = self.distinct()[1:]
            if rest:
                lines.append(f"  {len(rest)} more distinct violation(s):")
                for r in rest[:20]:
                    lines.append(f"    {r.kind.value} at {r.site.text(multi)}"
                                 + (f"; fix: {r.fix.text}" if r.fix else ""))
        for note in self.model.get("notes", []):
            lines.append(f"  note: {note}")
        if self.wait_slack is not None and not self.safe:
            lines.append("waits: slack not computed (the schedule is unsafe as emitted)")
        elif self.wait_slack is not None:
            lines.append("waits (loosest value that stays safe, each with the others unchanged):")
            for w in self.wait_slack:
                lines.append(f"  {w.text()}")
        if self.anti_edges:
            lines.append("ANTI edges violated by the order (subtile-level verdict):")
            for a in self.anti_edges:
                lines.append(f"  {a.text()}")
        return "\n".join(lines)
