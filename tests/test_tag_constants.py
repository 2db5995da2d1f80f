"""Tag numbers are named once (``pipeline_core.ops``: ``FrameworkTag``, ``MAX_KERNEL_TAG``).

Issue 24 found 13 lines comparing tags against a literal 128; a reader then has to know that 127
is the last kernel tag.  This test keeps the numbers in their one home.
"""
from __future__ import annotations

import re
from pathlib import Path

import pipeline_core

#: a tag (``tag``, ``o.tag``, ``op["tag"]``) compared with or set to a framework-range literal
TAG_LITERAL = re.compile(r"""\btag\b["'\]]*\s*(?:[<>]=?|[!=]=|=)\s*(?:12[7-9]|13[0-3]|255)\b""")


def tag_literal_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if TAG_LITERAL.search(line)]


def _sources() -> list[Path]:
    core = Path(pipeline_core.__file__).parent
    repo = core.parent
    files = sorted(core.rglob("*.py"))
    for package in sorted((repo / "plugins").glob("*/pipeline_core_*")) + sorted((repo / "examples").glob("*/*")):
        if package.is_dir():
            files += sorted(package.rglob("*.py"))
    return files


def test_the_rule_fires_on_a_literal_tag_bound():
    assert tag_literal_lines('if o["tag"] < 128:\n    pass\nx = o.tag >= 128\nOp(tag=129)\n') == [1, 3, 4]
    assert tag_literal_lines("if o.tag <= MAX_KERNEL_TAG:\n    n = 128\n") == []


def test_no_source_compares_a_tag_with_a_literal_number():
    hits = [f"{path}:{n}" for path in _sources() for n in tag_literal_lines(path.read_text())]
    assert len(_sources()) > 100
    assert hits == []


def test_the_named_bounds_agree():
    from pipeline_core.ops import MAX_KERNEL_TAG, FrameworkTag
    assert min(FrameworkTag) == MAX_KERNEL_TAG + 1
