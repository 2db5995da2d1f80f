"""pipeline-core kernel family ``gemv`` (y = A @ x on the H100): the Hopper kit's worked
example (docs/guide/kernel-family.md)."""
from __future__ import annotations

from pipeline_core_family_gemv.call import GemvArgumentError, gemv

__all__ = ["GemvArgumentError", "gemv"]
