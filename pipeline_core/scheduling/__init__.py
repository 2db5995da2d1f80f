"""Ordering strategies, looked up by name (IDENTITY, GREEDY, CSP built in; plugins add more)."""
from __future__ import annotations

from pipeline_core.scheduling.builtin import get_strategy, strategy_names
from pipeline_core.scheduling.registry import SchedulingRequest, Strategy

__all__ = ["SchedulingRequest", "Strategy", "get_strategy", "strategy_names"]
