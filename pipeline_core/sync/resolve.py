"""Find the sync model of the target a compiled schedule or a document was made for.

One lookup for every consumer (checker, timing model, exports): the compiled
schedule's own :class:`~pipeline_core.config.TargetProfile` when it carries a
model, else the registered target of that name, built with its parameter
defaults.  A target that declares none is an error naming it; no consumer
falls back to another GPU's model.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeline_core.errors import TargetFactError, UnknownNameError
from pipeline_core.sync.model import SyncModel

if TYPE_CHECKING:
    from pipeline_core.compiled import CompiledSchedule
    from pipeline_core.config import TargetProfile
    from pipeline_core.plugins import PluginHost


def document_target(document: Mapping[str, Any]) -> str | None:
    """The target a document was compiled for (``target`` key, or ``--target`` in ``cli``)."""
    target = document.get("target") if isinstance(document, Mapping) else None
    if isinstance(target, str) and target:
        return target
    cli = document.get("cli") if isinstance(document, Mapping) else None
    if isinstance(cli, list) and "--target" in cli:
        i = cli.index("--target")
        if i + 1 < len(cli) and isinstance(cli[i + 1], str):
            return cli[i + 1]
    return None


def target_profile(target: str, host: PluginHost | None = None) -> TargetProfile:
    """The registered target ``target`` built with its parameter defaults."""
    if host is None:
        from pipeline_core.plugins import default_host
        host = default_host()
    record = host.get_target(target)
    return record.factory(**{p.name: p.default for p in record.params})


def _require(profile: TargetProfile, target: str) -> SyncModel:
    sync = getattr(profile, "sync", None)
    if sync is None:
        raise TargetFactError(target, "sync",
                              f"target {target!r} declares no sync model (TargetProfile.sync): "
                              "what its waits count and what its barriers publish is unknown, so "
                              "its schedules cannot be checked or timed")
    return sync


def sync_for_target(target: str | None, host: PluginHost | None = None) -> SyncModel:
    """The sync model of the registered target ``target``."""
    if not target:
        raise TargetFactError("", "sync", "the schedule names no target, so its sync model is "
                                          "unknown; pass --target")
    return _require(target_profile(target, host), target)


def sync_for_compiled(compiled: CompiledSchedule, host: PluginHost | None = None) -> SyncModel:
    """The sync model of a :class:`~pipeline_core.compiled.CompiledSchedule`."""
    profile = getattr(compiled, "target_profile", None)
    if profile is not None and getattr(profile, "sync", None) is not None:
        return profile.sync
    return sync_for_target(getattr(compiled, "target_name", "") or None, host)


def declared_sync(compiled: CompiledSchedule, host: PluginHost | None = None) -> SyncModel | None:
    """The compiled schedule's sync model, or None when its target declares none.

    For views that can do without one (the text listing); the checker and the
    timing model use :func:`sync_for_compiled`, which refuses.
    """
    try:
        return sync_for_compiled(compiled, host)
    except (TargetFactError, UnknownNameError):
        return None


def sync_for_document(document: Mapping[str, Any], host: PluginHost | None = None,
                      target: str | None = None) -> SyncModel:
    """The sync model of the target ``document`` names (or ``target`` when given)."""
    return sync_for_target(target or document_target(document), host)


def clock_for_target(target: str | None, host: PluginHost | None = None) -> float | None:
    """The target's clock in GHz (None: not declared, or no target)."""
    if not target:
        return None
    return getattr(target_profile(target, host), "clock_ghz", None)


def clock_for_compiled(compiled: CompiledSchedule, host: PluginHost | None = None) -> float | None:
    profile = getattr(compiled, "target_profile", None)
    if profile is not None and getattr(profile, "clock_ghz", None) is not None:
        return profile.clock_ghz
    try:
        return clock_for_target(getattr(compiled, "target_name", "") or None, host)
    except UnknownNameError:  # compiled for a name no host registers (tools, tests)
        return None
