"""The one notation for an op, shared by the text view, check, analyze, the trace and DOT.

Why one function: a kernel engineer reading ``check``'s hazard site, ``analyze``'s
recurrence cycle, a Perfetto slice and a DOT node must see the same words for the same
op (docs/guide/concepts.md, "Reading the views").  The forms:

* global load   ``LOAD_A[A s0.1 K+2]``  operand letter, stage.subtile, K offset
* fragment load ``MMA_LOAD_B[B s1.0]``  operand letter, stage.subtile
* MMA           ``MMA[m0,n1]``          grid row and column (k-slice MMAs: ``MMA[k1]``)
* sync and hint ops in the target's ISA form when its sync model declares one
  (``cp.async.wait_group 2``, ``bar.sync 0``, the toy target's ``copy.wait 1``), else the tag name
  with its value (``WAIT_VM(6)``).

A prologue load whose entry carries no channel (the reference drops it) takes the channel
its tag has elsewhere in the body (``channel_of``), so it prints with its operand too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pipeline_core.ops import MAX_KERNEL_TAG, KOffset, OpRole, tag_name

if TYPE_CHECKING:  # the agents records, for annotations only
    from pipeline_core.plan import Plan, Step
    from pipeline_core.ops import Op
    from pipeline_core.sync.model import SyncModel

#: the reference's K offsets by name
K_TEXT = {KOffset.K0: "K0", KOffset.K1: "K1", KOffset.K_NEXT: "K+2", KOffset.K_PREV: "K-1"}
#: the same offsets as the checker's signed BK multiples
_K_SHIFT = {0: "K0", 1: "K1", 2: "K+2", -1: "K-1"}


def k_text(k: KOffset | int | None, *, shift: bool = False) -> str:
    """``K0``, ``K1``, ``K+2``, ``K-1`` from a KOffset, or (``shift``) a signed BK multiple."""
    if k is None:
        return ""
    if shift:
        return _K_SHIFT.get(int(k), f"K{int(k):+d}")
    return K_TEXT.get(KOffset(k), "")


def operand(channel: int) -> str:
    """``A``, ``B``, or ``ch2``; empty for no channel."""
    if channel < 0:
        return ""
    return "AB"[channel] if channel < 2 else f"ch{channel}"


def sync_text(tag: int, name: str, *, wait_value: int = 0, subtile: int = 0,
              sync: Any = None) -> str | None:
    """A sync, barrier or hint op in the target's words, or None when ``tag`` is not one."""
    if sync is None:
        return None
    isa = sync.isa_text(tag, wait_value=wait_value, subtile=subtile)
    if isa is not None:
        return isa
    if sync.channel_for_wait(tag) is not None or tag == sync.priority_tag:
        return f"{name}({wait_value})"
    if tag in sync.hint_formats:
        return f"{name}({sync.hint_formats[tag].format(subtile=subtile, wait_value=wait_value)})"
    if tag in sync.tag_names():
        return name
    return None


def label(name: str, role: OpRole | int, *, tag: int = -1, channel: int = -1, stage: int = 0,
          subtile: int = 0, k: str = "", wait_value: int = 0, sync: Any = None,
          k_slices: bool = False) -> str:
    """The notation from an op's fields (the checker's decoded entries call this directly)."""
    text = sync_text(tag, name, wait_value=wait_value, subtile=subtile, sync=sync)
    if text is not None:
        return text
    if tag > MAX_KERNEL_TAG:
        if role == OpRole.SYNC and wait_value:
            return f"{name}({wait_value})"
        return name
    if role == OpRole.COMPUTE:
        return f"{name}[k{subtile}]" if k_slices else f"{name}[m{stage},n{subtile}]"
    parts = [p for p in (operand(channel), f"s{stage}.{subtile}", k) if p]
    return f"{name}[{' '.join(parts)}]"


