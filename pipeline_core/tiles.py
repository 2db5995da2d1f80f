"""The trip rule: which output tiles a problem has and how many K tiles (trips) each visits.

Why the core holds a protocol and not a rule: the iteration space is the kernel family's (a
GEMM's raster visits ``ceil(K / BK)`` K tiles on every output tile; attention's forward, masked
above the diagonal, visits fewer on its early query blocks and none on one that sees no key;
a backward pass or a grouped GEMM would bring rules of their own), while the core proves and
times the loop each output tile runs.  So a family hands its plan a :class:`TripRule`
(``AgentSpec.trip_rule``, copied to ``Plan.trip_rule``) and the core asks it only what a proof,
a timing run and a document need (docs/guide/agents.md, "Output tiles of different lengths"):

* :attr:`TripRule.uniform`: whether every output tile of a problem visits the same count.  For
  a rule that is not, the prover also runs output tiles of different counts back to back
  (``prove.TRIP_SEQUENCES``: an empty tile between two others, empty tiles first, a short tile
  before a long one, ``S - 1, 0, S + 1`` for the deepest ring's ``S``) and the checker's
  mutations skew and clamp the agents' trip counts; a uniform rule costs the proof nothing (the
  GEMM's proofs stay as they were);
* :meth:`TripRule.sample`: a representative problem whose longest output tile visits
  ``k_tiles`` K tiles (:class:`TripSample`), which the agents timing model runs tile by tile
  and ``pipeline-core analyze`` reports against the same problem without the rule;
* :meth:`TripRule.document`: the rule in the schedule document (the agents view's ``bounds``
  key, written for a rule that is not uniform).

The family's own code (its emitter, its host call, its tests) asks the same object the
per-problem questions: :meth:`TripRule.trip_counts` (one count per output tile, so its length
is the problem's output tiles) and :meth:`TripRule.masked_trips` (each output tile's first
masked K tile: from it to the tile's count the family's masked ops apply).

A rule is a frozen ``attrs`` record (the plan is frozen, compared and hashed with it).  A small
family writes one in about twenty lines; this one visits every column block of each row block,
the last block masked on a ragged row::

    @attrs.frozen(kw_only=True)
    class RowTrips:
        '''Problem (rows, cols): row blocks of ``block_rows``, each visiting every column
        block of ``block_cols``.'''

        block_rows: int
        block_cols: int

        @property
        def uniform(self) -> bool:
            return True

        def trip_counts(self, problem: tuple[int, int]) -> tuple[int, ...]:
            rows, cols = problem
            return (-(-cols // self.block_cols),) * -(-rows // self.block_rows)

        def masked_trips(self, problem: tuple[int, int]) -> tuple[int, ...]:
            ragged = problem[1] % self.block_cols != 0  # the tail block is masked
            return tuple(n - ragged for n in self.trip_counts(problem))

        def sample(self, k_tiles: int) -> TripSample | None:
            return None  # every tile visits k_tiles: the steady state says it all

        def document(self) -> dict[str, object]:
            return {"block_rows": self.block_rows, "block_cols": self.block_cols}
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeGuard, TypeVar

import attrs

#: a family's problem: what its call sizes a launch by ((queries, keys), (M, N, K), ...)
Problem = TypeVar("Problem", contravariant=True)


def _counts(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class TripSample:
    """A problem the timing model runs a plan's output tiles over, each for its own K-tile
    count (``trips``), against the same output tiles each visiting ``full`` (the rule off):
    what ``pipeline-core analyze`` reports for a rule whose tiles differ.  The words and keys
    are the family's, so its report reads in its terms; the text line is ``{title}
    ({problem}): {sum(trips)} of {full x tiles} {unit}, {cycles} cycles = {ratio} of the
    {full cycles} {reference}``, the JSON ``{key: {**numbers, names[0]: ..., names[1]: ...,
    "cycles": ..., "full_cycles": ...}}``."""

    trips: tuple[int, ...] = attrs.field(converter=_counts)  #: K tiles of each output tile
    full: int  #: the K tiles each output tile visits without the rule
    key: str = "trips"  #: the analyze report's JSON key
    title: str = "trip rule"  #: the text line's opening words
    problem: str = ""  #: the problem in words (the text line's parenthesis)
    #: the problem's own numbers, first in the JSON object
    numbers: Mapping[str, int] = attrs.field(factory=dict)
    unit: str = "K tiles"  #: what the text calls a K tile
    #: the JSON names of the two sums (under the rule, without it)
    names: tuple[str, str] = ("trips", "full_trips")
    #: what the text calls the run without the rule
    reference: str = "with every output tile visiting every K tile"

    @property
    def full_trips(self) -> tuple[int, ...]:
        """The same output tiles, each visiting :attr:`full` K tiles."""
        return (self.full,) * len(self.trips)


def _ranges(items: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return tuple((int(b), int(e)) for b, e in items)


def _orders(items: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(o) for o in items)


@attrs.frozen(kw_only=True)
class Fixup:
    """One output tile of a trip rule's sample problem as its cross-CTA reduction hands it over
    (docs/guide/agents.md, "Cross-CTA reductions"): the CTAs that share the tile's ``k_tiles``
    K tiles, each its range ``parts[i] = (begin, end)`` (in the order of their workspace
    slices), the count ``arrivals`` the tile's counter must reach for its last arriver (what the
    kernel compares its arrival with), and ``orders[i]``: the slices (indices into ``parts``)
    the fixup adds, in the order it adds them, when CTA ``parts[i]`` arrives last.  A tile of
    one part is a data-parallel tile: it runs its epilogue with no hand-off.  Why the rule says
    this and not the core: which CTA covers which K tiles is the family's scheduler's, and the
    proof must see the very ranges and order the kernel computes (``agents.prove_fixup``)."""

    where: str  #: the problem and tile in words (a finding names it)
    k_tiles: int
    parts: tuple[tuple[int, int], ...] = attrs.field(converter=_ranges)
    arrivals: int
    orders: tuple[tuple[int, ...], ...] = attrs.field(converter=_orders)


class TripRule(Protocol[Problem]):
    """A family's iteration rule (the module says what the core asks of it, and shows a rule
    written in twenty lines).  ``Problem`` is whatever sizes the family's launch.

    Two methods are optional, so the many rules that have nothing to prove write nothing for
    them: ``coverage_faults() -> Iterable[str]``, the rule's own proof that every output
    element's terms are visited (and masked where its mask drops them), each fault a sentence;
    the agents prover reports each as a ``MISSING_PRODUCT`` of the rule
    (``agents.prove._coverage``).  And, for a schedule with turn-ordered adds
    (``AgentSpec.turns``), ``turn_orders() -> Iterable[tuple[str, tuple[int, ...]]]``: for each
    part of the accumulator of small problems of every shape (named), the turn ranks of the
    output tiles adding to it in launch order, which ``agents.prove_reduction.prove_turns``
    checks give turns 0, 1, ... (no turn shared, none skipped).  And, for a schedule with a
    cross-CTA reduction (``AgentSpec.reduction``) whose CTAs share an output tile's K tiles
    unevenly (stream-K), ``fixups() -> Iterable[Fixup]``: each output tile of sample problems,
    the K ranges its CTAs cover, the count its counter reaches and the slices its fixup adds
    (:class:`Fixup`), which ``agents.prove_fixup`` checks; without it the reduction is proven
    over even splits of 2 and 3 CTAs (split-K's)."""

    @property
    def uniform(self) -> bool:
        """Every output tile of every problem visits the same K-tile count: the prover then
        runs no output tiles of different counts back to back."""

    def trip_counts(self, problem: Problem) -> tuple[int, ...]:
        """The K tiles each output tile of ``problem`` visits, in output-tile order (0 for a
        tile with none: it runs only its once steps)."""

    def masked_trips(self, problem: Problem) -> tuple[int, ...]:
        """Each output tile's first masked K tile: its K tiles from it to its count run the
        family's masked ops; its count when none does."""

    def sample(self, k_tiles: int) -> TripSample | None:
        """The problem whose longest output tile visits ``k_tiles`` K tiles, for the timing
        model and the analyze report; None when there is nothing to report beyond the steady
        state (every tile visits ``k_tiles``)."""

    def document(self) -> Mapping[str, object]:
        """The rule as the schedule document records it (JSON values)."""


class UniformTrips:
    """What every uniform rule says alike, for a family's rule to inherit (the GEMM's raster,
    the gemv's row tiles): every output tile visits the same count, none masked (the loads are
    zero-filled past the problem), nothing to sample beyond the steady state, and the rule's
    fields as its document.  The family writes :meth:`trip_counts` alone."""

    uniform = True

    def trip_counts(self, problem: Any) -> tuple[int, ...]:
        raise NotImplementedError(f"{type(self).__name__}: a uniform rule gives trip_counts")

    def masked_trips(self, problem: Any) -> tuple[int, ...]:
        return self.trip_counts(problem)

    def sample(self, k_tiles: int) -> TripSample | None:
        return None

    def document(self) -> Mapping[str, object]:
        return attrs.asdict(self) if attrs.has(type(self)) else {}  # type: ignore[arg-type]


def varies(rule: TripRule[Any] | None) -> TypeGuard[TripRule[Any]]:
    """A rule whose output tiles may differ in count (not None and not uniform): what the
    prover, the mutations, the cluster check, the plan edits and the document ask."""
    return rule is not None and not rule.uniform
