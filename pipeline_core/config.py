"""Configuration records: what the pipeline looks like and how to schedule it.

``PipelineConfig`` describes the loop shape (depth, MMA grid, partitions,
per-channel counter costs); ``ScheduleConfig`` holds the scheduling and wait
knobs.  Every field is validated on construction and carries a one-line
``help`` in its metadata (shown by ``pipeline-core schedules``/``targets``).
"""
from __future__ import annotations

import enum
import functools
from typing import Any, Mapping

import attrs

from pipeline_core import limits
from pipeline_core.costs import CostModel
from pipeline_core.errors import ConfigError, UnknownNameError
from pipeline_core.limits import Bound, parse_int
from pipeline_core.ops import Op, OpRole
from pipeline_core.sync.model import SyncModel


def _int(lo: int | None = None, hi: int | None = None, what: str = ""):
    """Validator: an int (not bool) within [lo, hi]."""

    def check(inst, attribute, value):
        bad = isinstance(value, bool) or not isinstance(value, int)
        if not bad and lo is not None and value < lo:
            bad = True
        if not bad and hi is not None and value > hi:
            bad = True
        if bad:
            rng = (f">= {lo}" if hi is None else f"in [{lo}, {hi}]") if lo is not None else "any"
            raise ConfigError(type(inst).__name__, attribute.name, value,
                              what or f"an integer {rng}")
    return check


@attrs.frozen
class _Within:
    """Validator: a value inside ``bound`` (the bounds live in :mod:`pipeline_core.limits`).

    A record, not a closure, so ``pipeline-core knobs`` can show each field's range
    from the validator itself (one home for the bound).
    """

    bound: Bound

    def __call__(self, inst, attribute, value):
        if not self.bound.contains(value):
            raise ConfigError(type(inst).__name__, attribute.name, value, self.bound.allowed())


def _within(bound: Bound) -> _Within:
    return _Within(bound)


def field_bound(cls, name: str) -> Bound | None:
    """The range a field's validator enforces, if it is a :class:`Bound`."""
    validator = attrs.fields_dict(cls)[name].validator
    return validator.bound if isinstance(validator, _Within) else None


def _bool(inst, attribute, value):
    if not isinstance(value, bool):
        raise ConfigError(type(inst).__name__, attribute.name, value, "true or false")


def _help(text: str, *, races: bool = False) -> dict:
    """Field metadata: its help, and ``races`` when setting the knob is known to make the
    reference's output race (compile then refuses it unless --allow-unsafe;
    pipeline_core/proof.py)."""
    return {"help": text, "races": True} if races else {"help": text}


def field_help(cls, name: str) -> str:
    return attrs.fields_dict(cls)[name].metadata.get("help", "")


# --- small parts ------------------------------------------------------------

@attrs.frozen
class LoopCarried:
    """Which op crosses the iteration boundary; "loop-carried" means subtile == selector."""

    role: OpRole = attrs.field(default=OpRole.NONE, converter=OpRole,
                               metadata=_help("role re-added last by the single-buffer reorder"))
    selector: int = attrs.field(default=0, validator=_int(0),
                                metadata=_help("subtile value that marks an op loop-carried"))

    @classmethod
    def fragment_zero(cls) -> "LoopCarried":
        return cls(OpRole.FRAGMENT_LOAD, 0)

    @classmethod
    def none(cls) -> "LoopCarried":
        return cls(OpRole.NONE, 0)

    def is_loop_carried(self, op: Op) -> bool:
        return op.subtile == self.selector


@attrs.frozen
class BlockSizing:
    """Target op counts per MMA block and the cap on global loads per block."""

    heavy: int = attrs.field(default=4, validator=_int(0),
                             metadata=_help("ops in a block that starts a new M row"))
    light: int = attrs.field(default=2, validator=_int(0),
                             metadata=_help("ops in a block that continues an M row"))
    max_globals: int = attrs.field(default=0, validator=_int(0, 2),
                                   metadata=_help("global loads per block (0 = no cap; a block has 2 slots)"))

    @classmethod
    def default_2x2(cls) -> "BlockSizing":
        return cls(4, 2, 0)

    @classmethod
    def uniform(cls, n: int) -> "BlockSizing":
        return cls(n, n, 0)


