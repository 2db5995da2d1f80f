"""The kernel a schedule declares once: its kernel family and the launch geometry it is sized by.

Emitters are keyed by (target, kernel family), not by schedule name (issue 24, "Emitters keyed by
(target, kernel family)"): a schedule names the family of kernel its body is (the tile math an
emitter's family code owns) and hands over the geometry it built and validated from its
parameters, so an emitter reads that record instead of re-deriving the tile from ``-p``.  The
compiler stores it on the compiled record (``CompiledSchedule.launch``); ``pipeline-core emit``
picks the one emitter that serves the target and writes the family (docs/guide/records.md,
"Commands and emitters").
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from pipeline_core.errors import ConfigError


@runtime_checkable
class LaunchGeometry(Protocol):
    """What every family's geometry says about its launch: the threads of one CTA and the bytes
    of dynamic shared memory it asks for.  A family's own record (its CTA tile, warps or agents,
    ring stages, swizzle ...) carries these and whatever else its device code is sized by."""

    @property
    def threads(self) -> int: ...

    @property
    def smem_bytes(self) -> int: ...


def _check_family(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("KernelLaunch", "kernel_family", value,
                          "a non-empty kernel family name (e.g. gemm-mma-sync)")


def _check_geometry(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if value is not None and not isinstance(value, LaunchGeometry):
        raise ConfigError("KernelLaunch", "geometry", type(value).__name__,
                          "None or a record with int threads and smem_bytes")


@attrs.frozen(kw_only=True)
class KernelLaunch:
    """A schedule's answer to ``kernel_launch()``.

    ``kernel_family`` names the kernel its body is (``EmitterRecord.kernel_families`` lists the
    families an emitter writes); ``geometry`` is the record the schedule built and validated
    once, None for a schedule whose emitter takes its tile from its own ``-O`` options.
    """

    kernel_family: str = attrs.field(validator=_check_family)
    geometry: LaunchGeometry | None = attrs.field(default=None, validator=_check_geometry)
