"""The checker's view of a target's counters: what each wait counts, what each op adds.

The checker never hard-codes a GPU's counters: :func:`counter_model` builds a
:class:`CounterModel` from the :class:`~pipeline_core.sync.SyncModel` the
target declares on its profile, with tick counts bound to one document.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pipeline_core.execution import fewest_agents
from pipeline_core.ops import FrameworkTag, OpRole
from pipeline_core.sync.model import SyncModel
from pipeline_core.sync.resolve import document_target, sync_for_document

__all__ = ["CounterModel", "CounterSpec", "OpCount", "counter_model", "document_target",
           "model_for_document"]


def _positive(instance: Any, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be >= 1, got {value}")


@attrs.frozen
class CounterSpec:
    """One hardware counter: the wait tag that tests it and how its ops retire."""

    name: str
    wait_tag: int
    #: True: ops retire in issue order (a wait(n) retires the oldest ops first).
    #: False: any op may retire first, so only wait(0) guarantees a given op retired.
    in_order: bool = True
    #: group channels: the tag of the entry that closes a group.  Ops on the channel
    #: then add no tick themselves; each commit adds one tick that retires them all.
    commit_tag: int | None = None
    #: largest encodable wait value (the target's ``Channel.max_wait``); None: not declared
    max_wait: int | None = None


@attrs.frozen
class OpCount:
    """An op of ``role`` on ``channel`` (-1 = any channel) adds ``ops`` to ``counter``."""

    role: int
    channel: int
    counter: str
    ops: int = attrs.field(validator=_positive)


@attrs.frozen
class CounterModel:
    """The hardware facts the hazard checker needs from a target.

    Why each field exists:

    * ``counters`` / ``costs``: which wait tag tests which counter, and how many
      counter ops a load adds (a wait(n) counts *ops*, not loads).
    * ``barrier_tag``: the tag that is a rendezvous of every warp of the workgroup.
    * ``barrier_drains``: the barrier also waits for the issuing warp's own
      outstanding memory ops (a fenced ``barrier()``), not a bare rendezvous.
    * ``barrier_kinds``: every barrier kind the target declares, as
      (tag, name, aligned); an entry with any of these tags is a rendezvous of
      every warp (``barrier_tag`` is the one the execution model's stagger adds).
      An *aligned* kind needs every participant at the same barrier instruction
      (NVIDIA ``bar.sync`` / ``__syncthreads``, PTX ``.aligned``), so staggered
      warp groups, which meet at different barrier instructions, may not use it
      (the aligned-barrier rule, README.md "Model").
    * ``register_interlock``: the compiler delays a use of a register until the
      load writing it has retired, by inserting a counter wait (AMDGPU's
      SIInsertWaitcnts does this for VGPRs written by ``ds_read``).  The checker
      treats such a use as a wait that retires that load and, on an in-order
      counter, every older op; MMAs then never read half-loaded fragments.
      When False, a use before an explicit wait retired the load is REG_RAW.
    * ``global_loads_write_lds``: global loads go straight to LDS
      (``buffer_load ... lds``); when False they fill staging registers that a
      SHARED_STORE op then writes to LDS (the single-buffer kernel).
    * ``lds_in_order``: a hardware-ordering *assumption* (not an ISA guarantee):
      the LDS of a CU services its accesses in arrival order, and the LDS write
      of a global->LDS load arrives through that same queue, after the load's
      data came back from memory.  So an LDS read whose *issue* happens before
      the *issue* of a global->LDS load (program order in one agent, or a barrier
      rendezvous between agents) is serviced before any part of that load's data
      lands, even if no wait retired the read: the load cannot overwrite it
      (no LDS_WAR).  It only removes write-after-read hazards against global
      loads that write LDS; LDS_RAW, register hazards and SHARED_STORE writes
      are unaffected.  False (the record's default, for targets that do not
      vouch for it) demands that a wait retire the read first, the stricter
      all-timings model; a target's sync model may vouch for it
      (``SyncModel.shared_in_order``), and ``pipeline-core check --no-lds-order``
      turns it off again.
    * ``notes``: assumptions made while building the model, shown in reports.
    * ``fewest_agents``: the fewest warps per group a proof on this target may model
      (:func:`pipeline_core.execution.fewest_agents`: 2 where a per-thread channel's data is
      visible to the issuing thread only, as cp.async's).
    """

    counters: tuple[CounterSpec, ...]
    costs: tuple[OpCount, ...]
    barrier_tag: int = int(FrameworkTag.BARRIER)
    barrier_drains: bool = False
    barrier_kinds: tuple[tuple[int, str, bool], ...] = ()
    register_interlock: bool = True
    global_loads_write_lds: bool = True
    lds_in_order: bool = False
    name: str = "custom"
    notes: tuple[str, ...] = ()
    #: (role, channel) pairs whose ops are synchronous for the issuer (complete at issue)
    synchronous: tuple[tuple[int, int], ...] = ()
    #: the target's ISA form of each sync tag (``SyncModel.isa_forms``), for hazard sites only
    isa_forms: Mapping[int, str] = attrs.field(factory=dict, eq=False)
    fewest_agents: int = 1

    def __attrs_post_init__(self) -> None:
        # The checker keeps one queue per declared counter; a cost on any other
        # counter would have nowhere to go.
        declared = [c.name for c in self.counters]
        for c in self.costs:
            if c.counter not in declared:
                raise ValueError(f"counter model {self.name!r}: role {c.role} channel {c.channel} "
                                 f"counts on {c.counter!r}, which is not one of its counters "
                                 f"({', '.join(declared) or 'none'})")

    def counter_for_wait(self, tag: int) -> CounterSpec | None:
        """The counter a wait entry with ``tag`` tests, or None if ``tag`` is no wait."""
        for c in self.counters:
            if c.wait_tag == tag:
                return c
        return None

    def counter_for_commit(self, tag: int) -> CounterSpec | None:
        """The group counter an entry with ``tag`` closes a group of, or None."""
        for c in self.counters:
            if c.commit_tag is not None and c.commit_tag == tag:
                return c
        return None

    def is_rendezvous(self, tag: int) -> bool:
        """An entry with ``tag`` is a rendezvous of every warp (any declared barrier kind)."""
        return tag == self.barrier_tag or any(k[0] == tag for k in self.barrier_kinds)

    def aligned_barrier(self, tag: int) -> str | None:
        """The name of the aligned barrier kind ``tag`` is, or None (not aligned, or unknown)."""
        return next((name for t, name, aligned in self.barrier_kinds if t == tag and aligned), None)

    def is_synchronous(self, role: int, channel: int) -> bool:
        """Ops of ``role`` on ``channel`` are declared synchronous (no counter)."""
        return (role, channel) in self.synchronous or (role, -1) in self.synchronous

    def counter(self, name: str) -> CounterSpec:
        for c in self.counters:
            if c.name == name:
                return c
        raise KeyError(name)

    def cost(self, role: int, channel: int) -> OpCount | None:
        """How an op of ``role`` on ``channel`` is counted (None: it is not counted)."""
        fallback = None
        for c in self.costs:
            if c.role == role and c.channel == channel:
                return c
            if c.role == role and c.channel == -1:
                fallback = c
        return fallback

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly description (for verdicts and ``--format json``)."""
        return {
            "name": self.name,
            "counters": [{"name": c.name, "wait_tag": c.wait_tag, "in_order": c.in_order,
                          **({"commit_tag": c.commit_tag} if c.commit_tag is not None else {})}
                         for c in self.counters],
            "costs": [{"role": OpRole(c.role).name if c.role in OpRole._value2member_map_ else c.role,
                       "channel": c.channel, "counter": c.counter, "ops": c.ops} for c in self.costs],
            "barrier_tag": self.barrier_tag,
            "barrier_drains": self.barrier_drains,
            "register_interlock": self.register_interlock,
            "global_loads_write_lds": self.global_loads_write_lds,
            "lds_in_order": self.lds_in_order,
            "notes": list(self.notes),
        }


def counter_model(sync: SyncModel, document: Mapping[str, Any]) -> CounterModel:
    """The checker's view of a target's :class:`~pipeline_core.sync.SyncModel` for ``document``.

    Tick counts are bound against the document's ``config`` / ``schedule_config``
    (a target declares which fields hold them); the barrier is the model's
    workgroup barrier; the assumptions (register interlock, in-order shared
    memory, where global loads land) are the target's.
    """
    config = document.get("config") if isinstance(document, Mapping) else None
    sched = document.get("schedule_config") if isinstance(document, Mapping) else None
    bound = sync.bind(config, sched)
    grouped = {c.name for c in sync.channels if c.commit_tag is not None}
    # on a group channel an op's own ticks are not counted (its commit adds the tick)
    costs = tuple(OpCount(int(e.role), e.channel, e.counter,
                          1 if e.counter in grouped else e.ticks)
                  for e in bound.effects if e.counter is not None)
    return CounterModel(
        counters=tuple(CounterSpec(c.name, c.wait_tag, c.in_order, commit_tag=c.commit_tag,
                                   max_wait=c.max_wait)
                       for c in sync.channels),
        costs=costs,
        synchronous=tuple((int(e.role), e.channel) for e in bound.effects if e.counter is None),
        barrier_tag=sync.barrier.tag,
        barrier_drains=sync.barrier.drains,
        barrier_kinds=tuple((b.tag, b.name, b.aligned) for b in sync.barriers),
        register_interlock=sync.register_interlock,
        global_loads_write_lds=sync.global_loads_write_shared,
        lds_in_order=sync.shared_in_order,
        name=sync.name,
        notes=bound.notes,
        isa_forms=dict(sync.isa_forms),
        fewest_agents=fewest_agents(sync),
    )


def model_for_document(document: Mapping[str, Any], host: Any = None,
                       target: str | None = None) -> CounterModel:
    """The counter model of the target ``document`` was compiled for (or ``target``).

    Raises :class:`~pipeline_core.errors.TargetFactError` when the target
    declares no sync model: the checker never substitutes another GPU's.
    """
    return counter_model(sync_for_document(document, host, target), document)
