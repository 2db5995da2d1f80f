"""Enums and the op record: the vocabulary every other module speaks.

Enum values equal the reference's numbers because they appear in the JSON
contract (docs/document-format.md). ``Op`` is the reference's 13-field op description.
"""
from __future__ import annotations

import enum
from typing import Any, Mapping, TypeVar

import attrs

from pipeline_core.errors import ConfigError


class ResourceKind(enum.IntEnum):
    """Hardware unit an op occupies."""

    GLOBAL_MEM = 0  #: global memory -> shared memory (the target's sync model says what counts it)
    LDS = 1  #: shared-memory reads and writes (counted as the target's sync model declares)
    MMA_UNIT = 2  #: matrix core
    SCALAR = 3  #: barriers, waits, priorities, fences
    VALU = 4  #: vector ALU, independent of the MMA unit
    NONE = 255


class OpRole(enum.IntEnum):
    """What an op does in the pipeline (drives edges, blocks and phases)."""

    GLOBAL_LOAD = 0
    SHARED_STORE = 1
    FRAGMENT_LOAD = 2
    COMPUTE = 3
    SYNC = 4
    FENCE = 5
    VALU_COMPUTE = 6
    NONE = 255


class KOffset(enum.IntEnum):
    """K offset of a load relative to the loop variable, in multiples of BK."""

    K0 = 0
    K1 = 1
    K_NEXT = 2
    K_PREV = 3
    NONE = 255

    @property
    def signed_bk_multiple(self) -> int:
        """-1 for K_PREV, the raw value otherwise (what kernels add to k_base)."""
        return -1 if self is KOffset.K_PREV else int(self)


class Phase(enum.IntEnum):
    PROLOGUE = 0
    KERNEL = 1
    EPILOGUE = 2


class DepKind(enum.IntEnum):
    FLOW = 0  #: read after write
    ANTI = 1  #: write after read
    OUTPUT = 2  #: write after write (never derived by the built-in rules)


class FrameworkTag(enum.IntEnum):
    """Tags of the infrastructure ops the block template emits (kernel tags are 0-127).

    The values are the reference's (its documents use them).  They are the
    template's placeholders: a target's ``SyncModel.block_binding`` maps the
    barrier, the two wait kinds and the two hints to its own tags, and a target
    whose sync model keeps them (the AMD plugin) emits them unchanged.
    """

    BARRIER = 128
    WAIT_VM = 129
    WAIT_LGKM = 130
    SET_PRIO = 131
    SCHEDULE_BARRIER = 132
    SCHED_GROUP_BARRIER = 133
    NONE = 255


#: Highest tag a kernel may use for its own data ops.
MAX_KERNEL_TAG = 127


def _int_field(lo: int, hi: int):
    def check(inst, attribute, value):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(type(inst).__name__, attribute.name, value,
                              f"an integer in [{lo}, {hi}]")
    return check


_E = TypeVar("_E", bound=enum.IntEnum)


def _enum_value(enum_cls: type[_E], value: Any) -> _E:
    try:
        return enum_cls(value)
    except ValueError:
        raise ConfigError("Op", enum_cls.__name__, value,
                          f"one of {', '.join(f'{m.name}={m.value}' for m in enum_cls)}") from None


# One named converter per enum field (mypy's attrs support types named converters only).
def _k_offset(value: Any) -> KOffset:
    return _enum_value(KOffset, value)


def _resource(value: Any) -> ResourceKind:
    return _enum_value(ResourceKind, value)


def _role(value: Any) -> OpRole:
    return _enum_value(OpRole, value)


def _reads(value: Any) -> tuple[int, ...] | None:
    """A compute op's operand channels: None (the default pair), or distinct channels >= 0."""
    if value is None:
        return None
    try:
        reads = tuple(value)
    except TypeError:
        raise ConfigError("Op", "reads", value, "a tuple of operand channels, e.g. (0,)") from None
    if (not reads or len(set(reads)) != len(reads)
            or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in reads)):
        raise ConfigError("Op", "reads", value, "distinct operand channels >= 0, at least one, "
                                                "e.g. (0,) for a one-operand reduction")
    return reads


#: the fragments a compute op reads when it names none: an A and a B (an MMA)
DEFAULT_READS = (0, 1)


@attrs.frozen
class Op:
    """One op of a loop body or schedule (the reference's 13-field OpDesc, and ``reads``).

    For MMAs ``stage`` is the M row and ``subtile`` the N column; for
    SCHED_GROUP_BARRIER ``subtile`` is the mask and ``wait_value`` the count.
    ``reads`` names the operand channels a compute op reads fragments of (None: an A and a
    B, ``DEFAULT_READS``): ``(0,)`` for a one-operand step (a row reduction, an
    elementwise or softmax-like step), three channels for a fused multiply-add chain.  The
    fragment of channel c it reads is the one loaded with c's match field (``stage`` for the
    first channel, ``subtile`` for the others: ``PipelineConfig.compute_match_key``).
    """

    tag: int = attrs.field(converter=lambda t: int(t) if isinstance(t, enum.IntEnum) else t,
                           validator=_int_field(0, 255))
    stage: int = attrs.field(default=0, validator=_int_field(-(2**31), 2**31))
    subtile: int = attrs.field(default=0, validator=_int_field(-(2**31), 2**31))
    k_offset: KOffset = attrs.field(default=KOffset.NONE, converter=_k_offset)
    vm_cost: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    lgkm_cost: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    wait_value: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    resource: ResourceKind = attrs.field(default=ResourceKind.NONE,
                                         converter=_resource)
    latency: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    role: OpRole = attrs.field(default=OpRole.NONE, converter=_role)
    channel: int = attrs.field(default=-1, validator=_int_field(-1, 2**31))
    vgpr_def: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    vgpr_kill: int = attrs.field(default=0, validator=_int_field(0, 2**31))
    reads: tuple[int, ...] | None = attrs.field(default=None, converter=_reads)

    @property
    def operand_channels(self) -> tuple[int, ...]:
        """The operand channels a compute op reads fragments of (its ``reads``, or an A and a
        B); every reader of a compute's operands (edges, waits, the checker) asks this."""
        return self.reads if self.reads is not None else DEFAULT_READS

    @property
    def is_present(self) -> bool:
        return self.tag != FrameworkTag.NONE

    @property
    def is_prefetch(self) -> bool:
        """A present load for a future iteration (k_offset neither K_PREV nor NONE)."""
        return self.is_present and self.k_offset not in (KOffset.K_PREV, KOffset.NONE)

    def evolve(self, **changes) -> "Op":
        return attrs.evolve(self, **changes)


