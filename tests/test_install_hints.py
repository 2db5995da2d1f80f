"""Install hints name our distribution, ``gpu-pipeline-core``, never ``pipeline-core``.

"pipeline-core" on the package index is an unrelated project (pyproject.toml says why the names
differ), so ``pip install 'pipeline-core[plot]'`` installs someone else's code (issue 25).
"""
from __future__ import annotations

import re
from importlib.metadata import metadata

from guide_pages import ROOT

from pipeline_core import DISTRIBUTION, PLOT_INSTALL
from pipeline_core.testing import run_cli

#: ``pip install pipeline-core[...]`` with or without quotes: the core's extras under the wrong
#: name (the plugins' own distributions, ``pipeline-core-nvidia-h100[cuda]``, are theirs)
WRONG = re.compile(r"pip install +['\"]?pipeline-core\[")
SKIPPED_DIRS = {".venv", "__pycache__", "build", "dist", ".tox", ".mypy_cache"}
TEXT_SUFFIXES = {".md", ".py", ".rst", ".txt", ".toml", ".cfg", ".ini", ".json"}


def _text_files():
    for top in ("README.md", "docs", "pipeline_core", "plugins", "examples"):
        path = ROOT / top
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*")):
            parts = set(file.relative_to(ROOT).parts)
            if (file.is_file() and file.suffix in TEXT_SUFFIXES and not parts & SKIPPED_DIRS
                    and not any(p.endswith(".egg-info") for p in parts)):
                yield file


def test_no_hint_installs_the_unrelated_pipeline_core():
    files = list(_text_files())
    assert ROOT / "README.md" in files and len(files) > 50  # the walk reached the tree
    wrong = [f"{file.relative_to(ROOT)}:{n}" for file in files
             for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
             if WRONG.search(line)]
    assert wrong == []


def test_the_hint_names_the_distribution_pyproject_builds():
    installed = metadata(DISTRIBUTION)  # the name and extras pyproject.toml built
    assert "plot" in installed.get_all("Provides-Extra")
    assert PLOT_INSTALL == f"pip install '{DISTRIBUTION}[plot]'"
    assert not WRONG.search(PLOT_INSTALL)
    help_text = " ".join(run_cli(["export", "--help"]).stdout.split())  # argparse wraps it
    assert PLOT_INSTALL in help_text
