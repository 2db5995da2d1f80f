"""Dependency edges and the declarative edge rules that derive them from a body.

Edges come out grouped by rule (table order), then by producer index, then by
consumer index; golden files compare edge lists by index, so this order is part
of the contract.
"""
from __future__ import annotations

from typing import Sequence

import attrs

from pipeline_core.errors import ConfigError
from pipeline_core.ops import DepKind, KOffset, Op, OpRole


@attrs.frozen
class DepEdge:
    """producer -> consumer, with kind and loop distance (0 = same iteration).

    Indices point into the body the edge was derived from.
    """

    producer: int
    consumer: int
    kind: DepKind = attrs.field(default=DepKind.FLOW, converter=DepKind)
    distance: int = 0

    @classmethod
    def flow(cls, p: int, c: int, d: int = 0) -> "DepEdge":
        return cls(p, c, DepKind.FLOW, d)

    @classmethod
    def anti(cls, p: int, c: int, d: int = 0) -> "DepEdge":
        return cls(p, c, DepKind.ANTI, d)

    @property
    def same_iteration(self) -> bool:
        """Ordering-relevant edge (the reference treats distance < 1 as same-iteration)."""
        return self.distance < 1


# --- rules ------------------------------------------------------------------

def _choice(*allowed: int):
    def check(inst, attribute, value):
        if isinstance(value, bool) or value not in allowed:
            raise ConfigError(f"EdgeRule {inst.name!r}" if inst.name else "EdgeRule",
                              attribute.name, value, f"one of {', '.join(map(str, allowed))}")
    return check


def _at_least(lo: int):
    def check(inst, attribute, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConfigError(f"EdgeRule {inst.name!r}" if inst.name else "EdgeRule",
                              attribute.name, value, f"an integer >= {lo}")
    return check


def _flag(inst, attribute, value):
    if not isinstance(value, bool):
        raise ConfigError(f"EdgeRule {inst.name!r}" if inst.name else "EdgeRule",
                          attribute.name, value, "true or false")


@attrs.frozen
class EdgeRule:
    """One row of an edge-rule table: which producer/consumer pairs get an edge.

    ``loop_distance`` -1 derives d from the producer (K_PREV -> 0, else 1);
    ``producer_half`` -1/0/1; ``k_offset_filter`` 0 any, 1 consumer is K_PREV,
    2 consumer is not K_PREV; ``lc_*`` -1 any, 0 not loop-carried, 1 loop-carried;
    ``*_ordinal`` -1 any, N = the N-th op of that role in the body.
    """

    producer_role: OpRole = attrs.field(converter=OpRole)
    consumer_role: OpRole = attrs.field(converter=OpRole)
    dep_kind: DepKind = attrs.field(default=DepKind.FLOW, converter=DepKind)
    loop_distance: int = attrs.field(default=0, validator=_at_least(-1))
    match_channel: bool = attrs.field(default=False, validator=_flag)
    match_stage: bool = attrs.field(default=False, validator=_flag)
    match_subtile: bool = attrs.field(default=False, validator=_flag)
    use_config_match: bool = attrs.field(default=False, validator=_flag)
    same_half: bool = attrs.field(default=False, validator=_flag)
    cross_half: bool = attrs.field(default=False, validator=_flag)
    producer_half: int = attrs.field(default=-1, validator=_choice(-1, 0, 1))
    k_offset_filter: int = attrs.field(default=0, validator=_choice(0, 1, 2))
    lc_producer: int = attrs.field(default=-1, validator=_choice(-1, 0, 1))
    lc_consumer: int = attrs.field(default=-1, validator=_choice(-1, 0, 1))
    producer_ordinal: int = attrs.field(default=-1, validator=_at_least(-1))
    consumer_ordinal: int = attrs.field(default=-1, validator=_at_least(-1))
    first_match_only: bool = attrs.field(default=False, validator=_flag)
    name: str = ""  #: used in listings and error messages only

    def __attrs_post_init__(self) -> None:
        if self.same_half and self.cross_half:
            raise ConfigError(f"EdgeRule {self.name!r}" if self.name else "EdgeRule",
                              "cross_half", True, "false when same_half is set (no pair can match both)")


#: Double-buffer table (5 rules): register FLOW, accumulator fwd/back, LDS FLOW, LDS ANTI.
DOUBLE_BUFFER_RULES: tuple[EdgeRule, ...] = (
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.COMPUTE, DepKind.FLOW, 0, use_config_match=True,
             same_half=True, name="register FLOW"),
    EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, DepKind.FLOW, 0, match_stage=True, match_subtile=True,
             cross_half=True, producer_half=0, name="accumulator forward"),
    EdgeRule(OpRole.COMPUTE, OpRole.COMPUTE, DepKind.FLOW, 1, match_stage=True, match_subtile=True,
             cross_half=True, producer_half=1, name="accumulator backward"),
    EdgeRule(OpRole.GLOBAL_LOAD, OpRole.FRAGMENT_LOAD, DepKind.FLOW, -1, match_channel=True,
             match_stage=True, name="LDS FLOW"),
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.GLOBAL_LOAD, DepKind.ANTI, 0, match_channel=True,
             match_stage=True, k_offset_filter=2, name="LDS ANTI"),
)

