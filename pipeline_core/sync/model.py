"""A target's synchronisation facts: what one can wait on, what each op adds, what a barrier does.

The core never assumes a GPU family's counters.  A target declares a
:class:`SyncModel` on its :class:`~pipeline_core.config.TargetProfile`; the
hazard checker, the timing model and the exports read channel names, wait tags,
barrier tags and hint tags from it (docs/guide/architecture.md, "Architecture").

Records are frozen and keyword-only.  Tick counts may depend on the compiled
configuration (AMD counts several ``vmcnt`` ticks per global load, set per
kernel layout): an :class:`Effect` names the document fields to read them from
(``ticks_from``), and :meth:`SyncModel.bind` resolves them for one compiled
schedule into a :class:`BoundSync`.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from pipeline_core.ops import MAX_KERNEL_TAG, FrameworkTag, OpRole

# Typed converters (attrs' ``converter=tuple`` hides the element type from the type checker).
def _strings(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _channels(items: Iterable["Channel"]) -> tuple["Channel", ...]:
    return tuple(items)


def _effects(items: Iterable["Effect"]) -> tuple["Effect", ...]:
    return tuple(items)


def _barriers(items: Iterable["BarrierKind"]) -> tuple["BarrierKind", ...]:
    return tuple(items)



class ChannelKind(str, enum.Enum):
    """How a wait on the channel is answered."""

    COUNTER = "counter"  #: wait(n): at most n ticks of the issuer still pending
    PHASE = "phase"      #: wait(phase): a barrier phase completed (not yet lowered by the core)


def _non_empty(inst: Any, attribute: attrs.Attribute, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{type(inst).__name__}.{attribute.name} must be a non-empty string")


def _tag(inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{type(inst).__name__}.{attribute.name} must be an op tag >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Channel:
    """One thing a program can wait on.

    ``name`` is the short key used everywhere a channel is referred to (the
    checker's counters, the timing model's stall reasons come from ``label``);
    ``wait_tag`` / ``wait_name`` are the tag and tag name of the wait entry on
    this channel; ``op_cost_field`` is the :class:`~pipeline_core.ops.Op` field
    that, when non-zero, overrides an op's tick count on this channel (AMD
    prologue loads carry ``vm_cost``).
    """

    name: str = attrs.field(validator=_non_empty)
    label: str = attrs.field(validator=_non_empty)  #: hardware name, e.g. "vmcnt", "cp.async groups"
    wait_tag: int = attrs.field(validator=_tag)
    wait_name: str = attrs.field(validator=_non_empty)  #: e.g. "WAIT_VM"
    kind: ChannelKind = attrs.field(default=ChannelKind.COUNTER, converter=ChannelKind)
    unit: str = "instruction"  #: what one tick is: "instruction", "op", "group", "bytes"
    in_order: bool = True  #: ticks retire oldest first; False: only wait(0) proves a given tick done
    owner: str = "wave"  #: whose counter it is: "thread", "wave", "warp", "warpgroup", "cta"
    results_visible_to: str = "issuer"  #: "issuer" (counters) or "waiters" (phase channels)
    max_wait: int | None = None  #: largest encodable wait value (None: not declared)
    commit_tag: int | None = None  #: group channels: the tag that closes a group
    op_cost_field: str | None = None
    #: its group ops read or write the issuing threads' registers (wgmma's accumulators and
    #: register A operand), so a fence orders the threads' register accesses before each group
    #: (PTX ISA, wgmma.fence); False for groups that touch shared and global memory only (a
    #: bulk copy's), which take no fence (docs/guide/agents.md, "Hand-overs between turns")
    registers: bool = True


@attrs.frozen(kw_only=True)
class Effect:
    """Ops of ``role`` on operand ``channel`` (-1: any) add ``ticks`` to sync channel ``counter``.

    ``counter`` None declares the op synchronous for its issuer (complete in
    program order).  ``ticks_from`` lists document fields (``"config.vm_per_load_a"``)
    whose first positive value replaces ``ticks`` when a schedule is bound;
    when none is positive, ``ticks`` is used and a note says so.
    """

    role: OpRole = attrs.field(converter=OpRole)
    counter: str | None
    channel: int = -1
    ticks: int = 1
    ticks_from: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: what a retirement on ``counter`` ends: "write_done" (the op's results landed) or
    #: "both" (its reads of shared memory ended too: wgmma, TMA store), which is what lets a
    #: counter wait free a stage for the next writer (docs/guide/agents.md, "Sync model")
    resolves: str = "write_done"
    #: how a copy on a phase channel completes there: "bytes" (its bytes count down the
    #: phase's announced transaction count: a TMA copy's complete_tx) or "arrival" (its bytes
    #: count nothing; the issuing thread's later ``async_arrive`` step arrives on the ring once
    #: every copy that thread issued before it landed: cp.async.mbarrier.arrive.noinc), so
    #: the ring counts one arrival per issuing thread and no bytes (docs/guide/agents.md,
    #: "Copies completed by arrival")
    completes: str = attrs.field(default="bytes",
                                 validator=attrs.validators.in_(("bytes", "arrival")))
    #: the memory proxy the op accesses shared memory through ("": the model does not tell
    #: proxies apart); a FLOW edge from a write of one proxy to a read of another needs the
    #: reader's proxy fence between its wait and its read (PTX ISA, "Proxies": cp.async writes
    #: by the generic proxy, wgmma reads by the async proxy)
    proxy: str = ""
    #: where the tensor map a copy reads through is written: "" (the host, a kernel argument)
    #: or "device" (an earlier kernel wrote it into global memory, e.g. one map per group of a
    #: grouped GEMM); a "device" copy needs its issuer's ``descriptor_acquire`` step in the
    #: same output tile before it (PTX ISA, "fence.proxy.tensormap": the tensormap proxy may
    #: hold a stale copy of the map otherwise)
    descriptor: str = attrs.field(default="", validator=attrs.validators.in_(("", "device")))


@attrs.frozen(kw_only=True)
class BarrierKind:
    """A rendezvous instruction.

    ``drains``: the barrier also waits for the issuer's own pending ops (a fenced
    barrier); ``aligned``: every participant must reach the same instruction
    (false where warps run staggered copies of one program).
    """

    tag: int = attrs.field(validator=_tag)
    name: str = attrs.field(validator=_non_empty)  #: instruction name shown in output, e.g. "bar.sync"
    participants: str = "cta"
    aligned: bool = False
    drains: bool = False
    publishes: str = "completed"  #: makes completed (retired) accesses visible to participants


def _ids(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(items)


def _check_step_tags(owner: str, steps: tuple[str, ...], tags: Mapping[str, int]) -> None:
    """A step channel's ``tags`` name exactly its ``steps``: one missing would lower to no
    instruction, one unknown is a typo the lowering never asks for."""
    missing = [k for k in steps if k not in tags]
    unknown = [k for k in tags if k not in steps]
    if missing or unknown:
        raise ValueError(f"{owner}.tags needs exactly {', '.join(steps)}"
                         f" (missing {missing}, unknown {unknown})")


#: the steps of a cross-CTA reduction, in the order a correct one runs them (the step kinds'
#: values, pipeline_core/plan.py StepKind; docs/guide/agents.md, "Cross-CTA reductions")
REDUCTION_STEPS = ("slice_store", "release_fence", "count_arrive", "count_acquire",
                   "slice_read", "count_reset")


@attrs.frozen(kw_only=True)
class CrossCtaReduction:
    """How a target hands partial results between CTAs through global memory (split-K,
    stream-K; docs/guide/agents.md, "Cross-CTA reductions").

    ``tags`` gives each step of ``REDUCTION_STEPS`` the tag it lowers to, ``forms`` the
    instructions it is (the views' ISA names).  ``cta_join``: the CTA's arrive and reset are
    one action each, taken after every reducing agent of the CTA reached it (the target joins
    them with a CTA barrier), so they order every agent's earlier steps.  ``next_use``: what
    orders a counter's next use (the next generation's stores and arrivals) after its reset,
    stated in the proof's assumptions."""

    tags: Mapping[str, int] = attrs.field(factory=dict)
    forms: Mapping[str, str] = attrs.field(factory=dict)
    cta_join: str = ""
    next_use: str = ""

    def __attrs_post_init__(self) -> None:
        _check_step_tags("CrossCtaReduction", REDUCTION_STEPS, self.tags)


