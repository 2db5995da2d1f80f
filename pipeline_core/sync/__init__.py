"""Target-declared synchronisation: channels, op effects, barrier kinds (see ``model``)."""
from __future__ import annotations

from pipeline_core.sync.model import BarrierKind, BoundSync, Channel, ChannelKind, Effect, SyncModel

__all__ = ["BarrierKind", "BoundSync", "Channel", "ChannelKind", "Effect", "SyncModel"]
