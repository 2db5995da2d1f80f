"""pipeline-core target plugin for the NVIDIA H100 (sm_90a), mma.sync family.

Importing the package is cheap and needs no GPU package: the target (``plugin``), its sync,
cost and machine models load with the core; ``cuda`` ships the device helpers as text;
``runtime`` imports CuPy only when a kernel is built.
"""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

TARGET_NAME = "h100"
__version__ = installed_version("pipeline-core-nvidia-h100")  # pyproject.toml is the one source
