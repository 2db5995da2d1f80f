"""Load the reference's golden files as pipeline-core records (for tests).

The documents live in ``tests/goldens/`` (captured from the reference; their layout is
described in ``docs/document-format.md``).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pipeline_core.document import (config_from_doc, edges_from_doc, ops_from_doc, slot_from_doc,
                                    schedule_config_from_doc)
from pipeline_core.ops import Op

GOLDENS = Path(__file__).resolve().parent / "goldens"
CASES = sorted(p.stem for p in GOLDENS.glob("*.json"))
DOUBLE_BUFFER_CASES = [c for c in CASES if not c.startswith("default_matmul")]


@lru_cache(maxsize=None)
def load(case: str) -> dict:
    return json.loads((GOLDENS / f"{case}.json").read_text())


# Decoding is the document codec's (pipeline_core.document); these names are kept for the tests.
op_from = slot_from_doc  # block slots may be null
ops_from = ops_from_doc
edges_from = edges_from_doc
config_from = config_from_doc
schedule_config_from = schedule_config_from_doc


def entry_ops(items) -> list[Op]:
    return [op_from(e["op"]) for e in items]
