"""Shared helpers for the hazard-checker tests: golden documents and fix application."""
from __future__ import annotations

import copy
import json
from functools import lru_cache

from golden_data import GOLDENS

__all__ = ["GOLDENS", "PRODUCTION_DB", "SINGLE_BUFFER", "TESTCFG", "apply_fix", "load", "set_wait"]
PRODUCTION_DB = ["pingpong_bf16", "fourwave_fp8", "fourwave_fp8_bm64"]
SINGLE_BUFFER = ["default_matmul", "default_matmul_t1"]
TESTCFG = "pingpong_testcfg_identity_manual_waits"
WAIT_TAG = {"vm": 129, "lgkm": 130}


@lru_cache(maxsize=None)
def _load(case: str) -> str:
    return (GOLDENS / f"{case}.json").read_text()


def load(case: str) -> dict:
    """A fresh copy of a golden document (tests may mutate it)."""
    return json.loads(_load(case))


def apply_fix(document: dict, fix) -> dict:
    """Apply a ``lower_wait`` / ``insert_wait`` Fix to a document copy."""
    doc = copy.deepcopy(document)
    entries = doc[fix.phase]
    if fix.action == "lower_wait":
        entries[fix.index]["op"]["wait_value"] = fix.value
    elif fix.action == "insert_wait":
        wait = copy.deepcopy(entries[fix.index])
        wait["op"].update(tag=WAIT_TAG[fix.counter], role=4, wait_value=fix.value, channel=-1,
                          stage=0, subtile=0, k_offset=255, tag_name=f"WAIT_{fix.counter.upper()}")
        entries.insert(fix.index, wait)
    else:
        raise ValueError(f"cannot apply {fix.action}")
    for n, e in enumerate(entries):
        e["index"] = n
    return doc


def set_wait(document: dict, phase: str, index: int, value: int) -> dict:
    doc = copy.deepcopy(document)
    assert doc[phase][index]["op"]["tag"] in (129, 130)
    doc[phase][index]["op"]["wait_value"] = value
    return doc
