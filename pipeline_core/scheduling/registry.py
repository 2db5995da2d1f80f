"""The strategy registry: a name -> function table instead of the reference's closed enum."""
from __future__ import annotations

from typing import Callable, Iterable

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.errors import ConfigError, UnknownNameError
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


Strategy = Callable[[SchedulingRequest], "list[int]"]

_STRATEGIES: dict[str, Strategy] = {}


def register_strategy(name: str, fn: Strategy, *, replace: bool = False) -> None:
    """Register ``fn`` under ``name`` (upper-cased). Duplicates are an error unless ``replace``."""
    key = name.strip().upper()
    if not key:
        raise ConfigError("strategy", "name", name, "a non-empty name")
    if key in _STRATEGIES and not replace and _STRATEGIES[key] is not fn:
        raise ConfigError("strategy", "name", name, "already registered by another provider")
    _STRATEGIES[key] = fn


def unregister_strategy(name: str) -> None:
    _STRATEGIES.pop(name.strip().upper(), None)


def _ensure_builtins() -> None:
    if "IDENTITY" not in _STRATEGIES:
        from pipeline_core.scheduling import builtin  # noqa: F401  (registers on import)


def get_strategy(name: str) -> Strategy:
    _ensure_builtins()
    key = name.strip().upper()
    try:
        return _STRATEGIES[key]
    except KeyError:
        raise UnknownNameError("scheduling strategy", key, strategy_names()) from None


def strategy_names() -> list[str]:
    _ensure_builtins()
    return sorted(_STRATEGIES)
