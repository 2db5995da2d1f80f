"""The mma.sync emitters on any target that offers their contract: its sync tags in this
plugin's terms, and the architecture the kernel is written for.

The ``cuda`` and ``cuda-pingpong`` emitters serve a capability (``contracts.MMA_SYNC_CP_ASYNC``),
not the h100 targets by name, so a target plugin for another GPU (``a100``, sm_80) gets their
kernels without writing an emitter.  Its kernel tags are its family's (copy-ring's 0-4,
ping-pong's 0-5, the same numbers on every target of the family), but its sync model numbers its
own waits and barriers (128-254): :func:`own_terms` reads them by what they are (the wait and
commit of the channel named ``cp_async``, an aligned or a non-aligned barrier) and renames each to
this plugin's tag, so the emitters' dispatch tables stay the h100's, and on an h100 target every
tag is its own (the emitted source is the same byte for byte).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline_core.plugin_api import CompiledSchedule, Entry, ProgramError, SyncModel

from pipeline_core_nvidia_h100.contracts import H100_ARCH
from pipeline_core_nvidia_h100.sync import (BAR_SYNC_ALIGNED, BARRIER_SYNC_NONALIGNED,
                                            COMMIT_CP_ASYNC, CP_ASYNC, WAIT_CP_ASYNC)


def sync_renames(sync: SyncModel, emitter: str) -> dict[int, int]:
    """The target's sync tags -> this plugin's: the ``cp_async`` channel's wait and commit, each
    barrier by its alignment.  A target without the channel is refused, naming it."""
    channels = {c.name: c for c in sync.channels}
    if CP_ASYNC not in channels:
        raise ProgramError(f"emitter {emitter}: the sync model {sync.name} declares no channel "
                           f"{CP_ASYNC} (cp.async commit groups); declared: "
                           f"{', '.join(channels) or 'none'}")
    channel = channels[CP_ASYNC]
    renames = {channel.wait_tag: WAIT_CP_ASYNC}
    if channel.commit_tag is not None:
        renames[channel.commit_tag] = COMMIT_CP_ASYNC
    for barrier in sync.barriers:
        renames[barrier.tag] = BAR_SYNC_ALIGNED if barrier.aligned else BARRIER_SYNC_NONALIGNED
    return renames


def renamed(entries: Sequence[Entry], renames: Mapping[int, int]) -> tuple[Entry, ...]:
    """``entries`` with each sync tag renamed (the same entries where nothing changes)."""
    return tuple(e if renames.get(e.op.tag, e.op.tag) == e.op.tag
                 else Entry(op=e.op.evolve(tag=renames[e.op.tag]), time_slot=e.time_slot,
                            phase=e.phase, is_prefetch=e.is_prefetch)
                 for e in entries)


def arch_of(compiled: CompiledSchedule) -> str:
    """The architecture the kernel is written for: the target's (``TargetProfile.arch``), else
    this plugin's own."""
    profile = compiled.target_profile
    return (profile.arch if profile is not None else "") or H100_ARCH


def arch_note(compiled: CompiledSchedule) -> str:
    """A heading line naming the architecture and how to build for it, for a target whose
    architecture is not the h100's (on an h100 target: nothing, the source as it always was)."""
    arch = arch_of(compiled)
    if arch == H100_ARCH:
        return ""
    virtual = arch.replace("sm_", "compute_")
    return (f"// Architecture {arch} (target {compiled.target_name}): build with -arch={arch}, or "
            f"-arch={virtual} for PTX the driver compiles for a newer GPU.\n")
