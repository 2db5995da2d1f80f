"""``compile --format json``: the schedule document (docs/document-format.md), encoded by :mod:`pipeline_core.document`."""
from __future__ import annotations

from pipeline_core.document import (FLAG_NAMES, SLOT_NAMES, block_doc, config_doc, dumps, edge_doc,
                                    entry_doc, op_doc, schedule_config_doc, slot_doc, to_document)

__all__ = ["FLAG_NAMES", "SLOT_NAMES", "block_doc", "config_doc", "dumps", "edge_doc", "entry_doc",
           "op_doc", "schedule_config_doc", "slot_doc", "to_document"]
