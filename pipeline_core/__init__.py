"""pipeline-core: compile-time software pipelining of GPU kernel loops."""
from __future__ import annotations

__version__ = "0.1.0"
