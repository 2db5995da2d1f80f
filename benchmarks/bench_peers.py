"""The peers the benchmarks time against (cuBLAS, Triton, SDPA, ...), from
``../shared/tools/gemm_anchors.py`` outside this repository: one loader for every GPU script,
so each reads the same file the same way (a script run as ``python3 benchmarks/X.py`` finds
this module beside it).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def anchors(path: str | Path) -> ModuleType:
    """The anchors module at ``path`` (its ``gemm_peers()``, ``attention_peers()``), loaded
    by file: it is not a package, and lives beside the checkout rather than in it."""
    spec = importlib.util.spec_from_file_location("anchors", path)
    assert spec is not None and spec.loader is not None, f"--anchors {path}: not a Python file"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