#: a staged bulk store's steps, each sub-tile's in the order a correct one runs them, then the
#: drain before the kernel ends (the step kinds' values, pipeline_core/plan.py StepKind; the
#: sub-tile's two meetings of the agent's threads are named-barrier syncs); docs/guide/agents.md,
#: "Bulk stores"
BULK_STORE_STEPS = ("store_wait", "stage_write", "proxy_fence", "store_issue", "store_commit",
                    "store_drain")


@attrs.frozen(kw_only=True)
class BulkStoreChannel:
    """How a target stores results from shared memory to global memory by its async proxy
    (Hopper's TMA store; docs/guide/agents.md, "Bulk stores").

    The store is a **group channel of one thread**: the elected ``issuer`` issues the store
    (``store_issue``) and closes a group (``store_commit``); ``store_wait`` N returns when at
    most N of its most recent groups still *read* their staging buffers (the buffer may be
    written again), ``store_drain`` when every group completed, writes to global memory
    included.  The other threads write the buffer with ordinary (generic-proxy) stores, so each
    needs ``proxy_fence`` before the async proxy may read what it wrote, and meets the issuer on
    a named barrier.  ``tags`` gives each of :data:`BULK_STORE_STEPS` its tag, ``forms`` the
    instruction it is; ``max_wait``: the largest encodable ``store_wait``."""

    tags: Mapping[str, int] = attrs.field(factory=dict)
    forms: Mapping[str, str] = attrs.field(factory=dict)
    max_wait: int = 7
    issuer: str = "one elected thread of the agent (bulk async-groups are per thread)"

    def __attrs_post_init__(self) -> None:
        _check_step_tags("BulkStoreChannel", BULK_STORE_STEPS, self.tags)