@attrs.frozen
class FragOrder:
    """Emission order of A/B fragments inside a block."""

    b_before_a: bool = attrs.field(default=True, validator=_bool,
                                   metadata=_help("emit the B fragment before the A fragment"))

    @classmethod
    def b_first(cls) -> "FragOrder":
        return cls(True)

    @classmethod
    def a_first(cls) -> "FragOrder":
        return cls(False)


@attrs.frozen
class WarpStagger:
    """How many prologue entries warp group 0 runs before group 1 joins."""

    enabled: bool = attrs.field(default=False, validator=_bool, metadata=_help("stagger the warp groups"))
    compute_from_body: bool = attrs.field(default=False, validator=_bool,
                                          metadata=_help("count stage-0 prefetch loads of the body"))
    fixed_amount: int = attrs.field(default=0, validator=_int(0),
                                    metadata=_help("fixed stagger when not computed from the body"))

    @classmethod
    def none(cls) -> "WarpStagger":
        return cls(False, False, 0)

    @classmethod
    def auto(cls) -> "WarpStagger":
        return cls(True, True, 0)

    @classmethod
    def fixed(cls, n: int) -> "WarpStagger":
        return cls(True, False, n)


class SchedulingStrategy(enum.IntEnum):
    """The reference's built-in strategies (their numbers appear in JSON).

    Strategies are looked up by *name* in the strategy registry, so plugins can add
    more; these three are the built-ins.
    """

    IDENTITY = 0
    GREEDY = 1
    CSP = 2


def _strategy_name(value: Any) -> str:
    if isinstance(value, SchedulingStrategy):
        return value.name
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return SchedulingStrategy(value).name
        except ValueError:
            raise ConfigError("ScheduleConfig", "scheduling", value,
                              "a strategy name or one of 0 (IDENTITY), 1 (GREEDY), 2 (CSP)") from None
    if isinstance(value, str) and value.strip():
        return value.strip().upper()
    raise ConfigError("ScheduleConfig", "scheduling", value, "a non-empty strategy name")


NO_WAIT = int(limits.WAIT_VALUE.high)  #: a manual wait value >= this means "emit no wait"


