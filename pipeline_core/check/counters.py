"""Counter semantics of a target: what each wait counts and how many ops each op adds.

The checker never hard-codes AMD's ``vmcnt`` / ``lgkmcnt``: it reads them from a
:class:`CounterModel`, which a target plugin may supply through the
``pipeline_core_counter_model(target)`` hook.  :func:`default_counter_model`
builds the AMD (MI355X) semantics from a schedule document.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from pipeline_core.ops import FrameworkTag, OpRole

VM = "vm"
LGKM = "lgkm"


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
      outstanding memory ops (a fenced ``barrier()``), not a bare ``s_barrier``.
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
      all-timings model; :func:`default_counter_model` (AMD) sets it True, and
      ``pipeline-core check --no-lds-order`` turns it off again.
    * ``notes``: assumptions made while building the model, shown in reports.
    """

    counters: tuple[CounterSpec, ...]
    costs: tuple[OpCount, ...]
    barrier_tag: int = int(FrameworkTag.BARRIER)
    barrier_drains: bool = False
    register_interlock: bool = True
    global_loads_write_lds: bool = True
    lds_in_order: bool = False
    name: str = "custom"
    notes: tuple[str, ...] = ()

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
            "counters": [{"name": c.name, "wait_tag": c.wait_tag, "in_order": c.in_order}
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


def _int(d: Mapping[str, Any] | None, key: str) -> int:
    if not isinstance(d, Mapping):
        return 0
    v = d.get(key, 0)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def default_counter_model(document: Mapping[str, Any]) -> CounterModel:
    """The AMD (MI355X) counter semantics for a schedule document (docs/document-format.md).

    * vm ops per global load: ``config.vm_per_load_a/b``.
    * lgkm ops per fragment load: ``config.lgkm_per_load_a/b`` when non-zero (the
      4-wave geometry sets them), else ``schedule_config.lgkm_per_load_a/b`` (the
      ping-pong type parameters); when both are 0, 1 per fragment load is assumed
      and recorded in ``notes``.
    * Both counters retire in order (LDS-only lgkm traffic and buffer loads do).
    * Double buffer (depth >= 2): global loads write LDS directly and BARRIER is a
      bare ``s_barrier`` (REFERENCE.md §10 dispatch).  Single buffer (depth 1):
      loads fill registers, SHARED_STORE writes LDS (1 lgkm op) and the kernel's
      ``barrier()`` is fenced, i.e. it drains the warp's own counters first.
    * ``lds_in_order`` is True: an LDS read issued before a global->LDS load (in
      happens-before order) is serviced before that load's data lands, because the
      LDS services its queue in arrival order and the load's write arrives
      hundreds of cycles later through the same queue (see :class:`CounterModel`).
    """
    config = document.get("config") if isinstance(document, Mapping) else None
    sched = document.get("schedule_config") if isinstance(document, Mapping) else None
    notes: list[str] = []
    vm = []
    for ch, key in ((0, "vm_per_load_a"), (1, "vm_per_load_b")):
        n = _int(config, key)
        if n < 1:
            notes.append(f"config.{key} is {n}; assumed 1 vm op per global load")
            n = 1
        vm.append(n)
    lgkm = []
    for ch, key in ((0, "lgkm_per_load_a"), (1, "lgkm_per_load_b")):
        n = _int(config, key)
        if n < 1:
            n = _int(sched, key)
        if n < 1:
            notes.append(f"config.{key} and schedule_config.{key} are 0; "
                         f"assumed 1 lgkm op per fragment load on channel {ch}")
            n = 1
        lgkm.append(n)
    depth = _int(config, "depth")
    single = depth == 1
    costs = (
        OpCount(int(OpRole.GLOBAL_LOAD), 0, VM, vm[0]),
        OpCount(int(OpRole.GLOBAL_LOAD), 1, VM, vm[1]),
        OpCount(int(OpRole.GLOBAL_LOAD), -1, VM, vm[0]),
        OpCount(int(OpRole.FRAGMENT_LOAD), 0, LGKM, lgkm[0]),
        OpCount(int(OpRole.FRAGMENT_LOAD), 1, LGKM, lgkm[1]),
        OpCount(int(OpRole.FRAGMENT_LOAD), -1, LGKM, lgkm[0]),
        OpCount(int(OpRole.SHARED_STORE), -1, LGKM, 1),
    )
    if single:
        notes.append("single buffer (depth 1): global loads fill staging registers, "
                     "SHARED_STORE writes LDS, BARRIER is the fenced barrier() that drains "
                     "the warp's counters")
    return CounterModel(
        counters=(CounterSpec(VM, int(FrameworkTag.WAIT_VM), True),
                  CounterSpec(LGKM, int(FrameworkTag.WAIT_LGKM), True)),
        costs=costs,
        barrier_tag=int(FrameworkTag.BARRIER),
        barrier_drains=single,
        register_interlock=True,
        global_loads_write_lds=not single,
        lds_in_order=True,
        name="amd-mi355x" + ("-single-buffer" if single else ""),
        notes=tuple(notes),
    )


def resolve_counter_model(document: Mapping[str, Any], answer: Any = None) -> CounterModel:
    """The model to check ``document`` with, from a target plugin's hook ``answer``.

    ``answer`` may be a :class:`CounterModel`, a callable ``f(document) -> CounterModel``
    (for semantics that depend on the compiled config, like ops per load), or None
    (use :func:`default_counter_model`).
    """
    if answer is None:
        return default_counter_model(document)
    if isinstance(answer, CounterModel):
        return answer
    if callable(answer):
        built = answer(document)
        if isinstance(built, CounterModel):
            return built
        raise TypeError(f"counter model builder returned {type(built).__name__}, not a CounterModel")
    raise TypeError(f"pipeline_core_counter_model returned {type(answer).__name__}, "
                    "expected a CounterModel, a callable building one, or None")


def document_target(document: Mapping[str, Any]) -> str | None:
    """The target a document was compiled for (``target`` key, or ``--target`` in ``cli``)."""
    target = document.get("target") if isinstance(document, Mapping) else None
    if isinstance(target, str) and target:
        return target
    cli = document.get("cli") if isinstance(document, Mapping) else None
    if isinstance(cli, list) and "--target" in cli:
        i = cli.index("--target")
        if i + 1 < len(cli) and isinstance(cli[i + 1], str):
            return cli[i + 1]
    return None
