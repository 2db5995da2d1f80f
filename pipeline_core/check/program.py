"""Decode a schedule document (docs/document-format.md) into the checker's instruction lists.

The checker reads only the *emitted* entries (prologue, kernel, epilogue), the
warp-stagger index and a few config facts; it never looks at blocks, orders or
edges, so it judges what a kernel would actually run.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pipeline_core.check.counters import CounterModel
from pipeline_core.errors import ConfigError, PipelineError
from pipeline_core.execution import ExecutionModel
from pipeline_core.ops import MAX_KERNEL_TAG, FrameworkTag, KOffset, OpRole

PHASES = ("prologue", "kernel", "epilogue")
REQUIRED_OP_KEYS = ("tag", "role", "stage", "subtile", "k_offset", "channel", "wait_value")


class DocumentError(PipelineError, ValueError):
    """The input is not a schedule document the checker can read (names the bad path)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"schedule document: {path}: {problem}" if path
                         else f"schedule document: {problem}")


class Kind(enum.Enum):
    """What an entry does for the checker."""

    LOAD = "load"  #: global load (to LDS, or to staging registers in single buffer)
    STORE = "store"  #: registers -> LDS (single buffer)
    FRAG = "frag"  #: LDS -> fragment registers
    MMA = "mma"
    BARRIER = "barrier"
    WAIT = "wait"
    COMMIT = "commit"  #: closes the open group of a group channel (one tick for all its ops)
    NOP = "nop"  #: priorities, scheduling fences, hints: no effect on data or sync


@attrs.frozen
class Instr:
    """One emitted entry, decoded.  ``phase``/``index`` locate it in the document."""

    kind: Kind
    phase: str
    index: int
    tag: int
    name: str
    channel: int = -1
    stage: int = 0
    subtile: int = 0
    k_shift: int | None = None  #: signed BK multiple of a load; None = loads count tiles by ordinal
    counter: str | None = None  #: counter an async op adds to, or the counter a wait tests
    cost: int = 0  #: counter ops the op adds
    value: int = 0  #: wait count
    operands: tuple[tuple[int, int], ...] = ()  #: MMA: (channel, register index) read
    acc: tuple[int, ...] = ()  #: MMA: accumulator key
    isa: str = ""  #: the target's instruction for a sync entry (``cp.async.wait_group 2``)

    @property
    def site(self) -> str:
        return f"{self.phase}[{self.index}]" if self.index >= 0 else self.phase

    def describe(self) -> str:
        """The shared op notation (pipeline_core.export.notation): ``LOAD_A[A s0.1 K1]``,
        ``MMA[m0,n1]``, ``cp.async.wait_group 2`` (``WAIT_VM(6)`` without an ISA form)."""
        from pipeline_core.export.notation import k_text, label

        if self.isa:
            return self.isa
        if self.kind is Kind.WAIT:
            return f"{self.name}({self.value})"
        if self.kind in (Kind.BARRIER, Kind.NOP, Kind.COMMIT):
            return self.name
        role = {Kind.LOAD: OpRole.GLOBAL_LOAD, Kind.FRAG: OpRole.FRAGMENT_LOAD,
                Kind.STORE: OpRole.SHARED_STORE, Kind.MMA: OpRole.COMPUTE}[self.kind]
        k = k_text(self.k_shift, shift=True) if self.kind is Kind.LOAD else ""
        return label(self.name, role, channel=self.channel, stage=self.stage,
                     subtile=self.subtile, k=k, k_slices=len(self.operands) == 1)

    def with_value(self, value: int) -> "Instr":
        return attrs.evolve(self, value=value)

    def with_index(self, index: int) -> "Instr":
        return attrs.evolve(self, index=index)


