"""pipeline-core target plugin for the NVIDIA H100 (sm_90a), mma.sync family.

Importing the package is cheap and needs no GPU package: the target (``plugin``), its sync,
cost and machine models load with the core; ``cuda`` ships the device helpers as text;
``runtime`` imports CuPy only when a kernel is built.  ``matmul``, ``scaled_mm``, ``grouped_mm``
and ``scaled_grouped_mm`` (docs/guide/matmul.md) are loaded on first use from ``matmul_call``, which imports torch and
CuPy only when it runs.
"""
from __future__ import annotations

from typing import Any

from pipeline_core.plugin_api import installed_version

TARGET_NAME = "h100"
__version__ = installed_version("pipeline-core-nvidia-h100")  # pyproject.toml is the one source

#: the call's public names, loaded from ``matmul_call`` on first access (PEP 562)
_CALL_NAMES = ("matmul", "scaled_mm", "grouped_mm", "scaled_grouped_mm", "MatmulArgumentError",
               "MatmulTypeError")


def __getattr__(name: str) -> Any:
    if name in _CALL_NAMES:
        from pipeline_core_nvidia_h100 import matmul_call

        return getattr(matmul_call, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