@attrs.frozen
class ScheduleConfig:
    """Scheduling, barrier and wait knobs (defaults are the reference's)."""

    scheduling: str = attrs.field(default="IDENTITY", converter=_strategy_name,
                                  metadata=_help("ordering strategy by name: IDENTITY, GREEDY, CSP or a plugin's"))
    sched_barrier_mask: int = attrs.field(default=0b01010101, validator=_within(limits.BLOCK_MASK),
                                          metadata=_help("bit i: block i ends with a schedule_barrier after its post-MMA barrier"))
    auto_waits: bool = attrs.field(default=True, validator=_bool,
                                   metadata=_help("derive and patch the block-0 lgkm and last-block vm waits"))
    drain_lgkm_mask: int = attrs.field(default=0, validator=_within(limits.BLOCK_MASK),
                                       metadata=_help("bit i: block i emits wait_lgkm(0) between its frags and its globals"))
    auto_drain: bool = attrs.field(default=False, validator=_bool,
                                   metadata=_help("with auto_waits: replace drain_lgkm_mask by the cross-channel drain mask"))
    lds_contention_penalty: int = attrs.field(default=0, validator=_within(limits.CYCLES),
                                              metadata=_help("cost model: cycles each LDS/global op holds the LDS port"))
    wait_lgkm_first: int = attrs.field(default=8, validator=_within(limits.WAIT_VALUE),
                                       metadata=_help("manual lgkm wait at block 0 of each partition (>= 255: none)"))
    wait_vm_last: int = attrs.field(default=6, validator=_within(limits.WAIT_VALUE),
                                    metadata=_help("manual vm wait at the last block of each partition"))
    lgkm_per_load_a: int = attrs.field(default=0, validator=_within(limits.COUNTER_TICKS),
                                       metadata=_help("fragment-channel ticks per channel-A load (fallback when the pipeline config has 0)"))
    lgkm_per_load_b: int = attrs.field(default=0, validator=_within(limits.COUNTER_TICKS),
                                       metadata=_help("fragment-channel ticks per channel-B load (fallback when the pipeline config has 0)"))
    lgkm_after_last: bool = attrs.field(default=False, validator=_bool,
                                        metadata=_help("the last block keeps its post-barrier wait_lgkm(0)"))
    minimal_barriers: bool = attrs.field(default=False, validator=_bool,
                                         metadata=_help("drop per-block barriers and set_prio pairs (4-wave style)", races=True))
    omit_mma_set_prio: bool = attrs.field(default=False, validator=_bool,
                                          metadata=_help("with minimal_barriers: drop the pre-MMA set_prio(1) too", races=True))
    max_vgpr: int = attrs.field(default=int(limits.VGPR_BUDGET.high), validator=_within(limits.VGPR_BUDGET),
                                metadata=_help("VGPR budget of the search strategies (999999 = unlimited)"))
    global_before_frag: bool = attrs.field(default=False, validator=_bool,
                                           metadata=_help("inside a block, emit global loads before fragment loads", races=True))
    barrier_before_pre_ops: bool = attrs.field(default=False, validator=_bool,
                                               metadata=_help("put the sync section before the load section", races=True))
    inter_block_lgkm_drain: bool = attrs.field(default=False, validator=_bool,
                                               metadata=_help("blocks without another wait get an entry wait_lgkm(0)"))
    partial_prologue_drain: bool = attrs.field(default=False, validator=_bool,
                                               metadata=_help("prologue skips full vm drains; bootstrap frags get partial drains", races=True))
    wrap_waits_with_sched_barrier: bool = attrs.field(default=False, validator=_bool,
                                                      metadata=_help("fence every wait/barrier group with schedule_barriers"))
    search_time_limit_ms: int = attrs.field(default=10000, validator=_within(limits.SEARCH_TIME_MS),
                                            metadata=_help("budget of search strategies; the best order found so far is "
                                                           "used when it runs out (0 = no limit; not in the reference)"))
    search_node_limit: int = attrs.field(default=0, validator=_within(limits.SEARCH_NODES),
                                         metadata=_help("node budget of the CSP and EXACT searches (0 = no limit): "
                                                        "unlike the seconds budget it cuts the search at the same "
                                                        "point on every machine (not in the reference)"))

    @property
    def scheduling_value(self) -> int | None:
        """The reference's enum number for built-in strategies, else None."""
        try:
            return int(SchedulingStrategy[self.scheduling])
        except KeyError:
            return None

    def evolve(self, **changes) -> "ScheduleConfig":
        return attrs.evolve(self, **changes)

    def groups(self) -> dict[str, dict[str, Any]]:
        """The knobs by job (:data:`SCHEDULE_KNOB_GROUPS`); the document keeps them flat."""
        return {group: {name: getattr(self, name) for name in names}
                for group, names in SCHEDULE_KNOB_GROUPS.items()}


#: ScheduleConfig's knobs by job.  The fields stay flat (they are the document's
#: ``schedule_config`` keys and the ``-c key=value`` names); this is how code and
#: help group them.  ``test_config`` checks every field is in exactly one group.
SCHEDULE_KNOB_GROUPS: dict[str, tuple[str, ...]] = {
    "ordering": ("scheduling", "lds_contention_penalty", "max_vgpr", "search_time_limit_ms",
                 "search_node_limit"),
    "waits": ("auto_waits", "wait_lgkm_first", "wait_vm_last", "lgkm_per_load_a",
              "lgkm_per_load_b", "drain_lgkm_mask", "auto_drain", "lgkm_after_last",
              "inter_block_lgkm_drain", "partial_prologue_drain"),
    "block_template": ("minimal_barriers", "global_before_frag", "barrier_before_pre_ops"),
    "hints": ("sched_barrier_mask", "omit_mma_set_prio", "wrap_waits_with_sched_barrier"),
}