#: Single-buffer table (8 rules); "lc" = loop-carried, sync[k] = the k-th SYNC op.
SINGLE_BUFFER_RULES: tuple[EdgeRule, ...] = (
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.COMPUTE, DepKind.FLOW, 0, match_subtile=True,
             lc_producer=0, lc_consumer=0, first_match_only=True, name="frag -> compute"),
    EdgeRule(OpRole.SYNC, OpRole.SHARED_STORE, DepKind.FLOW, 0, producer_ordinal=0,
             name="sync[0] -> store"),
    EdgeRule(OpRole.SHARED_STORE, OpRole.SYNC, DepKind.FLOW, 0, consumer_ordinal=1,
             name="store -> sync[1]"),
    EdgeRule(OpRole.SYNC, OpRole.FRAGMENT_LOAD, DepKind.FLOW, 0, producer_ordinal=1, lc_consumer=1,
             name="sync[1] -> lc frag"),
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.SYNC, DepKind.ANTI, 0, lc_producer=0, consumer_ordinal=0,
             name="frag -> sync[0] (ANTI)"),
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.COMPUTE, DepKind.FLOW, 1, lc_producer=1, lc_consumer=1,
             name="lc frag -> lc compute (next iteration)"),
    EdgeRule(OpRole.GLOBAL_LOAD, OpRole.SHARED_STORE, DepKind.FLOW, 1, name="load -> store (next iteration)"),
    EdgeRule(OpRole.FRAGMENT_LOAD, OpRole.SHARED_STORE, DepKind.ANTI, 1, lc_producer=1,
             name="lc frag -> store (ANTI, next iteration)"),
)


def double_buffer_edge_rules() -> tuple[EdgeRule, ...]:
    return DOUBLE_BUFFER_RULES


def single_buffer_edge_rules() -> tuple[EdgeRule, ...]:
    return SINGLE_BUFFER_RULES


def rules_for(config) -> tuple[EdgeRule, ...]:
    """depth == 1 selects the single-buffer table; any other depth the double-buffer one."""
    return SINGLE_BUFFER_RULES if config.depth == 1 else DOUBLE_BUFFER_RULES


def apply_edge_rules(body: Sequence[Op], config, rules: Sequence[EdgeRule]) -> list[DepEdge]:
    """Every edge the rule table implies for ``body``, grouped by rule, producer, consumer.

    Halves are positional (index < len // 2 is half 0), also for single-buffer bodies.
    """
    n = len(body)
    half_len = n // 2
    selector = config.loop_carried.selector
    buckets: dict[OpRole, list[int]] = {}
    ordinal = [0] * n
    for i, o in enumerate(body):
        bucket = buckets.setdefault(o.role, [])
        ordinal[i] = len(bucket)
        bucket.append(i)
    lc = [o.subtile == selector for o in body]
    half = [0 if i < half_len else 1 for i in range(n)]

    def lc_ok(want: int, i: int) -> bool:
        return want < 0 or lc[i] == bool(want)

    out: list[DepEdge] = []
    for rule in rules:
        consumers = buckets.get(rule.consumer_role, ())
        for p in buckets.get(rule.producer_role, ()):
            po = body[p]
            if rule.producer_ordinal >= 0 and ordinal[p] != rule.producer_ordinal:
                continue
            if not lc_ok(rule.lc_producer, p):
                continue
            if rule.producer_half >= 0 and half[p] != rule.producer_half:
                continue
            if rule.loop_distance == -1:
                d = 0 if po.k_offset == KOffset.K_PREV else 1
            else:
                d = rule.loop_distance
            for c in consumers:
                if c == p:
                    continue
                co = body[c]
                if rule.consumer_ordinal >= 0 and ordinal[c] != rule.consumer_ordinal:
                    continue
                if not lc_ok(rule.lc_consumer, c):
                    continue
                if rule.match_channel and po.channel != co.channel:
                    continue
                if rule.match_stage and po.stage != co.stage:
                    continue
                if rule.match_subtile and po.subtile != co.subtile:
                    continue
                if rule.same_half and half[p] != half[c]:
                    continue
                if rule.cross_half and half[p] == half[c]:
                    continue
                if rule.use_config_match:
                    if po.channel not in co.operand_channels:  # a fragment it never reads
                        continue
                    if half[c] != (0 if po.stage == 0 else 1):
                        continue
                    if config.compute_match_key(co, po.channel) != po.subtile:
                        continue
                if rule.k_offset_filter == 1 and co.k_offset != KOffset.K_PREV:
                    continue
                if rule.k_offset_filter == 2 and co.k_offset == KOffset.K_PREV:
                    continue
                out.append(DepEdge(p, c, rule.dep_kind, d))
                if rule.first_match_only:
                    break
    return out


def derive_edges(body: Sequence[Op], config) -> list[DepEdge]:
    """The default edges of a body: the rule table ``config.depth`` selects."""
    return apply_edge_rules(body, config, rules_for(config))
