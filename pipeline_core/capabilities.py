"""Capability contracts: what a schedule needs from a target and what a target offers.

A schedule written against a kind of machine (a cp.async ring feeding ldmatrix and mma.sync, a
TMA producer feeding wgmma) fits every target that offers that machine, whichever plugin
registers it: ``ScheduleRecord.requires`` and ``EmitterRecord.requires`` state the contract,
``TargetRecord.offers`` the offer, and a target that lacks something is refused in one line
naming what it lacks and the installed targets that offer it (docs/guide/schedule-plugin.md,
"Targets a schedule is made for").

The vocabulary is the one the core already speaks, no parallel enum: ``channels`` are sync
channel names (:attr:`pipeline_core.sync.Channel.name`, what the ring and agents lowerings
derive waits on), and ``instructions`` / ``copies`` are the ISA's own mnemonics, as a sync
model's ``isa_forms`` writes them (``mma.sync``, ``ldmatrix``, ``wgmma``; ``cp.async``,
``cp.async.bulk.tensor`` for TMA).  The kernel tags a schedule emits are not a capability:
a target family (``TargetRecord.family``, :data:`pipeline_core.schedule.COPY_RING`) publishes
them, and a cost model that lacks one is refused when the schedule is built.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from pipeline_core.errors import ConfigError

#: the kinds of capability, in the order a refusal and a listing name them: (field, singular)
KINDS: tuple[tuple[str, str], ...] = (("channels", "sync channel"), ("instructions", "instruction"),
                                      ("copies", "copy kind"))


def _names(value: Iterable[str] | str) -> frozenset[str]:
    return frozenset((value,) if isinstance(value, str) else value)


def _check_names(inst: Any, attribute: attrs.Attribute, value: frozenset[str]) -> None:
    for name in value:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ConfigError("Capabilities", attribute.name, name,
                              "a non-empty name without surrounding spaces (a sync channel's "
                              "name, or an ISA mnemonic such as mma.sync or cp.async)")


@attrs.frozen(kw_only=True)
class Capabilities:
    """A set of capabilities: a schedule's or an emitter's contract, or a target's offer.

    ``channels``: sync channel names; ``instructions``: compute and fragment instructions;
    ``copies``: global-to-shared copy kinds.  A contract is covered by an offer that holds each
    of its names (:meth:`missing` says which are not).
    """

    channels: frozenset[str] = attrs.field(default=frozenset(), converter=_names,
                                           validator=_check_names)
    instructions: frozenset[str] = attrs.field(default=frozenset(), converter=_names,
                                               validator=_check_names)
    copies: frozenset[str] = attrs.field(default=frozenset(), converter=_names,
                                         validator=_check_names)

    def missing(self, offer: "Capabilities | None") -> list[str]:
        """What this contract needs that ``offer`` lacks, each as "KIND NAME" (sorted within a
        kind, kinds in ``KINDS`` order); empty when it is covered (``offer`` None offers nothing)."""
        offered = offer or Capabilities()
        return [f"{singular} {name}" for field, singular in KINDS
                for name in sorted(getattr(self, field) - getattr(offered, field))]

    def covered_by(self, offer: "Capabilities | None") -> bool:
        return not self.missing(offer)

    def words(self) -> str:
        """The set in words, for listings ("sync channel cp_async, instructions ldmatrix,
        mma.sync, copy kind cp.async"); "nothing" when empty."""
        parts = []
        for field, singular in KINDS:
            names = sorted(getattr(self, field))
            if names:
                kind = singular if len(names) == 1 else (
                    "copy kinds" if field == "copies" else f"{singular}s")
                parts.append(f"{kind} {', '.join(names)}")
        return ", ".join(parts) or "nothing"

    def as_dict(self) -> dict[str, list[str]]:
        """The JSON form (listings): each kind's names, sorted."""
        return {field: sorted(getattr(self, field)) for field, _ in KINDS}


def check_capabilities(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    """attrs validator of an optional ``Capabilities`` field (a record's contract or offer)."""
    if value is not None and not isinstance(value, Capabilities):
        raise ConfigError(type(inst).__name__, attribute.name, type(value).__name__,
                          "None or a Capabilities record")