#: The blocks lowering's own knobs: every ScheduleConfig group but "ordering" (the block
#: template's waits, its shape and its hints).  The ring and agents lowerings read none of
#: them: their waits come from the target's sync model (``-c`` on them is refused,
#: ``LoweringRecord.knobless``, pipeline_core/lowering/; their documents leave them out).
BLOCK_SCHEDULE_KNOBS: tuple[str, ...] = tuple(
    name for group, names in SCHEDULE_KNOB_GROUPS.items() if group != "ordering" for name in names)
#: The PipelineConfig fields only the blocks lowering reads: the counter ticks one load adds
#: on the block template's two channels.  A ring or agents target counts through its sync
#: model, so these are neither checked nor written for it (docs/document-format.md).
BLOCK_PIPELINE_FIELDS: tuple[str, ...] = ("vm_per_load_a", "vm_per_load_b", "lgkm_per_load_a",
                                          "lgkm_per_load_b")


def _match_field(inst, attribute, value):
    if isinstance(value, bool) or value not in (0, 1):
        raise ConfigError(type(inst).__name__, attribute.name, value,
                          "0 (MMA stage, i.e. row) or 1 (MMA subtile, i.e. column)")


@attrs.frozen
class Derived:
    """Formula-only counts derived from the MMA grid (never from a body)."""

    mmas_per_partition: int
    globals_per_partition: int
    frags_per_partition: int
    ops_per_partition: int
    total_ops: int
    blocks_per_partition: int
    total_blocks: int
    total_edges: int