@attrs.frozen(kw_only=True)
class ClusterSync:
    """How a target's CTAs of one cluster signal each other (docs/guide/agents.md, "Clusters"):
    the largest cluster a multicast ring may span, the arrive scopes that release a CTA's earlier
    accesses to a *peer* CTA's waiters (a CTA-scope arrive on a peer's barrier counts towards its
    phase but orders nothing for the peer: the race of NVIDIA/cutlass#3324), and the
    instructions of each cluster action (the views' and the proof's ISA names)."""

    max_ctas: int = 2
    #: arrive scopes whose release reaches a peer CTA's waiters
    release_scopes: tuple[str, ...] = attrs.field(default=("cluster",), converter=_strings)
    #: "remote_arrive", "multicast", "start", "end": the instruction each is
    forms: Mapping[str, str] = attrs.field(factory=dict)
    #: a reader's release of a peer CTA's stage goes through a *relay* agent (one otherwise idle
    #: warp per CTA): the reader arrives on the stage's relay barrier in its own CTA, the relay
    #: waits on it and arrives on the peer's barrier at cluster scope, so the fence a
    #: cluster-scope release costs stays off the readers' path (docs/guide/agents.md,
    #: "Clusters"); False: each reader arrives on the peer's barrier itself
    relay: bool = False


@attrs.frozen(kw_only=True)
class NamedBarriers:
    """A target's named CTA barriers: ``ids`` barriers addressed by number, each joined by a
    thread count (docs/guide/agents.md, "Named barriers").

    ``sync_form`` blocks its threads until ``count`` threads arrived on barrier ``id`` (PTX
    ``bar.sync id, count``); ``arrive_form`` adds its threads without waiting (``bar.arrive id,
    count``).  Arrivals fill one *generation* at a time: the ``count``-th thread completes it and
    the barrier starts the next.  ``count`` is a multiple of ``warp_size`` (a warp arrives as a
    whole).  ``reserved`` ids are the target's own (``bar.sync 0`` is ``__syncthreads``); the
    agents lowering hands out the others.  The forms are format strings over ``id`` and
    ``count``; ``sync_tag`` / ``arrive_tag`` are the tags the steps lower to.
    """

    ids: int
    sync_tag: int = attrs.field(validator=_tag)
    arrive_tag: int = attrs.field(validator=_tag)
    sync_form: str = attrs.field(validator=_non_empty)  #: e.g. ``"bar.sync {id}, {count}"``
    arrive_form: str = attrs.field(validator=_non_empty)
    reserved: tuple[int, ...] = attrs.field(default=(), converter=_ids)
    warp_size: int = 32

    def __attrs_post_init__(self) -> None:
        if self.ids < 1:
            raise ValueError(f"NamedBarriers.ids must be 1 or more, got {self.ids}")
        if self.warp_size < 1:
            raise ValueError(f"NamedBarriers.warp_size must be 1 or more, got {self.warp_size}")
        bad = [i for i in self.reserved if not 0 <= i < self.ids]
        if bad:
            raise ValueError(f"NamedBarriers.reserved names ids {bad} outside 0..{self.ids - 1}")
        if self.sync_tag == self.arrive_tag:
            raise ValueError("NamedBarriers.sync_tag and arrive_tag must differ")
        for which in ("sync_form", "arrive_form"):
            try:
                getattr(self, which).format(id=0, count=0)
            except (KeyError, IndexError, ValueError, AttributeError) as exc:
                raise ValueError(f"NamedBarriers.{which} {getattr(self, which)!r} is not a "
                                 f"format over id and count ({exc})") from None

    @property
    def free(self) -> tuple[int, ...]:
        """The ids a lowering may use, lowest first."""
        return tuple(i for i in range(self.ids) if i not in self.reserved)

    def text(self, *, arrive: bool, id: int, count: int) -> str:
        """One sync or arrive as the target's instruction."""
        return (self.arrive_form if arrive else self.sync_form).format(id=id, count=count)