@attrs.frozen
class CheckProgram:
    """Everything the executor runs: three entry lists plus how warps run them."""

    prologue: tuple[Instr, ...]
    kernel: tuple[Instr, ...]
    epilogue: tuple[Instr, ...]
    warp_stagger_index: int
    groups: int  #: warp groups executing the lists (ping-pong 2, others 1)
    single_buffer: bool
    slices: tuple[int, ...]  #: K slices per tile (single buffer: the frag subtiles; else (0,))
    accumulators: tuple[tuple[int, ...], ...]  #: accumulator keys the MMAs must fill
    model: CounterModel
    name: str = ""
    #: loads carry no K offset: the j-th load of a channel loads K tile j (the generic
    #: lowering's documents, ``"lowering": "ring"``)
    ordinal_tiles: bool = False

    def phase(self, name: str) -> tuple[Instr, ...]:
        return getattr(self, name)

    def replace_phase(self, name: str, instrs: Sequence[Instr]) -> "CheckProgram":
        """A copy with ``name``'s list replaced (entries re-indexed)."""
        fixed = tuple(i.with_index(n) for n, i in enumerate(instrs))
        changes: dict[str, Any] = {name: fixed}  # the field is named at run time
        return attrs.evolve(self, **changes)


def _need(d: Any, key: str, path: str) -> Any:
    if not isinstance(d, Mapping):
        raise DocumentError(path, f"expected an object, got {type(d).__name__}")
    if key not in d:
        raise DocumentError(path, f"missing key {key!r}")
    return d[key]


def _need_int(d: Any, key: str, path: str) -> int:
    v = _need(d, key, path)
    if isinstance(v, bool) or not isinstance(v, int):
        raise DocumentError(f"{path}.{key}" if path else key, f"expected an integer, got {v!r}")
    return v