@attrs.frozen
class PipelineConfig:
    """The loop's shape: buffering depth, MMA grid, partitions and counter costs."""

    depth: int = attrs.field(default=2, validator=_int(1, 8),
                             metadata=_help("1 = single-buffer (recipes), >= 2 = double-buffer (block program)"))
    prefetch: int = attrs.field(default=1, validator=_int(0), metadata=_help("iterations ahead for DRAM loads (informational)"))
    drain_passes: int = attrs.field(default=2, validator=_int(0), metadata=_help("epilogue drain iterations (informational)"))
    prologue_fill: int = attrs.field(default=1, validator=_int(0), metadata=_help("extra prologue load iterations (informational)"))
    loop_carried: LoopCarried = attrs.field(factory=LoopCarried.none, metadata=_help("which op crosses the iteration boundary"))
    block_sizing: BlockSizing = attrs.field(factory=BlockSizing.default_2x2, metadata=_help("ops per MMA block, globals cap"))
    frag_order: FragOrder = attrs.field(factory=FragOrder.b_first, metadata=_help("A/B fragment order in a block"))
    m_mmas: int = attrs.field(default=2, validator=_int(1, 64), metadata=_help("MMA rows per partition"))
    n_mmas: int = attrs.field(default=2, validator=_int(1, 64), metadata=_help("MMA columns per partition"))
    num_partitions: int = attrs.field(default=2, validator=_int(1, 16),
                                      metadata=_help("halves / warp groups / K-partitions of the body"))
    mma_serial: bool = attrs.field(default=True, validator=_bool, metadata=_help("MMAs share one unit (informational)"))
    mma_latency: int = attrs.field(default=16, validator=_int(0), metadata=_help("MMA cycles (informational)"))
    vm_per_load_a: int = attrs.field(default=4, validator=_int(0), metadata=_help("global-channel ticks per channel-A global load"))
    vm_per_load_b: int = attrs.field(default=4, validator=_int(0), metadata=_help("global-channel ticks per channel-B global load"))
    lgkm_per_load_a: int = attrs.field(default=0, validator=_int(0),
                                       metadata=_help("fragment-channel ticks per channel-A load (0: use ScheduleConfig)"))
    lgkm_per_load_b: int = attrs.field(default=0, validator=_int(0),
                                       metadata=_help("fragment-channel ticks per channel-B load (0: use ScheduleConfig)"))
    ch0_match_field: int = attrs.field(default=0, validator=_match_field,
                                       metadata=_help("MMA field an A fragment's subtile matches (0 row, 1 col)"))
    ch1_match_field: int = attrs.field(default=1, validator=_match_field,
                                       metadata=_help("MMA field a B fragment's subtile matches (0 row, 1 col)"))
    warp_stagger: WarpStagger = attrs.field(factory=WarpStagger.auto, metadata=_help("warp-group stagger rule"))
    cross_stage_rotation: bool = attrs.field(default=False, validator=_bool,
                                             metadata=_help("frags may read the other partition's stage (skips two checks)"))

    @loop_carried.validator
    def _lc(self, attribute, value):
        if not isinstance(value, LoopCarried):
            raise ConfigError("PipelineConfig", "loop_carried", value, "a LoopCarried record")

    @block_sizing.validator
    def _bs(self, attribute, value):
        if not isinstance(value, BlockSizing):
            raise ConfigError("PipelineConfig", "block_sizing", value, "a BlockSizing record")

    @frag_order.validator
    def _fo(self, attribute, value):
        if not isinstance(value, FragOrder):
            raise ConfigError("PipelineConfig", "frag_order", value, "a FragOrder record")

    @warp_stagger.validator
    def _ws(self, attribute, value):
        if not isinstance(value, WarpStagger):
            raise ConfigError("PipelineConfig", "warp_stagger", value, "a WarpStagger record")

    @classmethod
    def ping_pong_double_buffer(cls, *, mma_latency: int, vm_per_load_a: int = 1,
                                vm_per_load_b: int = 1, max_globals: int = 1) -> "PipelineConfig":
        """The loop of the ping-pong family (``schedule.PING_PONG``), the one home of its shape:
        2 shared-memory stages, 2 partitions of a 2x2 MMA quadrant grid run by two staggered
        warp groups (stagger derived from the body), B fragments first, no loop-carried op,
        each A fragment matched to its MMA row and each B fragment to its column.  A target of
        the family says only what its machine sets: its MMA latency, the global-channel ticks
        one LOAD op counts (one cp.async group: 1; a target whose load op issues several
        transfers: their count) and the global loads one MMA block may carry."""
        return cls(
            depth=2, prefetch=1, drain_passes=2, prologue_fill=1, loop_carried=LoopCarried.none(),
            block_sizing=BlockSizing(4, 2, max_globals), frag_order=FragOrder.b_first(),
            m_mmas=2, n_mmas=2, num_partitions=2, mma_serial=True, mma_latency=mma_latency,
            vm_per_load_a=vm_per_load_a, vm_per_load_b=vm_per_load_b,
            lgkm_per_load_a=0, lgkm_per_load_b=0,
            ch0_match_field=0,  # A fragment subtile <-> MMA row (the op's stage field)
            ch1_match_field=1,  # B fragment subtile <-> MMA column (the op's subtile field)
            warp_stagger=WarpStagger.auto(), cross_stage_rotation=False)

    # --- derived helpers (formula-only, as the reference) --------------------
    @property
    def is_double_buffer(self) -> bool:
        return self.depth >= 2

    @property
    def mmas_per_partition(self) -> int:
        return self.m_mmas * self.n_mmas

    @property
    def globals_per_partition(self) -> int:
        return self.m_mmas + self.n_mmas

    @property
    def frags_per_partition(self) -> int:
        return self.m_mmas + self.n_mmas

    @property
    def ops_per_partition(self) -> int:
        return self.mmas_per_partition + self.globals_per_partition + self.frags_per_partition

    @property
    def total_ops(self) -> int:
        return self.num_partitions * self.ops_per_partition

    @property
    def blocks_per_partition(self) -> int:
        return self.m_mmas * self.n_mmas

    @property
    def total_blocks(self) -> int:
        return self.num_partitions * self.blocks_per_partition

    def total_edges(self) -> int:
        h, m, n = self.num_partitions, self.m_mmas, self.n_mmas
        g = m + n
        return h * 2 * m * n + 2 * m * n + h * g * 2 + (2 * g - 1) * 2

    def derived(self) -> Derived:
        return Derived(self.mmas_per_partition, self.globals_per_partition,
                       self.frags_per_partition, self.ops_per_partition, self.total_ops,
                       self.blocks_per_partition, self.total_blocks, self.total_edges())

    def compute_match_key(self, mma: Op, channel: int) -> int:
        """The MMA field (row or column) a fragment of ``channel`` is matched against."""
        fld = self.ch0_match_field if channel == 0 else self.ch1_match_field
        return mma.stage if fld == 0 else mma.subtile

    def vm_per_channel(self, channel: int) -> int:
        return self.vm_per_load_a if channel == 0 else self.vm_per_load_b

    def lgkm_per_channel(self, channel: int) -> int:
        return self.lgkm_per_load_a if channel == 0 else self.lgkm_per_load_b

    def evolve(self, **changes) -> "PipelineConfig":
        """A copy with ``changes``; a field of a nested record may be named alone
        (``evolve(max_globals=1)`` sets ``block_sizing.max_globals``: the names are unique,
        ``pipeline_field_path``), so a schedule's ``config()`` changes its block sizing in
        one call (docs/guide/concepts.md, "Block sizing").  An unknown name is a ConfigError
        naming the fields."""
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            path = pipeline_field_path(key)
            if path is None:
                raise UnknownNameError("PipelineConfig.evolve() field", key,
                                       sorted(_pipeline_paths()))
            if len(path) == 1:
                top[key] = value
            else:
                nested.setdefault(path[0], {})[path[1]] = value
        for record, fields in nested.items():
            if record in top:
                raise ConfigError("PipelineConfig.evolve()", record, top[record],
                                  f"either {record}= or its fields ({', '.join(fields)}), not both")
            top[record] = attrs.evolve(getattr(self, record), **fields)
        return attrs.evolve(self, **top)


