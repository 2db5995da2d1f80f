"""The one codec of the docs/document-format.md JSON document: encode a compiled schedule, decode its parts.

Encoding writes enums as integers with ``*_name`` siblings (the document an AMD
compile emits is compared byte for byte against the reference's).  Decoding turns
the document's op, entry, edge and config dicts back into records, for the timing
model, tools and tests; the hazard checker validates documents itself
(``pipeline_core.check.program.decode``) because it must name the bad path of
hand-edited input.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from pipeline_core.config import (BLOCK_PIPELINE_FIELDS, BLOCK_SCHEDULE_KNOBS, BlockSizing,
                                  FragOrder, LoopCarried, PipelineConfig, ScheduleConfig,
                                  WarpStagger)
from pipeline_core.edges import DepEdge
from pipeline_core.ops import Entry, Op, Phase, tag_name

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule

#: The 13 fields of an op dict that make the Op (the rest are ``*_name`` siblings).
OP_FIELDS = ("tag", "stage", "subtile", "k_offset", "vm_cost", "lgkm_cost", "wait_value",
             "resource", "latency", "role", "channel", "vgpr_def", "vgpr_kill")

FLAG_NAMES = ("pre_mma_barrier", "pre_mma_set_prio", "post_mma_barrier", "post_mma_set_prio",
              "post_barrier_lgkm", "post_barrier_sched", "trailing_sched_barrier",
              "global_load_prefetch", "global_load_1_prefetch", "drain_lgkm_before_loads",
              "global_before_frag", "barrier_before_pre_ops", "wrap_waits_with_sched_barrier")
SLOT_NAMES = ("mma", "pre_op_0", "pre_op_1", "global_load", "global_load_1", "entry_wait",
              "entry_wait_lgkm", "pre_sync", "fused_mma")


#: keys named after the reference's counters, written only for block-program documents
COUNTER_OP_KEYS = ("vm_cost", "lgkm_cost")
COUNTER_CONFIG_KEYS = BLOCK_PIPELINE_FIELDS  # the blocks lowering's own (pipeline_core/config.py)


def _neutral(d: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    for k in keys:
        d.pop(k, None)
    return d


def op_doc(o: Op, names: Mapping[int, str]) -> dict[str, Any]:
    return {
        "tag": o.tag, "tag_name": tag_name(o.tag, names), "stage": o.stage, "subtile": o.subtile,
        "k_offset": int(o.k_offset), "k_offset_name": o.k_offset.name, "vm_cost": o.vm_cost,
        "lgkm_cost": o.lgkm_cost, "wait_value": o.wait_value, "resource": int(o.resource),
        "resource_name": o.resource.name, "latency": o.latency, "role": int(o.role),
        "role_name": o.role.name, "channel": o.channel, "vgpr_def": o.vgpr_def,
        "vgpr_kill": o.vgpr_kill,
        # a compute's operand channels, written only where named (the reference's documents,
        # whose computes read an A and a B, keep their 13 fields)
        **({"reads": list(o.reads)} if o.reads is not None else {}),
    }


def slot_doc(o: Op, names) -> dict[str, Any] | None:
    return op_doc(o, names) if o.is_present else None


def entry_doc(index: int, e: Entry, names) -> dict[str, Any]:
    return {"index": index, "time_slot": e.time_slot, "phase": int(e.phase),
            "phase_name": e.phase.name, "is_prefetch": e.is_prefetch, "op": op_doc(e.op, names)}


def edge_doc(index: int, e: DepEdge) -> dict[str, Any]:
    return {"index": index, "producer": e.producer, "consumer": e.consumer, "kind": e.kind.name,
            "kind_value": int(e.kind), "distance": e.distance}


def config_doc(c: PipelineConfig) -> dict[str, Any]:
    d = c.derived()
    return {
        "depth": c.depth, "prefetch": c.prefetch, "drain_passes": c.drain_passes,
        "prologue_fill": c.prologue_fill,
        "loop_carried": {"role": int(c.loop_carried.role), "role_name": c.loop_carried.role.name,
                         "selector": c.loop_carried.selector},
        "block_sizing": {"heavy": c.block_sizing.heavy, "light": c.block_sizing.light,
                         "max_globals": c.block_sizing.max_globals},
        "frag_order": {"b_before_a": c.frag_order.b_before_a},
        "m_mmas": c.m_mmas, "n_mmas": c.n_mmas, "num_partitions": c.num_partitions,
        "mma_serial": c.mma_serial, "mma_latency": c.mma_latency,
        "vm_per_load_a": c.vm_per_load_a, "vm_per_load_b": c.vm_per_load_b,
        "lgkm_per_load_a": c.lgkm_per_load_a, "lgkm_per_load_b": c.lgkm_per_load_b,
        "ch0_match_field": c.ch0_match_field, "ch1_match_field": c.ch1_match_field,
        "warp_stagger": {"enabled": c.warp_stagger.enabled,
                         "compute_from_body": c.warp_stagger.compute_from_body,
                         "fixed_amount": c.warp_stagger.fixed_amount},
        "cross_stage_rotation": c.cross_stage_rotation,
        "derived": {
            "mmas_per_partition": d.mmas_per_partition,
            "globals_per_partition": d.globals_per_partition,
            "frags_per_partition": d.frags_per_partition, "ops_per_partition": d.ops_per_partition,
            "total_ops": d.total_ops, "blocks_per_partition": d.blocks_per_partition,
            "total_blocks": d.total_blocks, "total_edges": d.total_edges,
        },
    }


def schedule_config_doc(s: ScheduleConfig) -> dict[str, Any]:
    import attrs

    out: dict[str, Any] = {}
    for f in attrs.fields(ScheduleConfig):
        value = getattr(s, f.name)
        if f.name == "scheduling":
            out["scheduling"] = s.scheduling_value if s.scheduling_value is not None else -1
            out["scheduling_name"] = s.scheduling
        else:
            out[f.name] = value
    return out


def block_doc(index: int, block, config: PipelineConfig, names) -> dict[str, Any]:
    bph = config.blocks_per_partition
    doc: dict[str, Any] = {
        "index": index, "partition": index // bph, "pos_in_partition": index % bph,
        "num_pre_ops": block.num_pre_ops, "num_globals": block.num_globals,
        "entry_count": block.entry_count(), "mma_position": block.mma_position(),
        "post_barrier_lgkm_position": block.post_barrier_lgkm_position(),
    }
    for slot in SLOT_NAMES:
        doc[slot] = slot_doc(getattr(block, slot), names)
    doc["flags"] = {f: getattr(block, f) for f in FLAG_NAMES}
    return doc


def to_document(c: "CompiledSchedule") -> dict[str, Any]:
    """The compiled schedule as the schedule document (docs/document-format.md) (compared keys plus debugging extras)."""
    names = c.tag_names
    doc: dict[str, Any] = {
        "schedule": c.schedule_name,
        "target": c.target_name,
        "params": dict(c.params),
        "counts": {"body": len(c.body), "edges": len(c.edges), "prologue": len(c.prologue),
                   "kernel": len(c.kernel), "epilogue": len(c.epilogue),
                   "kernel_deps": len(c.kernel_deps)},
        "warp_stagger_index": c.warp_stagger_index,
        "config": config_doc(c.config),
        "schedule_config": schedule_config_doc(c.schedule_config),
        "body": [op_doc(o, names) for o in c.body],
        "edges": [edge_doc(i, e) for i, e in enumerate(c.edges)],
        "prologue": [entry_doc(i, e, names) for i, e in enumerate(c.prologue)],
        "kernel": [entry_doc(i, e, names) for i, e in enumerate(c.kernel)],
        "epilogue": [entry_doc(i, e, names) for i, e in enumerate(c.epilogue)],
        "kernel_deps": [edge_doc(i, e) for i, e in enumerate(c.kernel_deps)],
    }
    plan = c.plan
    if not plan.template_counters:
        # a plan that counts through the target's sync model (the ring and agents lowerings):
        # no counter costs on ops, no per-load counter ticks, only the ordering knobs of the
        # schedule config; the reference's documents, which count through those fields, carry
        # no lowering key (docs/document-format.md, "Keys")
        doc["lowering"] = plan.lowering
        for key in ("body", "prologue", "kernel", "epilogue"):
            for item in doc[key]:
                _neutral(item.get("op", item), COUNTER_OP_KEYS)
        _neutral(doc["config"], COUNTER_CONFIG_KEYS)
        doc["schedule_config"] = {k: v for k, v in doc["schedule_config"].items()
                                  if k not in BLOCK_SCHEDULE_KNOBS}
    if not plan.lockstep:  # one program per agent: the phase lists stay empty
        from pipeline_core.agents.views import agents_doc
        sync = plan.sync
        doc["agents"] = agents_doc(plan, c.body, {**(sync.tag_names() if sync else {}),
                                                  **names}, sync)
    doc.update(plan.details.document_sections(plan, names))
    if plan.execution is not None:
        doc["execution"] = {"groups": plan.execution.groups,
                            "warps_per_group": plan.execution.warps_per_group}
    if c.proof is not None and not c.proof.safe:  # emitted with allow_unsafe
        doc["hazards"] = c.hazards
    return doc


def dumps(c: "CompiledSchedule") -> str:
    return json.dumps(to_document(c), indent=2) + "\n"


# --- decoding -------------------------------------------------------------------

def op_from_doc(d: Mapping[str, Any]) -> Op:
    """One op dict as an :class:`Op` (``reads`` where the dict names it)."""
    return Op(**{k: d[k] for k in OP_FIELDS if k in d or k not in COUNTER_OP_KEYS},
              **({"reads": d["reads"]} if d.get("reads") is not None else {}))


def slot_from_doc(d: Mapping[str, Any] | None) -> Op | None:
    """A block slot: an op dict, or None for an empty slot."""
    return None if d is None else op_from_doc(d)


def ops_from_doc(items: Iterable[Mapping[str, Any]]) -> list[Op]:
    return [op_from_doc(d) for d in items]


def entries_from_doc(items: Iterable[Mapping[str, Any]]) -> tuple[Entry, ...]:
    """A phase list of entry dicts as :class:`Entry` records."""
    return tuple(Entry(op=op_from_doc(e["op"]), time_slot=e["time_slot"], phase=Phase(e["phase"]),
                       is_prefetch=e["is_prefetch"]) for e in items)


def edges_from_doc(items: Iterable[Mapping[str, Any]]) -> list[DepEdge]:
    return [DepEdge(e["producer"], e["consumer"], e["kind_value"], e["distance"]) for e in items]


def config_from_doc(d: Mapping[str, Any]) -> PipelineConfig:
    """The ``config`` dict as a :class:`PipelineConfig` (``derived`` is recomputed, not read)."""
    return PipelineConfig(
        depth=d["depth"], prefetch=d["prefetch"], drain_passes=d["drain_passes"],
        prologue_fill=d["prologue_fill"],
        loop_carried=LoopCarried(d["loop_carried"]["role"], d["loop_carried"]["selector"]),
        block_sizing=BlockSizing(**d["block_sizing"]), frag_order=FragOrder(**d["frag_order"]),
        m_mmas=d["m_mmas"], n_mmas=d["n_mmas"], num_partitions=d["num_partitions"],
        mma_serial=d["mma_serial"], mma_latency=d["mma_latency"],
        **{k: d[k] for k in COUNTER_CONFIG_KEYS if k in d},  # absent in ring documents
        ch0_match_field=d["ch0_match_field"], ch1_match_field=d["ch1_match_field"],
        warp_stagger=WarpStagger(**d["warp_stagger"]),
        cross_stage_rotation=d["cross_stage_rotation"])


def schedule_config_from_doc(d: Mapping[str, Any]) -> ScheduleConfig:
    """The ``schedule_config`` dict as a :class:`ScheduleConfig` (strategy by name)."""
    fields = {k: v for k, v in d.items() if k not in ("scheduling", "scheduling_name")}
    return ScheduleConfig(scheduling=d["scheduling_name"], **fields)
