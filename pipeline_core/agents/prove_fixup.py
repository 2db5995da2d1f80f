"""The proof of a cross-CTA reduction's fixup where the trip rule shares a tile's K tiles
unevenly (stream-K): which CTAs hand over which K ranges, and in which order the last arriver
adds their slices.

:mod:`pipeline_core.agents.prove_reduction` proves the hand-off's steps (publish, acquire,
reset) over each count of CTAs and each CTA arriving last; this module proves the arithmetic
around them from the trip rule's ``fixups()`` (:class:`~pipeline_core.tiles.Fixup`: every output
tile of its sample problems, with the K ranges its CTAs cover and the slices its fixup adds):

* the ranges cover the tile's K tiles ``0 .. k_tiles - 1`` exactly once: a K tile in no range
  is never accumulated, **MISSING_PRODUCT**; one in two ranges is added twice,
  **DUPLICATE_PRODUCT**;
* the counter's count ``arrivals`` is the tile's CTAs: fewer, and a CTA becomes the last while
  another's slice is not yet published, **SMEM_RAW**; more, and no CTA is ever the last,
  **DEADLOCK**;
* for each CTA that may arrive last, the fixup adds every slice once, in K order: a slice
  skipped, **MISSING_PRODUCT**; one added twice, **DUPLICATE_PRODUCT**; any other order (two
  slices swapped, the last arriver's own first) makes the sum's bits depend on the order or
  on which CTA came last, **ADD_ORDER**.  One fixed order is what makes the result bitwise
  reproducible run to run.

A tile of one CTA (a data-parallel tile) hands nothing over; its range must still cover its
K tiles.  The rule's ``fixups()`` also names the CTA counts the step proof runs
(:func:`split_counts`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline_core.check.verdict import HazardKind, Site, Violation
from pipeline_core.plan import Plan
from pipeline_core.tiles import Fixup


def rule_fixups(plan: Plan) -> list[Fixup] | None:
    """The trip rule's fixups, None where it has no ``fixups()`` (split-K's even splits)."""
    fixups = getattr(plan.trip_rule, "fixups", None)
    return list(fixups()) if callable(fixups) else None


def split_counts(fixups: Sequence[Fixup], default: Sequence[int]) -> tuple[int, ...]:
    """The counts of CTAs the rule's tiles are shared by (2 or more), or ``default``."""
    counts = sorted({len(f.parts) for f in fixups if len(f.parts) > 1})
    return tuple(counts) or tuple(default)


def fixup_faults(f: Fixup) -> list[tuple[HazardKind, str]]:
    """What is wrong with one tile's fixup (the module says what is checked)."""
    out: list[tuple[HazardKind, str]] = []
    ranges = sorted(range(len(f.parts)), key=lambda i: f.parts[i])
    at = 0
    for i in ranges:
        begin, end = f.parts[i]
        if begin > at:
            out.append((HazardKind.MISSING_PRODUCT, f"{f.where}: K tiles {at}..{begin - 1} are "
                        "in no CTA's range: never accumulated"))
        elif begin < at:
            out.append((HazardKind.DUPLICATE_PRODUCT, f"{f.where}: K tiles {begin}.."
                        f"{min(at, end) - 1} are in two CTAs' ranges (part {i} {f.parts[i]}): "
                        "added twice"))
        at = max(at, end)
    if at < f.k_tiles:
        out.append((HazardKind.MISSING_PRODUCT, f"{f.where}: K tiles {at}..{f.k_tiles - 1} are "
                    "in no CTA's range: never accumulated"))
    elif at > f.k_tiles:
        out.append((HazardKind.DUPLICATE_PRODUCT, f"{f.where}: a range runs past the tile's "
                    f"{f.k_tiles} K tiles (to {at}): the next tile's K tiles added into it"))
    n = len(f.parts)
    if f.arrivals < n:
        out.append((HazardKind.SMEM_RAW, f"{f.where}: the counter's count is {f.arrivals} for "
                    f"{n} CTAs: the CTA that reaches it may read a slice not yet published"))
    elif f.arrivals > n:
        out.append((HazardKind.DEADLOCK, f"{f.where}: the counter's count is {f.arrivals} for "
                    f"{n} CTAs: no arrival is the last, the tile is never reduced"))
    if n < 2:
        return out
    k_order = list(ranges)
    if len(f.orders) != n:
        out.append((HazardKind.MISSING_PRODUCT, f"{f.where}: {len(f.orders)} fixup orders for "
                    f"{n} CTAs that may arrive last"))
    for last, order in enumerate(f.orders):
        who = f"{f.where}, CTA of part {last} arriving last"
        missing = sorted(set(range(n)) - set(order))
        if missing:
            out.append((HazardKind.MISSING_PRODUCT, f"{who}: the fixup skips slice(s) "
                        f"{missing}: their K tiles never reach the sum"))
        if len(set(order)) < len(order) or any(not 0 <= i < n for i in order):
            out.append((HazardKind.DUPLICATE_PRODUCT, f"{who}: the fixup adds slices {list(order)}"
                        ": one twice (or one that is no part)"))
        elif not missing and list(order) != k_order:
            out.append((HazardKind.ADD_ORDER, f"{who}: the fixup adds slices {list(order)}, not "
                        f"in K order {k_order}: the sum's bits depend on the order (or on which "
                        "CTA came last)"))
    return out


def prove_fixups(plan: Plan, priority: Mapping[HazardKind, int]) -> list[Violation]:
    """The findings on the trip rule's fixups (none where the plan has no reduction or the
    rule no ``fixups()``): the first of each kind, at the rule."""
    if plan.reduction is None:
        return []
    fixups = rule_fixups(plan)
    if fixups is None:
        return []
    first: dict[HazardKind, str] = {}
    for f in fixups:
        for kind, text in fixup_faults(f):
            first.setdefault(kind, text)
    site = Site(phase="trip_rule", index=-1, iteration=0, group=0,
                op=f"the trip rule's fixups of {plan.reduction.name}")
    return [Violation(kind, site, text, order=(priority[kind], 0, n))
            for n, (kind, text) in enumerate(first.items())]


def fixup_assumptions(plan: Plan) -> list[str]:
    """The line a verdict adds for a rule with fixups."""
    fixups = rule_fixups(plan) if plan.reduction is not None else None
    if not fixups:
        return []
    shared = sum(len(f.parts) > 1 for f in fixups)
    return [f"the trip rule's fixups: {len(fixups)} output tiles of its sample problems, "
            f"{shared} shared by 2 or more CTAs over uneven K ranges, each range, count and "
            "fixup order as the kernel computes them"]
