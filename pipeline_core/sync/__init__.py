"""Target-declared synchronisation: channels, op effects, barrier kinds (see ``model``)."""
from __future__ import annotations

from pipeline_core.sync.model import (BarrierKind, BlockBinding, BoundSync, BulkStoreChannel,
                                     Channel, ChannelKind, ClusterSync, CrossCtaReduction, Effect,
                                     NamedBarriers, SyncModel)

__all__ = ["BarrierKind", "BlockBinding", "BoundSync", "BulkStoreChannel", "Channel", "ChannelKind",
           "ClusterSync", "CrossCtaReduction", "Effect", "NamedBarriers", "SyncModel"]
