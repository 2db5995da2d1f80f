"""pipeline-core target plugin for the NVIDIA A100 (sm_80): targets ``a100`` and ``a100-pingpong``
(entry point ``target_a100``, module :mod:`pipeline_core_target_a100.plugin`)."""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

__version__ = installed_version("pipeline-core-target-a100")  # pyproject.toml is the one source
