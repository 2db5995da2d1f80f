"""A small builder DSL for declaring loop bodies: ``Pipe`` chains and ``BodyBuilder``.

Every builder method produces logical ops (buffer metadata only); resource,
latency and role come later from a cost model (``costs.annotate``). The one
exception is ``barrier()``, which is a complete framework op.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence, Union, overload

import attrs

from pipeline_core.costs import CostModel
from pipeline_core.errors import ConfigError
from pipeline_core.ops import MAX_KERNEL_TAG, Entry, KOffset, Op, Phase, barrier, logical


def _ops_tuple(value: Iterable[Op]) -> tuple[Op, ...]:
    ops = tuple(value)
    for k, o in enumerate(ops):
        if not isinstance(o, Op):
            raise ConfigError("Pipe", f"ops[{k}]", o, "an Op")
    return ops


@attrs.frozen
class Pipe:
    """An immutable op sequence; ``p >> op`` appends, ``p >> other_pipe`` concatenates."""

    ops: tuple[Op, ...] = attrs.field(default=(), converter=_ops_tuple)

    def __rshift__(self, other: Union[Op, "Pipe"]) -> "Pipe":
        if isinstance(other, Op):
            return Pipe(self.ops + (other,))
        if isinstance(other, Pipe):
            return Pipe(self.ops + other.ops)
        return NotImplemented

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    @overload
    def __getitem__(self, index: int) -> Op: ...

    @overload
    def __getitem__(self, index: slice) -> "Pipe": ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Pipe(self.ops[index])
        return self.ops[index]

    def as_entries(self, phase: Phase, offset: int = 0) -> tuple[Entry, ...]:
        """Entries with time_slot offset + i and is_prefetch False (the reference's as_schedule)."""
        return tuple(Entry(op=o, time_slot=offset + i, phase=phase, is_prefetch=False)
                     for i, o in enumerate(self.ops))

    def emit_into(self, entries: list, phase: Phase, offset: int) -> int:
        """Append this pipe's entries to ``entries`` starting at ``offset``; returns the next offset."""
        entries.extend(self.as_entries(phase, offset))
        return offset + len(self.ops)


def pipe(first: Op | None = None) -> Pipe:
    """Start a chain: ``pipe(a) >> b >> c`` (``pipe()`` is the empty pipe)."""
    return Pipe(()) if first is None else Pipe((first,))


def annotate_pipe(p: Pipe, model: CostModel) -> Pipe:
    """Resource, latency and role from ``model`` for kernel tags; VGPR fields kept (reference)."""
    out = []
    for o in p.ops:
        if o.tag <= MAX_KERNEL_TAG:
            c = model.get(o.tag)
            o = o.evolve(resource=c.resource, latency=c.latency, role=c.role)
        out.append(o)
    return Pipe(out)


def _count(owner: str, name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(owner, name, value, "a non-negative integer")
    return value


class BodyBuilder:
    """Declare a loop body op by op (use as a context manager or plainly).

    ``load/store/frag/op`` default to channel -1, stage 0, subtile 0; ``compute`` has
    no channel; ``fan`` numbers subtiles 0..n-1; ``grid`` is row-major (stage = row,
    subtile = column). Methods return the builder so calls can be chained.
    """

    def __init__(self) -> None:
        self._ops: list[Op] = []

    def __enter__(self) -> "BodyBuilder":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __len__(self) -> int:
        return len(self._ops)

    def _add(self, o: Op) -> "BodyBuilder":
        self._ops.append(o)
        return self

    def load(self, tag: int, ch: int = -1, stage: int = 0, sub: int = 0,
             k: KOffset = KOffset.NONE) -> "BodyBuilder":
        return self._add(logical(tag, channel=ch, stage=stage, subtile=sub, k_offset=k))

    def store(self, tag: int, ch: int = -1, stage: int = 0, sub: int = 0) -> "BodyBuilder":
        return self._add(logical(tag, channel=ch, stage=stage, subtile=sub))

    def frag(self, tag: int, ch: int = -1, stage: int = 0, sub: int = 0) -> "BodyBuilder":
        return self._add(logical(tag, channel=ch, stage=stage, subtile=sub))

    def compute(self, tag: int, stage: int = 0, sub: int = 0) -> "BodyBuilder":
        return self._add(logical(tag, stage=stage, subtile=sub))

    def barrier(self) -> "BodyBuilder":
        return self._add(barrier())

    def op(self, tag: int, ch: int = -1, stage: int = 0, sub: int = 0,
           k: KOffset = KOffset.NONE) -> "BodyBuilder":
        """Escape hatch: any logical op."""
        return self._add(logical(tag, channel=ch, stage=stage, subtile=sub, k_offset=k))

    def fan(self, n: int, tag: int, ch: int = -1, stage: int = 0,
            k: KOffset = KOffset.NONE) -> "BodyBuilder":
        """``n`` ops sharing channel, stage and k, with subtiles 0..n-1."""
        for j in range(_count("BodyBuilder.fan", "n", n)):
            self._add(logical(tag, channel=ch, stage=stage, subtile=j, k_offset=k))
        return self

    def grid(self, m: int, n: int, tag: int, ch: int = -1) -> "BodyBuilder":
        """``m`` x ``n`` ops, row-major, stage = row, subtile = column (an MMA grid)."""
        _count("BodyBuilder.grid", "m", m)
        _count("BodyBuilder.grid", "n", n)
        for i in range(m):
            for j in range(n):
                self._add(logical(tag, channel=ch, stage=i, subtile=j))
        return self

    def extend(self, other: "BodyBuilder | Pipe | Sequence[Op]") -> "BodyBuilder":
        """Append another builder's (or pipe's, or list's) ops; ``other`` is left unchanged."""
        ops = other.done() if isinstance(other, BodyBuilder) else list(other)
        for k, o in enumerate(ops):
            if not isinstance(o, Op):
                raise ConfigError("BodyBuilder.extend", f"other[{k}]", o, "an Op")
        self._ops.extend(ops)
        return self

    def done(self) -> list[Op]:
        """A copy of the ops so far (later appends do not change it)."""
        return list(self._ops)

    def as_pipe(self) -> Pipe:
        return Pipe(self._ops)
