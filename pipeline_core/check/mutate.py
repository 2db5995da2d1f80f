"""Schedule mutations for testing the checker: loosen a wait, drop a barrier, swap entries.

Pure functions on schedule documents (the input is never modified), so the
checker and any independent oracle judge exactly the same mutated schedule.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from pipeline_core.ops import OpRole

PHASES = ("prologue", "kernel", "epilogue")
DATA_ROLES = (int(OpRole.GLOBAL_LOAD), int(OpRole.FRAGMENT_LOAD))


@attrs.frozen
class Mutation:
    """One edit of one phase list; ``category`` groups mutations in reports."""

    category: str  #: "loosen_wait" | "remove_barrier" | "swap_data" | "swap_mixed"
    phase: str
    index: int
    description: str

    def apply(self, document: Mapping[str, Any]) -> dict[str, Any]:
        doc = dict(document)
        entries = copy.deepcopy(list(document[self.phase]))
        if self.category == "loosen_wait":
            entries[self.index]["op"]["wait_value"] += 1
        elif self.category == "remove_barrier":
            del entries[self.index]
        else:
            entries[self.index], entries[self.index + 1] = entries[self.index + 1], entries[self.index]
        for n, e in enumerate(entries):
            e["index"] = n
        doc[self.phase] = entries
        return doc


def _name(entry: Mapping[str, Any]) -> str:
    op = entry["op"]
    return f"{op.get('tag_name', op['tag'])}(s{op['stage']} sub{op['subtile']} w{op['wait_value']})"


def mutations(document: Mapping[str, Any], phases: tuple[str, ...] = PHASES, *,
              sync: Any = None) -> Iterator[Mutation]:
    """Every single-edit mutation of ``phases`` (wait and barrier tags from ``sync``, the
    :class:`~pipeline_core.sync.SyncModel` of the document's target when not given):

    * each wait loosened by one (``wait(n)`` -> ``wait(n+1)``: one more op may stay outstanding);
    * each barrier removed;
    * each adjacent pair swapped where at least one entry is a global or fragment load
      ("swap_data" when both are, "swap_mixed" otherwise); identical neighbours are skipped.
    """
    if sync is None:
        from pipeline_core.sync.resolve import sync_for_document
        sync = sync_for_document(document)
    wait_tags, barrier_tag = set(sync.wait_tags), sync.barrier.tag
    for phase in phases:
        entries = document[phase]
        for i, e in enumerate(entries):
            tag = e["op"]["tag"]
            if tag in wait_tags:
                yield Mutation("loosen_wait", phase, i, f"{phase}[{i}] {_name(e)} -> wait+1")
            elif tag == barrier_tag:
                yield Mutation("remove_barrier", phase, i, f"remove {phase}[{i}] BARRIER")
        for i in range(len(entries) - 1):
            a, b = entries[i]["op"], entries[i + 1]["op"]
            da, db = a["role"] in DATA_ROLES and a["tag"] < 128, b["role"] in DATA_ROLES and b["tag"] < 128
            if not (da or db) or a == b:
                continue
            cat = "swap_data" if da and db else "swap_mixed"
            yield Mutation(cat, phase, i, f"swap {phase}[{i}] {_name(entries[i])} <-> "
                                          f"[{i + 1}] {_name(entries[i + 1])}")
