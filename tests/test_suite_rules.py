"""Rules the test suite itself keeps (README, "tox env" table): it never times the machine and it
needs nothing outside the repository."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = sorted(p for base in ("tests", "plugins", "examples")
                    for p in (ROOT / base).rglob("*.py")
                    if "tests" in p.relative_to(ROOT).parts and "build" not in p.parts)

#: the clock readers (spelled in pieces, so that this file does not match its own rule)
_READERS = ("perf" + "_counter", "mono" + "tonic", "process" + "_time", r"time\." + "time")
CLOCK = re.compile(r"\b(" + "|".join(_READERS) + r")\b|\.time\s*<")
OUTSIDE = re.compile(r"""["'/]\.\./shared|["']shared["']\s*/""")
#: goldens found from the working directory break the wheel env (tox -e wheels runs from a
#: scratch directory): tests take them from the ``golden`` fixture or tests/golden_data.py
BY_CWD = re.compile(r"\bload_golden\(")


def test_the_rules_see_the_test_files():
    assert len(TEST_FILES) > 50 and Path(__file__) in TEST_FILES


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_reads_the_clock_or_leaves_the_repository(path):
    text = path.read_text()
    assert not CLOCK.search(text), f"{path.name} reads the clock: speed belongs in benchmarks/"
    assert not OUTSIDE.search(text), f"{path.name} reads files outside the repository"
    assert not BY_CWD.search(text), f"{path.name} finds goldens from the working directory"


def test_the_patterns_fire():
    assert CLOCK.search("t0 = time." + "perf" + "_counter()")
    assert CLOCK.search("assert result.ti" + "me < 5")
    assert OUTSIDE.search('ROOT.parent / "sha' + 'red" / "goldens"')
    assert not CLOCK.search("timeline = simulate(doc)")
    assert BY_CWD.search("d = load_" + "golden(case)") and not BY_CWD.search("golden(case)")