@attrs.frozen(kw_only=True)
class BlockBinding:
    """How the reference's block program (``pipeline_core.program``) lowers on a target.

    The block template has two kinds of wait slot: waits for *global* loads
    (``entry_wait``, the last block's ``pre_sync``, the prologue drains) and
    waits for *fragment* loads (``entry_wait_lgkm``, the post-barrier drain,
    block 0's ``pre_sync``), plus two hints (a priority raise/lower around the
    MMA and a scheduling fence).  A target binds each to one of its channels or
    hint tags; ``fragment_channel`` None declares fragment loads synchronous,
    so the template's fragment waits vanish, and a hint tag None drops that
    hint.  The template's own placeholders are the reference's tags 128-133,
    so a binding that maps them to themselves emits the reference's entries.
    """

    global_channel: str = attrs.field(validator=_non_empty)
    fragment_channel: str | None = None
    priority_tag: int | None = None
    fence_tag: int | None = None


@attrs.frozen(kw_only=True)
class SyncModel:
    """Everything the checker, timing model and exports need to know about a target's sync.

    Assumptions the hardware does not guarantee by ISA are fields, so a report
    can state them:

    * ``register_interlock``: a use of a loaded register waits for the load
      (the compiler inserts the wait), so a consumer never reads a half-loaded
      fragment without an explicit wait.
    * ``shared_in_order``: the shared memory services accesses in arrival order,
      so a read issued before a global->shared load is serviced before the
      load's data lands (no write-after-read hazard without a wait).
    * ``global_loads_write_shared``: global loads go straight to shared memory;
      when False they fill registers and a SHARED_STORE op writes them.

    ``hint_tags`` are tags that only steer the instruction scheduler (zero cost,
    never stall), ``hint_formats`` how their operands read; ``priority_tag`` is the hint whose ``wait_value`` sets the
    issuing group's priority in the timing model.  ``combined_wait`` names the
    instruction adjacent waits on different channels fold into ("" : none).
    """

    name: str = attrs.field(validator=_non_empty)
    channels: tuple[Channel, ...] = attrs.field(converter=_channels)
    effects: tuple[Effect, ...] = attrs.field(converter=_effects)
    barriers: tuple[BarrierKind, ...] = attrs.field(converter=_barriers)
    hint_tags: Mapping[int, str] = attrs.field(factory=dict)
    #: how a hint's operands read in labels, e.g. ``"mask={subtile}, count={wait_value}"``
    hint_formats: Mapping[int, str] = attrs.field(factory=dict)
    priority_tag: int | None = None
    register_interlock: bool = True
    shared_in_order: bool = False
    global_loads_write_shared: bool = True
    combined_wait: str = ""
    notes: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    #: how the reference's block program names this target's channels and hints (None: the
    #: target does not compile through the block program, or uses the template's own tags)
    block_binding: BlockBinding | None = None
    #: each sync / hint tag as the machine instruction it lowers to, a format string over the
    #: op's ``wait_value`` and ``subtile`` (``"cp.async.wait_group {wait_value}"``); a tag left
    #: out prints by its tag name (docs/guide/target-plugin.md, "ISA names")
    isa_forms: Mapping[int, str] = attrs.field(factory=dict)
    #: the tags of the actions the agents lowering injects that are no channel's wait or
    #: commit: "arrive" and "expect_tx" (phase channels), "fence" (before an async group);
    #: docs/guide/agents.md, "Steps"
    agent_tags: Mapping[str, int] = attrs.field(factory=dict)
    #: the named barriers the target has (None: none; an agents schedule that orders consumer
    #: groups is refused); docs/guide/agents.md, "Named barriers"
    named_barriers: NamedBarriers | None = None
    #: how CTAs reduce partial results through global memory (None: the target has no such
    #: hand-off, and a schedule that declares one is refused); docs/guide/agents.md, "Cross-CTA
    #: reductions"
    reduction: CrossCtaReduction | None = None
    #: how results go from shared to global memory by the async proxy (None: the target has no
    #: such store, and a schedule that declares one is refused); docs/guide/agents.md, "Bulk
    #: stores"
    bulk_store: BulkStoreChannel | None = None
    #: how the CTAs of a cluster signal each other (None: no clusters; a schedule that declares
    #: one is refused); docs/guide/agents.md, "Clusters"
    cluster: ClusterSync | None = None

    def __attrs_post_init__(self) -> None:
        names = [c.name for c in self.channels]
        if len(set(names)) != len(names):
            raise ValueError(f"SyncModel {self.name}: channel names repeat: {names}")
        for e in self.effects:
            if e.counter is not None and e.counter not in names:
                raise ValueError(f"SyncModel {self.name}: effect of {e.role.name} names channel "
                                 f"{e.counter!r}; declared channels: {', '.join(names)}")
        if not self.barriers:
            raise ValueError(f"SyncModel {self.name}: declares no barrier kind")
        for where, tag in self._own_tags():
            if tag <= MAX_KERNEL_TAG or tag >= FrameworkTag.NONE:
                raise ValueError(
                    f"SyncModel {self.name}: {where} is {tag}, but tags 0-{MAX_KERNEL_TAG} are "
                    f"the kernel's ops (its cost model's) and {int(FrameworkTag.NONE)} marks an "
                    f"absent op: give it a tag in [{MAX_KERNEL_TAG + 1}, "
                    f"{int(FrameworkTag.NONE) - 1}] (docs/guide/target-plugin.md, \"Tag numbering\")")
        for tag, form in self.isa_forms.items():
            try:
                form.format(wait_value=0, subtile=0)
            except (KeyError, IndexError, ValueError, AttributeError) as exc:
                raise ValueError(f"SyncModel {self.name}: isa_forms[{tag}] {form!r} is not a format "
                                 f"over wait_value and subtile ({exc})") from None
        bb = self.block_binding
        if bb is not None:
            for which in ("global_channel", "fragment_channel"):
                chosen = getattr(bb, which)
                if chosen is not None and chosen not in names:
                    raise ValueError(f"SyncModel {self.name}: block_binding.{which} names channel "
                                     f"{chosen!r}; declared channels: {', '.join(names)}")

    def _own_tags(self) -> list[tuple[str, int]]:
        """(field, tag) of every sync, barrier and hint tag the model declares: the ops the
        lowerings insert, never a kernel op (a kernel tag here would be mistaken for one)."""
        tags = [(f"channels[{i}].wait_tag", c.wait_tag) for i, c in enumerate(self.channels)]
        tags += [(f"channels[{i}].commit_tag", c.commit_tag) for i, c in enumerate(self.channels)
                 if c.commit_tag is not None]
        tags += [(f"barriers[{i}].tag", b.tag) for i, b in enumerate(self.barriers)]
        tags += [(f"hint_tags key {t}", t) for t in self.hint_tags]
        tags += [(f"agent_tags[{a!r}]", t) for a, t in self.agent_tags.items()]
        if self.priority_tag is not None:
            tags.append(("priority_tag", self.priority_tag))
        if self.reduction is not None:
            tags += [(f"reduction.tags[{k!r}]", t) for k, t in self.reduction.tags.items()]
        if self.bulk_store is not None:
            tags += [(f"bulk_store.tags[{k!r}]", t) for k, t in self.bulk_store.tags.items()]
        return tags

    def channel(self, name: str) -> Channel:
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(name)

    def channel_for_wait(self, tag: int) -> Channel | None:
        for c in self.channels:
            if c.wait_tag == tag:
                return c
        return None

    @property
    def barrier(self) -> BarrierKind:
        """The workgroup-wide barrier (the first declared kind)."""
        return self.barriers[0]

    @property
    def tells_proxies_apart(self) -> bool:
        """Its effects name more than one memory proxy (``Effect.proxy``): a read across them
        needs a proxy fence, which the lowering places and the proof checks."""
        return len({e.proxy for e in self.effects} - {""}) > 1

    @property
    def device_written_maps(self) -> bool:
        """A copy of it reads tensor maps a kernel wrote on the device (``Effect.descriptor``):
        its issuer acquires them, which the lowering places and the proof checks."""
        return any(e.descriptor for e in self.effects)

    @property
    def wait_tags(self) -> tuple[int, ...]:
        return tuple(c.wait_tag for c in self.channels)

    def tag_names(self) -> dict[int, str]:
        """Names of the tags this model owns (waits, barriers, hints), for output: upper-case
        identifiers, as the framework's tags are (a barrier's instruction name ``barrier.sync``
        is the tag ``BARRIER_SYNC``)."""
        names = {c.wait_tag: c.wait_name for c in self.channels}
        names.update({c.commit_tag: f"COMMIT_{c.name.upper()}" for c in self.channels
                      if c.commit_tag is not None})
        names.update({b.tag: b.name.upper().replace(".", "_") for b in self.barriers})
        names.update(self.hint_tags)
        names.update({tag: action.upper() for action, tag in self.agent_tags.items()})
        if self.named_barriers is not None:
            names[self.named_barriers.sync_tag] = "NAMED_SYNC"
            names[self.named_barriers.arrive_tag] = "NAMED_ARRIVE"
        if self.bulk_store is not None:
            names.update({tag: step.upper() for step, tag in self.bulk_store.tags.items()})
        if self.reduction is not None:
            names.update({tag: step.upper() for step, tag in self.reduction.tags.items()})
        return names

    def isa_text(self, tag: int, *, wait_value: int = 0, subtile: int = 0) -> str | None:
        """``tag`` with its operands as the target's instruction, or None when none is declared."""
        form = self.isa_forms.get(tag)
        if form is None:
            return None
        return form.format(wait_value=wait_value, subtile=subtile)

    def bind(self, config: Any = None, schedule_config: Any = None) -> "BoundSync":
        """Resolve every effect's ticks against one compiled schedule's config records or dicts."""
        sources = {"config": config, "schedule_config": schedule_config}
        notes: list[str] = []
        noted: set[tuple[str, ...]] = set()
        effects = []
        for e in self.effects:
            ticks = e.ticks
            if e.ticks_from:
                found = [v for v in (_read(sources, key) for key in e.ticks_from) if v > 0]
                if found:
                    ticks = found[0]
                elif e.ticks_from not in noted:
                    noted.add(e.ticks_from)
                    keys = " and ".join(e.ticks_from)
                    verb = "is" if len(e.ticks_from) == 1 else "are"
                    where = f" on channel {e.channel}" if e.channel >= 0 else ""
                    unit = "op" if e.ticks == 1 else "ops"
                    notes.append(f"{keys} {verb} 0; assumed {e.ticks} {e.counter} {unit} per "
                                 f"{e.role.name.lower().replace('_', ' ')}{where}")
            effects.append(attrs.evolve(e, ticks=ticks, ticks_from=()))
        return BoundSync(model=self, effects=tuple(effects), notes=tuple(notes) + self.notes)


def _read(sources: Mapping[str, Any], dotted: str) -> int:
    """An int field named ``record.field`` from a config record or its document dict (0: absent)."""
    head, _, field = dotted.partition(".")
    record = sources.get(head)
    if record is None:
        return 0
    value = record.get(field, 0) if isinstance(record, Mapping) else getattr(record, field, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@attrs.frozen(kw_only=True)
class BoundSync:
    """A :class:`SyncModel` with the tick counts of one compiled schedule resolved."""

    model: SyncModel
    effects: tuple[Effect, ...]
    notes: tuple[str, ...] = ()

    def effect(self, role: int, channel: int) -> Effect | None:
        """How an op of ``role`` on operand ``channel`` is counted (None: no effect declared)."""
        fallback = None
        for e in self.effects:
            if e.role == role and e.channel == channel:
                return e
            if e.role == role and e.channel == -1 and fallback is None:
                fallback = e
        return fallback
