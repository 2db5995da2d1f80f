"""Shared golden-driven fixtures for the program-layer tests."""
from __future__ import annotations

from functools import lru_cache

try:  # tests/ is on sys.path under pytest's default (prepend) import mode
    from golden_data import (config_from, edges_from, load, op_from, ops_from,
                             schedule_config_from)
except ImportError:  # pragma: no cover - when tests/ is itself a package
    from tests.golden_data import (config_from, edges_from, load, op_from, ops_from,
                                   schedule_config_from)

from pipeline_core.config import ScheduleConfig
from pipeline_core.ops import NONE_OP, Entry
from pipeline_core.program import BlockSpec, build_kernel_program

DB_CASES = ("pingpong_bf16", "pingpong_testcfg_identity_manual_waits", "fourwave_fp8",
            "fourwave_fp8_bm64")
FOURWAVE_CASES = ("fourwave_fp8", "fourwave_fp8_bm64")
PINGPONG_CASES = ("pingpong_bf16", "pingpong_testcfg_identity_manual_waits")


@lru_cache(maxsize=None)
def inputs(case: str):
    """(body, order, config, schedule config, edges) of a double-buffer golden."""
    d = load(case)
    return (tuple(ops_from(d["body"])), tuple(d["scheduler"]["order"]), config_from(d["config"]),
            schedule_config_from(d["schedule_config"]), tuple(edges_from(d["edges"])))


@lru_cache(maxsize=None)
def built(case: str):
    """build_kernel_program driven by the golden order."""
    body, order, cfg, sched, edges = inputs(case)
    return build_kernel_program(body, cfg, sched, edges, order=order)


def entries_from(items) -> list[Entry]:
    return [Entry(op_from(e["op"]), e["time_slot"], e["phase"], e["is_prefetch"]) for e in items]


def slot(d) -> object:
    """A golden op slot (null = absent)."""
    return op_from(d) if d is not None else NONE_OP


def block_from_golden(gb: dict) -> BlockSpec:
    """A BlockSpec built straight from a golden ``blocks`` entry."""
    from pipeline_core.program import SLOT_NAMES
    return BlockSpec(**{s: slot(gb[s]) for s in SLOT_NAMES}, **gb["flags"])


# --- the reference tests' ping-pong programs
# (docs/guide/reference-behaviours.md, "The reference's own tests") ----

def pingpong_body_bf16():
    """DeclarativeSchedule body with max_globals 1 (the pingpong_bf16 golden body)."""
    return inputs("pingpong_bf16")[0]


def pingpong_body_fp8():
    """The max_globals 0 body (docs/guide/reference-behaviours.md, "Body transforms"): the bf16 body in its greedy order."""
    body, order = inputs("pingpong_bf16")[:2]
    return tuple(body[i] for i in order)


def bf16_config(vm: int = 4):
    """mi355x_target(vm, vm) (max_globals 1), as _build_bf16_program uses."""
    cfg = inputs("pingpong_bf16")[2]
    return cfg.evolve(vm_per_load_a=vm, vm_per_load_b=vm)


def fp8_config(vm: int = 4):
    """mi355x_target(vm, vm, max_globals=0), as _build_fp8_program uses."""
    cfg = bf16_config(vm)
    return cfg.evolve(block_sizing=cfg.block_sizing.__class__(cfg.block_sizing.heavy,
                                                              cfg.block_sizing.light, 0))


def csp_sched(lgkm: int, **kw) -> ScheduleConfig:
    return ScheduleConfig(scheduling="CSP", auto_waits=True, lgkm_per_load_a=lgkm,
                          lgkm_per_load_b=lgkm, **kw)


BF16_CSP_ORDER = (0, 1, 2, 3, 4, 6, 7, 5, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 17, 20, 21,
                  22, 23)
IDENTITY_24 = tuple(range(24))