@functools.cache
def _pipeline_paths() -> dict[str, tuple[str, ...]]:
    """Every PipelineConfig field by name, and each field of its nested records by its own
    name (``max_globals`` -> ``("block_sizing", "max_globals")``)."""
    paths: dict[str, tuple[str, ...]] = {}
    for f in attrs.fields(PipelineConfig):
        paths[f.name] = (f.name,)
        factory = getattr(f.default, "factory", None)  # the nested records have a factory
        if callable(factory) and attrs.has(type(factory())):
            for inner in attrs.fields(type(factory())):
                paths.setdefault(inner.name, (f.name, inner.name))
    return paths


def pipeline_field_path(name: str) -> tuple[str, ...] | None:
    """Where ``name`` lives in a PipelineConfig: ``(name,)``, ``(record, name)`` for a field of
    a nested record, None when it is neither."""
    return _pipeline_paths().get(name)


def pipeline_field_value(config: PipelineConfig, path: tuple[str, ...]) -> Any:
    value: Any = config
    for part in path:
        value = getattr(value, part)
    return value


@attrs.frozen
class TargetProfile:
    """A target: its cost model, the pipeline config schedules start from, and its machine facts.

    ``sync`` declares what the target's waits count and what its barriers do
    (:class:`pipeline_core.sync.SyncModel`); without one the hazard checker
    and the timing model refuse the target rather than guess.  ``clock_ghz``
    converts cycles to real time in reports (None: cycles only).
    """

    cost_model: CostModel
    pipeline: PipelineConfig
    sync: SyncModel | None = attrs.field(default=None, kw_only=True)
    clock_ghz: float | None = attrs.field(default=None, kw_only=True)
    #: warps that run one group's stream (a schedule's ``warps_per_group()`` wins); None: 1, or
    #: 2 when the sync model has a per-thread channel (``execution.fewest_agents``)
    warps_per_group: int | None = attrs.field(default=None, kw_only=True)
    #: vector registers one wave (warp) may hold; ``analyze`` reports a body whose modelled
    #: peak (the cost model's ``vgpr_def`` / ``vgpr_kill``) exceeds it as a problem and exits 1
    #: (docs/guide/cli.md, "analyze").  None: no budget declared, nothing checked
    register_budget: int | None = attrs.field(default=None, kw_only=True)
    #: one SM for the agents timing model (pipeline_core.agents.timing.AgentMachine); None: a
    #: warp-specialized schedule on this target has no timing figure
    agent_machine: Any = attrs.field(default=None, kw_only=True)
    #: the architecture the target's kernels are built for ("sm_80", "sm_90a"): an emitter that
    #: serves a capability (``EmitterRecord.requires``) writes its kernel for it; "": none
    arch: str = attrs.field(default="", kw_only=True, validator=attrs.validators.instance_of(str))
    #: bytes of shared memory one CTA may use on the machine (its opt-in limit: the H100's
    #: 227 KB, the A100's 163 KB): a schedule that sizes its buffers by the target (a ring of
    #: ``-T stages``) checks them against it, so a target with less refuses what the machine
    #: cannot launch.  None: not declared (the schedule keeps the limit of the machine it was
    #: written for)
    smem_per_cta: int | None = attrs.field(default=None, kw_only=True)

    @sync.validator
    def _sync(self, attribute, value):
        if value is not None and not isinstance(value, SyncModel):
            raise ConfigError("TargetProfile", "sync", type(value).__name__, "a SyncModel or None")

    @smem_per_cta.validator
    def _smem_per_cta(self, attribute, value):
        if value is not None and (type(value) is not int or value <= 0):
            raise ConfigError("TargetProfile", "smem_per_cta", value,
                              "None or a positive number of bytes (the opt-in limit of one CTA)")


