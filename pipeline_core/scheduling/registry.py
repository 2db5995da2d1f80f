"""What a strategy is given and returns (the built-ins are looked up by name in ``builtin``).

There is no registry here: the plugin host owns the table of strategies
(``PluginHost.get_strategy``), built from ``pipeline_core_register_strategies``
answers, so two hosts never share a registered strategy.  This module holds only
the records a strategy and its callers share, so the strategies import it and it
imports none of them (:mod:`.builtin` names the built-in functions, for the core
plugin and for tools that order a body without a host).
"""
from __future__ import annotations

from typing import Callable, Iterable

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.ops import Op


def _to_body(body: Iterable[Op]) -> tuple[Op, ...]:
    return tuple(body)


def _to_edges(edges: Iterable[DepEdge]) -> tuple[DepEdge, ...]:
    return tuple(edges)


@attrs.frozen
class SchedulingRequest:
    """Everything a strategy may use to order a body.

    ``body`` is the annotated body in declaration order, ``edges`` index into it.
    A strategy returns a permutation of ``range(len(body))``.
    """

    body: tuple[Op, ...] = attrs.field(converter=_to_body)
    edges: tuple[DepEdge, ...] = attrs.field(converter=_to_edges)
    max_globals_per_block: int = 0
    lds_contention_penalty: int = 0
    max_vgpr: int = 999999
    num_partitions: int = 2
    blocks_per_partition: int = 4
    time_limit: float | None = None  #: seconds; strategies that search may honour it
    #: search nodes; like ``time_limit`` but it stops a search at the same point on every
    #: machine, so the order it returns is reproducible
    node_limit: int | None = None

    def budget_text(self, cut: str) -> str:
        """The budget that cut a search ("node-limit" or "time-limit") and its knob."""
        if cut == "node-limit":
            return f"node limit of {self.node_limit} nodes reached (-c search_node_limit)"
        return f"time limit of {self.time_limit:g}s reached (-c search_time_limit_ms)"

    def warn_cut(self, strategy: str, cut: str, found: str = "") -> None:
        """One line on stderr: the search was cut by a budget, so its order is the best found
        so far (with a time limit, one that may differ from run to run)."""
        import sys

        again = ("the same order on every machine" if cut == "node-limit" else
                 "it may differ from run to run; -c search_node_limit gives a repeatable cut")
        print(f"{strategy}: {self.budget_text(cut)}; returning the best order found "
              f"({found + '; ' if found else ''}{again})", file=sys.stderr)


Strategy = Callable[[SchedulingRequest], "list[int]"]
