"""Per-tag op costs, the target cost model, and annotation of logical ops."""
from __future__ import annotations

from typing import Iterable, Mapping

import attrs

from pipeline_core.errors import ConfigError
from pipeline_core.ops import MAX_KERNEL_TAG, Op, OpRole, ResourceKind


@attrs.frozen
class OpCost:
    """What a kernel tag costs on a target: unit, cycles, role, VGPR liveness."""

    resource: ResourceKind = attrs.field(converter=ResourceKind)
    latency: int = attrs.field()
    role: OpRole = attrs.field(converter=OpRole)
    vgpr_def: int = 0
    vgpr_kill: int = 0
    name: str = ""  #: the tag's name in this model's namespace (used in listings)
    #: cycles between two issues of this instruction on one SM when every warp issues it (the
    #: unit's throughput; a schedule that costs a whole CTA's instructions per op, such as
    #: multistage-gemm, multiplies it by their count); None: not declared
    interval: float | None = attrs.field(default=None, kw_only=True)

    @interval.validator
    def _check_interval(self, attribute, value):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0):
            raise ConfigError("OpCost", "interval", value, "None or a positive number of cycles")

    @latency.validator
    def _check_latency(self, attribute, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("OpCost", "latency", value, "a non-negative integer (cycles)")

    @staticmethod
    def none() -> "OpCost":
        return OpCost(ResourceKind.NONE, 0, OpRole.NONE)


_NONE_COST = OpCost.none()


def _check_costs(inst, attribute, value: Mapping[int, OpCost]) -> None:
    for tag, cost in value.items():
        if isinstance(tag, bool) or not isinstance(tag, int) or not 0 <= tag <= MAX_KERNEL_TAG:
            raise ConfigError("CostModel", "costs", tag,
                              f"kernel tags are integers in [0, {MAX_KERNEL_TAG}]; "
                              f"framework tags (>= {MAX_KERNEL_TAG + 1}) have fixed costs")
        if not isinstance(cost, OpCost):
            raise ConfigError("CostModel", f"costs[{tag}]", cost, "an OpCost")


@attrs.frozen
class CostModel:
    """A target's table of kernel-tag costs (tags 0-127); unknown tags cost nothing."""

    costs: Mapping[int, OpCost] = attrs.field(factory=dict, converter=lambda c: dict(sorted(dict(c).items())),
                                              validator=_check_costs)

    def get(self, tag: int) -> OpCost:
        if not 0 <= tag <= MAX_KERNEL_TAG:
            raise ConfigError("CostModel", "tag", tag, f"kernel tags are in [0, {MAX_KERNEL_TAG}]")
        return self.costs.get(tag, _NONE_COST)

    def with_cost(self, tag: int, cost: OpCost) -> "CostModel":
        return CostModel({**self.costs, tag: cost})

    def tag_names(self) -> dict[int, str]:
        return {tag: c.name for tag, c in self.costs.items() if c.name}


def annotate(ops: Iterable[Op], model: CostModel) -> list[Op]:
    """Fill resource, latency, role and VGPR fields of every kernel-tag op from ``model``.

    Overwrites unconditionally (even ops that already carried costs, even tags
    the model never registered), exactly as the reference does; framework ops
    (tags above ``MAX_KERNEL_TAG``) pass through untouched.
    """
    out = []
    for o in ops:
        if o.tag <= MAX_KERNEL_TAG:
            c = model.get(o.tag)
            o = attrs.evolve(o, resource=c.resource, latency=c.latency, role=c.role,
                             vgpr_def=c.vgpr_def, vgpr_kill=c.vgpr_kill)
        out.append(o)
    return out