# --- string overrides (-c / -T style) -----------------------------------------

def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (use true or false)")


def value_text(value: Any) -> str:
    """A value as the user types it after ``-c KEY=`` or ``-p KEY=`` (``true``, not ``True``):
    what :func:`parse_bool` and :func:`apply_overrides` read back."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def apply_overrides(record, overrides: Mapping[str, str], *, what: str = "", flag: str = ""):
    """A copy of ``record`` with fields set from strings (``-c key=value``).

    Unknown keys, unparsable values and values outside a field's bound raise
    ConfigError / UnknownNameError naming the key (with ``flag``, as the user
    typed it), the value and what is allowed.
    """
    if not overrides:
        return record
    cls = type(record)
    fields = attrs.fields_dict(cls)
    changes: dict[str, Any] = {}
    label = what or cls.__name__
    for key, text in overrides.items():
        if key not in fields:
            raise UnknownNameError(f"{label} field", key, sorted(fields))
        current = getattr(record, key)
        try:
            if isinstance(current, bool):
                value: Any = parse_bool(text)
            elif isinstance(current, int):
                value = parse_int(text)
            elif isinstance(current, str):
                value = text
            else:
                raise ValueError(f"{key} is a nested record and cannot be set from the command line")
        except ValueError as exc:
            raise ConfigError(label, key, text, str(exc), flag=flag) from None
        try:  # each field's own validator (bounds included), reported against this key
            attrs.evolve(record, **{key: value})
        except ConfigError as exc:
            raise ConfigError(label, key, text, exc.allowed, flag=flag) from None
        changes[key] = value
    return attrs.evolve(record, **changes)
