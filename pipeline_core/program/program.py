"""The block program: blocks plus optional explicit op lists, expanded into entries.

A block with a non-empty explicit list is emitted verbatim (every entry
``is_prefetch`` False); otherwise its template is used. Explicit lists only
ever matter for the kernel phase
(docs/guide/reference-behaviours.md, "Explicit lists are kernel-only"): the epilogue is derived
from ``blocks`` and built as a separate program.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import attrs

from pipeline_core.errors import ProgramError
from pipeline_core.ops import Entry, Op, OpRole, Phase
from pipeline_core.program import _ops
from pipeline_core.program.block import BlockSpec


def _to_blocks(blocks: Iterable[BlockSpec]) -> tuple[BlockSpec, ...]:
    return tuple(blocks)


def _to_explicit(lists: Sequence[Sequence[Op]]) -> tuple[tuple[Op, ...], ...]:
    return tuple(tuple(ops) for ops in lists)


@attrs.frozen
class Program:
    """Blocks in program order, one explicit op list per block (or none at all).

    ``explicit_blocks`` is either empty (every block uses its template) or has
    exactly one (possibly empty) list per block.
    """

    blocks: tuple[BlockSpec, ...] = attrs.field(converter=_to_blocks)
    explicit_blocks: tuple[tuple[Op, ...], ...] = attrs.field(default=(), converter=_to_explicit)
    trailing_barrier: bool = False

    def __attrs_post_init__(self) -> None:
        if self.explicit_blocks and len(self.explicit_blocks) != len(self.blocks):
            raise ProgramError(
                f"explicit_blocks has {len(self.explicit_blocks)} lists but the program has "
                f"{len(self.blocks)} blocks; give one list per block (an empty list means "
                f"'use the template')")

    # --- per-block queries -------------------------------------------------------
    def explicit(self, i: int) -> tuple[Op, ...]:
        """Block ``i``'s explicit op list (empty: the template is used)."""
        return self.explicit_blocks[i] if self.explicit_blocks else ()

    def block_entry_count(self, i: int) -> int:
        ops = self.explicit(i)
        return len(ops) if ops else self.blocks[i].entry_count()

    def block_entry_counts(self) -> list[int]:
        return [self.block_entry_count(i) for i in range(len(self.blocks))]

    def total_entries(self) -> int:
        return sum(self.block_entry_counts()) + (1 if self.trailing_barrier else 0)

    def block_start(self, i: int) -> int:
        """Index of block ``i``'s first entry in the expanded phase."""
        return sum(self.block_entry_count(j) for j in range(i))

    def block_starts(self) -> list[int]:
        starts, pos = [], 0
        for n in self.block_entry_counts():
            starts.append(pos)
            pos += n
        return starts

    def mma_entry(self, i: int) -> int:
        """Index of block ``i``'s MMA in the expanded phase.

        Explicit block: its first COMPUTE op (the block start if it has none).
        """
        start = self.block_start(i)
        ops = self.explicit(i)
        if ops:
            for k, op in enumerate(ops):
                if op.role == OpRole.COMPUTE:
                    return start + k
            return start
        return start + self.blocks[i].mma_position()

    # --- expansion -------------------------------------------------------------------
    def expand(self, phase: Phase) -> tuple[Entry, ...]:
        """All blocks as entries of ``phase``; time_slot is the index in the phase list."""
        phase = Phase(phase)
        out: list[Entry] = []
        for i, block in enumerate(self.blocks):
            ops = self.explicit(i)
            items = [(op, False) for op in ops] if ops else block.expand()
            for op, pf in items:
                out.append(Entry(op, len(out), phase, pf))
        if self.trailing_barrier:
            out.append(Entry(_ops.BARRIER, len(out), phase, False))
        return tuple(out)

    # --- functional updates ---------------------------------------------------------
    def with_blocks(self, blocks: Iterable[BlockSpec]) -> "Program":
        return attrs.evolve(self, blocks=tuple(blocks))

    def with_explicit_blocks(self, lists: Sequence[Sequence[Op]]) -> "Program":
        """Attach explicit lists (one per block; an all-empty list set clears them)."""
        lists = _to_explicit(lists)
        if lists and len(lists) != len(self.blocks):
            raise ProgramError(
                f"got {len(lists)} explicit block lists for a program of {len(self.blocks)} "
                f"blocks; return exactly one list per block (empty = use the template)")
        return attrs.evolve(self, explicit_blocks=lists if any(lists) else ())


@attrs.frozen
class KernelProgram:
    """The final (patched, verified) program and the values derived on the way.

    ``wait_lgkm_first`` / ``wait_vm_last`` are always the derived values
    (docs/guide/reference-behaviours.md, "Wait derivation"), also when ``waits_applied`` is
    False and the kernel
    carries the manual ones.
    """

    program: Program
    order: tuple[int, ...]
    main_wait_vm: int
    wait_lgkm_first: int
    wait_vm_last: int
    waits_applied: bool
    derived_drain_mask: int