def op_text(o: Any, names: Mapping[int, str] | None = None, sync: Any = None,
            channel_of: Mapping[int, int] | None = None) -> str:
    """One :class:`~pipeline_core.ops.Op` in the shared notation."""
    channel = o.channel
    if channel < 0 and channel_of and o.role in (OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD,
                                                 OpRole.SHARED_STORE):
        channel = channel_of.get(o.tag, -1)
    k = k_text(o.k_offset) if o.role == OpRole.GLOBAL_LOAD else ""
    return label(tag_name(o.tag, names), o.role, tag=o.tag, channel=channel, stage=o.stage,
                 subtile=o.subtile, k=k, wait_value=o.wait_value, sync=sync)


def channels_by_tag(ops: Any) -> dict[int, int]:
    """tag -> channel for every tag whose ops carry exactly one channel (for prologue loads)."""
    seen: dict[int, set[int]] = {}
    for o in ops:
        if o.channel >= 0:
            seen.setdefault(o.tag, set()).add(o.channel)
    return {tag: next(iter(chs)) for tag, chs in seen.items() if len(chs) == 1}


def _tile(step: "Step", after_loop: bool) -> str:
    if after_loop:
        return ""
    return "t" if step.lag == 0 else f"t-{step.lag}"


def isa_form(step: "Step", plan: "Plan", body: "Sequence[Op]", names: Mapping[int, str],
             sync: "SyncModel | None", *, after_loop: bool = False) -> str:
    """An agents step as the instruction it lowers to, its ring stage and parity written over
    the loop index ``t`` (docs/guide/agents.md, "Steps"): the text view, the document and the
    timing model's trace name a step the same way."""
    from pipeline_core.plan import StepKind

    base = sync.isa_text(step.tag, wait_value=step.value) if sync is not None and step.tag >= 0 \
        else None
    name = tag_name(step.tag, names) if step.tag >= 0 else step.kind.value
    u = _tile(step, after_loop)
    s = next((r.stages for r in plan.rings if r.name == step.channel), plan.stages)
    wrap = f"({u})" if "-" in u else u
    if step.once:  # its ring counts output tiles, o (docs/guide/agents.md, "Loads issued once")
        u = wrap = "o"
    if step.kind == StepKind.OP:
        return f"{tag_name(body[step.op].tag, names)} tile {u}" if u else \
            tag_name(body[step.op].tag, names)
    head = base or name
    nb = sync.named_barriers if sync is not None else None
    if step.kind in (StepKind.NAMED_SYNC, StepKind.NAMED_ARRIVE):  # "Named barriers"
        text = (nb.text(arrive=step.kind == StepKind.NAMED_ARRIVE, id=step.barrier,
                        count=step.value) if nb is not None
                else f"{name} {step.barrier}, {step.value}")
        if step.output_lag:  # an output-tile ordering's wait (docs/guide/agents.md, "Tile splits")
            return (f"{text} ({step.channel}; fills output tile o-{step.output_lag}'s "
                    "generation: none on the CTA's first, once more after its last)")
        return f"{text} ({step.channel})"
    if step.kind == StepKind.PHASE_WAIT and step.scope and sync is not None \
            and sync.cluster is not None:  # a phase a peer CTA completes ("Clusters")
        head = sync.cluster.forms.get("peer_wait", head)
    if step.kind == StepKind.PHASE_WAIT:
        off = step.phase_offset
        phase = f"{wrap}/{s}" + (f"{off:+d}" if off else "")
        return f"{head} {step.channel}[{wrap}%{s}] parity ({phase})&1"
    if step.kind == StepKind.ARRIVE and step.peer:  # a peer CTA's barrier ("Clusters")
        cl = sync.cluster if sync is not None else None
        form = (cl.forms.get("remote_arrive", head) if cl is not None and step.scope
                in cl.release_scopes else f"{head} ({step.scope or 'cta'} scope)")
        return f"{form} {step.channel}[{wrap}%{s}] of CTA rank+{step.peer}"
    if step.kind in (StepKind.ARRIVE, StepKind.ASYNC_ARRIVE):
        return f"{head} {step.channel}[{wrap}%{s}]"
    if step.kind == StepKind.EXPECT_TX:
        return f"{head} {step.channel}[{wrap}%{s}]" + ("" if base else f" {step.value} bytes")
    if step.kind == StepKind.COUNTER_WAIT and base is None:
        return f"{head}({step.value})"
    return head