# --- factories -------------------------------------------------------------

def op(tag: int, resource: ResourceKind, latency: int, role: OpRole, *, channel: int = -1,
       stage: int = 0, subtile: int = 0, k_offset: KOffset = KOffset.NONE, vm_cost: int = 0,
       lgkm_cost: int = 0, wait_value: int = 0, vgpr_def: int = 0, vgpr_kill: int = 0) -> Op:
    """A fully described op (costs inline)."""
    return Op(tag=tag, stage=stage, subtile=subtile, k_offset=k_offset, vm_cost=vm_cost,
              lgkm_cost=lgkm_cost, wait_value=wait_value, resource=resource, latency=latency,
              role=role, channel=channel, vgpr_def=vgpr_def, vgpr_kill=vgpr_kill)


def logical(tag: int, *, channel: int = -1, stage: int = 0, subtile: int = 0,
            k_offset: KOffset = KOffset.NONE, reads: tuple[int, ...] | None = None) -> Op:
    """Buffer metadata only; resource, latency and role come later from a cost model.
    ``reads``: the operand channels a compute op reads (:attr:`Op.reads`; a load names its one
    channel with ``channel``)."""
    return Op(tag=tag, channel=channel, stage=stage, subtile=subtile, k_offset=k_offset,
              reads=reads)


#: The role of each block-template op (``FrameworkTag``): the barrier and the waits
#: synchronise, the hints only steer the instruction scheduler (zero cost, never stall).
_FRAMEWORK_ROLES = {FrameworkTag.BARRIER: OpRole.SYNC, FrameworkTag.WAIT_VM: OpRole.SYNC,
                    FrameworkTag.WAIT_LGKM: OpRole.SYNC, FrameworkTag.SET_PRIO: OpRole.FENCE,
                    FrameworkTag.SCHEDULE_BARRIER: OpRole.FENCE,
                    FrameworkTag.SCHED_GROUP_BARRIER: OpRole.FENCE}


def framework_op(tag: FrameworkTag, *, wait_value: int = 0, subtile: int = 0) -> Op:
    """The block template's op for ``tag`` (a wait's count, a priority or a hint's count in
    ``wait_value``, a hint's mask in ``subtile``), with its role and the scalar resource.

    The one constructor of these ops: the named helpers below call it, and a plugin builds them
    through it (``pipeline_core.plugin_api`` exports it; the template's tags are the reference's
    placeholders, so their helpers' names are no part of the target-neutral surface).
    """
    role = _FRAMEWORK_ROLES.get(FrameworkTag(tag))
    if role is None:
        raise ValueError(f"framework_op: {FrameworkTag(tag).name} is no block-template op")
    return Op(tag=tag, wait_value=wait_value, subtile=subtile, resource=ResourceKind.SCALAR,
              role=role)


def barrier() -> Op:
    return framework_op(FrameworkTag.BARRIER)


def wait_vm(count: int) -> Op:
    return framework_op(FrameworkTag.WAIT_VM, wait_value=count)


def wait_lgkm(count: int) -> Op:
    return framework_op(FrameworkTag.WAIT_LGKM, wait_value=count)


def set_prio(priority: int) -> Op:
    return framework_op(FrameworkTag.SET_PRIO, wait_value=priority)


def schedule_barrier() -> Op:
    return framework_op(FrameworkTag.SCHEDULE_BARRIER)


def sched_group_barrier(mask: int, count: int) -> Op:
    return framework_op(FrameworkTag.SCHED_GROUP_BARRIER, subtile=mask, wait_value=count)


def none_op() -> Op:
    """The absent-slot sentinel (tag 255)."""
    return Op(tag=FrameworkTag.NONE)


NONE_OP = none_op()


@attrs.frozen
class Entry:
    """One line of an emitted phase: what the kernel unrolls into code."""

    op: Op
    time_slot: int
    phase: Phase = attrs.field(converter=Phase)
    is_prefetch: bool = False


def entries(ops, phase: Phase, prefetch=None) -> tuple[Entry, ...]:
    """Number ``ops`` as consecutive entries of ``phase`` (prefetch flags optional)."""
    flags = prefetch if prefetch is not None else [False] * len(ops)
    return tuple(Entry(op=o, time_slot=i, phase=phase, is_prefetch=bool(f))
                 for i, (o, f) in enumerate(zip(ops, flags)))


def tag_name(tag: int, names: "Mapping[int, str] | None" = None) -> str:
    """Human name of a tag: framework names first, then the schedule's names."""
    try:
        return FrameworkTag(tag).name
    except ValueError:
        pass
    if names and tag in names:
        return names[tag]
    return f"OP{tag}"
