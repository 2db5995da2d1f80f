"""Judge the reference's coarse LDS ANTI edges that an order violates (placeholder)."""
from __future__ import annotations


def classify_anti_edges(document, program, iterations):
    return ()