def _entries(document: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    items = _need(document, name, "")
    if not isinstance(items, list):
        raise DocumentError(name, f"expected a list of entries, got {type(items).__name__}")
    ops = []
    for i, e in enumerate(items):
        op = _need(e, "op", f"{name}[{i}]")
        for key in REQUIRED_OP_KEYS:
            _need_int(op, key, f"{name}[{i}].op")
        ops.append(op)
    return ops


def _channel_by_tag(document: Mapping[str, Any], phases: dict[str, list]) -> dict[int, int]:
    """tag -> channel, learnt from every op that carries its channel.

    The reference drops the channel (-1) on prologue load entries; the same tag
    always means the same data path, so the body and kernel entries tell it.
    """
    seen: dict[int, set[int]] = {}
    body = document.get("body")
    sources = list(body) if isinstance(body, list) else []
    for ops in phases.values():
        sources.extend(ops)
    for op in sources:
        if isinstance(op, Mapping) and isinstance(op.get("channel"), int) and op["channel"] >= 0 \
                and op.get("role") in (int(OpRole.GLOBAL_LOAD), int(OpRole.SHARED_STORE),
                                       int(OpRole.FRAGMENT_LOAD)):
            seen.setdefault(op["tag"], set()).add(op["channel"])
    return {tag: next(iter(chs)) for tag, chs in seen.items() if len(chs) == 1}


def _tag_name(op: Mapping[str, Any]) -> str:
    name = op.get("tag_name")
    if isinstance(name, str) and name and name != "?":
        return name
    tag = op["tag"]
    try:
        return FrameworkTag(tag).name
    except ValueError:
        return f"TAG{tag}"


def _field(op: Mapping[str, Any], which: int) -> int:
    """MMA field named by a config match field: 0 = stage (row), 1 = subtile (column)."""
    return op["stage"] if which == 0 else op["subtile"]


def _reads(op: Mapping[str, Any], path: str) -> tuple[int, ...]:
    """A compute op's operand channels: its ``reads`` (ops.Op.reads), or an A and a B."""
    from pipeline_core.ops import DEFAULT_READS, Op

    if op.get("reads") is None:
        return DEFAULT_READS
    try:
        return Op(tag=0, reads=op["reads"]).operand_channels
    except ConfigError as exc:
        raise DocumentError(f"{path}.reads", str(exc)) from None


def check_shape(document: Any) -> tuple[dict[str, list], int, Mapping[str, Any], int]:
    """The top-level shape every checked document needs (phases, stagger, config depth).

    Run before the target's model is looked up, so a malformed document is
    reported as such rather than as a missing target.
    """
    if not isinstance(document, Mapping):
        raise DocumentError("", f"expected a JSON object, got {type(document).__name__}")
    _check_lowering(document)
    phases = {name: _entries(document, name) for name in PHASES}
    stagger = _need_int(document, "warp_stagger_index", "")
    config = _need(document, "config", "")
    depth = _need_int(config, "depth", "config")
    if depth < 1:
        raise DocumentError("config.depth", f"must be >= 1, got {depth}")
    _check_config_types(config, document.get("schedule_config"))
    _check_execution(document.get("execution"))
    _check_stagger(document, config, stagger, len(phases["prologue"]))
    return phases, stagger, config, depth


#: the ``lowering`` values with a reading of their own (docs/document-format.md, "Keys"):
#: absent or "blocks", the block program; "agents", an agents section proven by compile; any
#: other registered lowering's document is a lockstep plan counted through the sync model
BLOCK_PROGRAM, AGENTS = "blocks", "agents"
#: keys only the block program writes (the ring lowering's documents have none of them)
_BLOCK_PROGRAM_KEYS = ("blocks", "scheduler")


def _check_lowering(document: Mapping[str, Any]) -> None:
    """The ``lowering`` key says how to read the phases; refuse one that is unknown or that
    the document's other keys contradict, rather than prove the phases under the wrong
    reading (an agents document's empty phases are trivially SAFE as a block program)."""
    lowering = document.get("lowering")
    schedule = document.get("schedule")
    name = schedule if isinstance(schedule, str) and schedule else "SCHEDULE"
    if "lowering" in document and (not isinstance(lowering, str) or not lowering.strip()):
        raise DocumentError("lowering", "expected the name of the lowering that built the "
                                        "schedule (or no lowering key: the block program), got "
                                        f"{lowering!r}")
    if "agents" in document and lowering != AGENTS:
        has = f"its lowering is {lowering!r}" if "lowering" in document else "it has no lowering key"
        raise DocumentError("agents", f"only an agents document has an agents section, but {has}: "
                                      "an agents document is proven by "
                                      f"compile, not re-checked from its JSON: run `pipeline-core "
                                      f"check {name}` with the same --target, -p and -T "
                                      "(docs/guide/agents.md)")
    if lowering == AGENTS:
        missing = "" if "agents" in document else " (and this one lacks its agents section)"
        raise DocumentError("lowering", f"an agents document is proven by compile, not re-checked "
                                        f"from its JSON{missing}: run `pipeline-core check {name}` "
                                        "with the same --target, -p and -T (docs/guide/agents.md)")
    if counted_by_sync(document):
        config = document.get("config")
        found = [k for k in _BLOCK_PROGRAM_KEYS if k in document] + \
            [f"config.{k}" for k in _COUNT_FIELDS if isinstance(config, Mapping) and k in config]
        if found:
            raise DocumentError("lowering", f'"{lowering}" contradicts {found[0]}, which only a '
                                            "block-program document has: remove the lowering key "
                                            "for a block-program document, or recompile it")


def counted_by_sync(document: Mapping[str, Any]) -> bool:
    """A lockstep plan whose loads carry no K offset and whose counts come from the target's
    sync model: the document names a lowering other than the block program's and the agents'
    (the ring's, a plugin's)."""
    return document.get("lowering", BLOCK_PROGRAM) not in (BLOCK_PROGRAM, AGENTS)


def _check_stagger(document: Mapping[str, Any], config: Mapping[str, Any], stagger: int,
                   prologue: int) -> None:
    """The stagger index agrees with ``config.warp_stagger.enabled`` and ``execution.groups``.

    The execution model staggers exactly the indices 0..len(prologue)
    (:meth:`ExecutionModel.is_staggered`); the compiler writes len(prologue) + 1 when the
    stagger is disabled (docs/guide/reference-behaviours.md, "Warp stagger").  An enabled
    stagger past the prologue would silently check one warp group, a disabled one inside it
    would be checked as one group but run as two by every other reader of the document.
    """
    ws = config.get("warp_stagger")
    enabled = isinstance(ws, Mapping) and ws.get("enabled") is True
    staggered = ExecutionModel.is_staggered(stagger, prologue)
    if enabled and not staggered:
        raise DocumentError("warp_stagger_index", f"must be 0..{prologue} (the prologue has "
                                                  f"{prologue} entries) with config.warp_stagger."
                                                  f"enabled true, got {stagger}; set enabled to "
                                                  "false for a schedule without a stagger")
    if not enabled and stagger <= prologue:
        raise DocumentError("warp_stagger_index", f"must be {prologue + 1} or more (past the "
                                                  f"prologue's {prologue} entries) with config."
                                                  f"warp_stagger.enabled false, got {stagger}; "
                                                  "set enabled to true to stagger the warp groups")
    execution = document.get("execution")
    groups = execution.get("groups") if isinstance(execution, Mapping) else None
    want = 2 if staggered else 1
    if groups is not None and groups != want:
        runs = "staggers 2 warp groups" if staggered else "staggers nothing"
        raise DocumentError("execution.groups", f"must be {want}: warp_stagger_index {stagger} "
                                                f"{runs} (the prologue has {prologue} entries), "
                                                f"got {groups}")


#: config fields the checker reads, with what each must be (docs/document-format.md)
from pipeline_core.document import COUNTER_CONFIG_KEYS as _COUNT_FIELDS  # noqa: E402


def _check_config_types(config: Mapping[str, Any], sched: Any) -> None:
    """The config facts the checker reads have the types the document format gives them:
    a mistyped one (``"enabled": "false"``) must not silently change the verdict."""
    for key in _COUNT_FIELDS:
        if key in config:
            v = config[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DocumentError(f"config.{key}", f"expected an integer >= 0, got {v!r}")
    if isinstance(sched, Mapping):
        for key in ("lgkm_per_load_a", "lgkm_per_load_b"):
            v = sched.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise DocumentError(f"schedule_config.{key}", f"expected an integer >= 0, got {v!r}")
    elif sched is not None:
        raise DocumentError("schedule_config", f"expected an object, got {type(sched).__name__}")
    for key in ("ch0_match_field", "ch1_match_field"):
        if key in config and (isinstance(config[key], bool) or config[key] not in (0, 1)):
            raise DocumentError(f"config.{key}", f"expected 0 (stage) or 1 (subtile), got "
                                                 f"{config[key]!r}")
    if "warp_stagger" in config:
        ws = config["warp_stagger"]
        if not isinstance(ws, Mapping):
            raise DocumentError("config.warp_stagger", f"expected an object, got {ws!r}")
        for key in ("enabled", "compute_from_body"):
            if key in ws and not isinstance(ws[key], bool):
                raise DocumentError(f"config.warp_stagger.{key}",
                                    f"expected true or false, got {ws[key]!r}")
        if "fixed_amount" in ws and (isinstance(ws["fixed_amount"], bool)
                                     or not isinstance(ws["fixed_amount"], int)):
            raise DocumentError("config.warp_stagger.fixed_amount",
                                f"expected an integer, got {ws['fixed_amount']!r}")


def _check_execution(execution: Any) -> None:
    from pipeline_core.limits import WARPS_PER_GROUP

    if execution is None:
        return
    if not isinstance(execution, Mapping):
        raise DocumentError("execution", f"expected an object, got {type(execution).__name__}")
    groups = execution.get("groups", 1)
    if isinstance(groups, bool) or groups not in (1, 2):
        raise DocumentError("execution.groups", f"expected 1 or 2, got {groups!r}")
    warps = execution.get("warps_per_group", 1)
    if isinstance(warps, bool) or not isinstance(warps, int) or not WARPS_PER_GROUP.contains(warps):
        raise DocumentError("execution.warps_per_group",
                            f"expected {WARPS_PER_GROUP.allowed()}, got {warps!r}")


def document_warps(document: Mapping[str, Any]) -> int | None:
    """The warps per group a document records (``execution.warps_per_group``), if any."""
    execution = document.get("execution")
    if isinstance(execution, Mapping) and isinstance(execution.get("warps_per_group"), int):
        return int(execution["warps_per_group"])
    return None


def _refuse_aligned_barrier(decoded: Mapping[str, tuple[Instr, ...]], model: CounterModel,
                            stagger: int) -> None:
    """The aligned-barrier rule: staggered warp groups meet at different barrier instructions,
    which an aligned barrier kind (every participant at the same instruction) forbids."""
    entries = [i for name in PHASES for i in decoded[name] if i.kind is Kind.BARRIER]
    found = next(((i.site, name) for i in entries
                  if (name := model.aligned_barrier(i.tag)) is not None), None)
    if found is None and (name := model.aligned_barrier(model.barrier_tag)) is not None:
        found = ("warp_stagger_index", name)  # the stagger's own barriers are of that kind
    if found is None:
        return
    where, name = found
    raise DocumentError(where, f"{name} is an aligned barrier (every warp of the CTA must "
                               f"execute the same barrier instruction), but warp_stagger_index "
                               f"{stagger} staggers 2 warp groups, which meet at different "
                               "barrier instructions: a staggered schedule needs a non-aligned "
                               "barrier kind")


def decode(document: Mapping[str, Any], model: CounterModel, *, groups: int | None = None) -> CheckProgram:
    """Decode and validate ``document``; raises :class:`DocumentError` naming the bad path."""
    phases, stagger, config, depth = check_shape(document)
    ws = config.get("warp_stagger", {}) if isinstance(config, Mapping) else {}
    enabled = bool(ws.get("enabled", False)) if isinstance(ws, Mapping) else False
    ch0_match = config.get("ch0_match_field", 0)
    ch1_match = config.get("ch1_match_field", 1)
    single = depth == 1 or not model.global_loads_write_lds
    ordinal = counted_by_sync(document)
    by_tag = _channel_by_tag(document, phases)

    frag_subtiles = sorted({op["subtile"] for ops in phases.values() for op in ops
                            if op["role"] == int(OpRole.FRAGMENT_LOAD) and op["tag"] <= MAX_KERNEL_TAG})
    slices = tuple(frag_subtiles) if single and frag_subtiles else (0,)

    def channel_of(op: Mapping[str, Any], path: str) -> int:
        if op["channel"] >= 0:
            return op["channel"]
        if op["tag"] in by_tag:
            return by_tag[op["tag"]]
        if single:
            return 0
        vm_cost = op.get("vm_cost", 0)
        if op["role"] == int(OpRole.GLOBAL_LOAD) and vm_cost:
            fits = [ch for ch in (0, 1) if (c := model.cost(op["role"], ch)) and c.ops == vm_cost]
            if len(fits) == 1:
                return fits[0]
        raise DocumentError(path, f"cannot tell the channel of tag {op['tag']} (channel -1 and "
                                  "no other op with this tag names one)")

    def one(op: Mapping[str, Any], phase: str, index: int) -> Instr:
        path = f"{phase}[{index}].op"
        tag, role = op["tag"], op["role"]
        name = _tag_name(op)
        base = dict(phase=phase, index=index, tag=tag, name=name, stage=op["stage"],
                    subtile=op["subtile"])
        form = model.isa_forms.get(tag)
        if form is not None:
            base["isa"] = form.format(wait_value=op["wait_value"], subtile=op["subtile"])
        if model.is_rendezvous(tag):
            return Instr(Kind.BARRIER, **base)
        counter = model.counter_for_wait(tag)
        if counter is not None:
            value = op["wait_value"]
            if value < 0 or (counter.max_wait is not None and value > counter.max_wait):
                allowed = (f"0..{counter.max_wait}" if counter.max_wait is not None
                           else "a value >= 0")
                raise DocumentError(f"{path}.wait_value", f"a wait on {counter.name} takes "
                                                          f"{allowed} (its encoding), got {value}")
            return Instr(Kind.WAIT, counter=counter.name, value=value, **base)
        group = model.counter_for_commit(tag)
        if group is not None:
            return Instr(Kind.COMMIT, counter=group.name, cost=1, **base)
        if tag > MAX_KERNEL_TAG:
            return Instr(Kind.NOP, **base)
        if role in (int(OpRole.GLOBAL_LOAD), int(OpRole.FRAGMENT_LOAD), int(OpRole.SHARED_STORE)):
            ch = channel_of(op, path)
            count = model.cost(role, ch)
            synchronous = count is None and model.is_synchronous(role, ch)
            if count is None and not synchronous:
                raise DocumentError(path, f"the counter model does not count role {role}")
            kind = {int(OpRole.GLOBAL_LOAD): Kind.LOAD, int(OpRole.FRAGMENT_LOAD): Kind.FRAG,
                    int(OpRole.SHARED_STORE): Kind.STORE}[role]
            shift = None
            if kind is Kind.LOAD and not single and not ordinal:
                try:
                    ko = KOffset(op["k_offset"])
                except ValueError:
                    raise DocumentError(f"{path}.k_offset", f"unknown KOffsetKind {op['k_offset']}")
                if ko is KOffset.NONE:
                    raise DocumentError(f"{path}.k_offset", "a double-buffer global load needs a K "
                                                            "offset (a ring lowering's document, "
                                                            'whose loads have none, says "lowering": '
                                                            '"ring")')
                shift = ko.signed_bk_multiple
            base["channel"] = ch
            if count is None:  # synchronous: complete for the issuer when issued
                return Instr(kind, k_shift=shift, **base)
            return Instr(kind, k_shift=shift, counter=count.counter, cost=count.ops, **base)
        if role == int(OpRole.COMPUTE):
            if single:
                return Instr(Kind.MMA, operands=((0, op["subtile"]),), acc=(0, 0), **base)
            reads = _reads(op, path)
            return Instr(Kind.MMA, operands=tuple(
                (ch, _field(op, ch0_match if ch == 0 else ch1_match)) for ch in reads),
                acc=(op["stage"], op["subtile"]), **base)
        if role in (int(OpRole.FENCE), int(OpRole.VALU_COMPUTE), int(OpRole.NONE)):
            return Instr(Kind.NOP, **base)
        raise DocumentError(path, f"cannot interpret tag {tag} with role {role}")

    decoded = {name: tuple(one(op, name, i) for i, op in enumerate(ops)) for name, ops in phases.items()}
    n_groups = groups if groups is not None else (
        2 if enabled and ExecutionModel.is_staggered(stagger, len(decoded["prologue"])) else 1)
    if n_groups > 1:
        _refuse_aligned_barrier(decoded, model, stagger)
    body = document.get("body")
    acc_ops = [op for op in body if isinstance(op, Mapping) and op.get("role") == int(OpRole.COMPUTE)
               and all(isinstance(op.get(k), int) for k in REQUIRED_OP_KEYS)] \
        if isinstance(body, list) else []
    accs = sorted({one(op, "body", i).acc for i, op in enumerate(acc_ops)}) if acc_ops else \
        sorted({i.acc for ph in decoded.values() for i in ph if i.kind is Kind.MMA})
    return CheckProgram(prologue=decoded["prologue"], kernel=decoded["kernel"],
                        epilogue=decoded["epilogue"], warp_stagger_index=stagger,
                        groups=n_groups, single_buffer=single, slices=slices,
                        accumulators=tuple(accs), model=model,
                        name=str(document.get("case", "")), ordinal_tiles=ordinal)
