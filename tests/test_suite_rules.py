"""Rules the test suite itself keeps (docs/guide/contributing.md, "The tox environments"): it never times the machine and it
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


#: code cites the project's own docs (docs/ in the repository), never the spec the project was
#: built from, which is not in it; spelled in pieces so this file passes its own rule
_ABSENT = ("REFERENCE" + r"\.md", "REFERENCE" + r" \u00a7", "Appendix" + " [AB]",
           "FORMAT" + r"\.md", "TARGET_" + r"NEUTRAL\.md", "NVIDIA" + r"\.md", r"\.\./" + "shared")
ABSENT_SPEC = re.compile("|".join(_ABSENT))
#: a section sign cites a section: only of one of our own docs, on the same line
SECTION_SIGN = "\u00a7"
CODE_FILES = sorted(p for base in ("pipeline_core", "plugins", "examples", "tests")
                    for p in (ROOT / base).rglob("*.py") if "build" not in p.parts)


def _cites_an_absent_spec(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if ABSENT_SPEC.search(line) or (SECTION_SIGN in line and "docs/" not in line)]


@pytest.mark.parametrize("path", CODE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_cites_the_guide_not_an_absent_spec(path):
    found = _cites_an_absent_spec(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} cites a spec outside the repository: {found[0]}"


def test_the_absent_spec_rule_fires():
    assert _cites_an_absent_spec("# see REFERENCE" + ".md " + SECTION_SIGN + "10")
    assert _cites_an_absent_spec('"""Wait derivation (Appendix' + ' B 8.6)."""')
    assert _cites_an_absent_spec("# the contract of FORMAT" + ".md")
    assert _cites_an_absent_spec("# (" + SECTION_SIGN + "8 verify_schedule)")
    assert not _cites_an_absent_spec('# (docs/design/amd-waits-and-warps.md ' + SECTION_SIGN + '6)')
    assert not _cites_an_absent_spec('DERIVED, REFERENCE = "derived", "reference"')
    assert len(CODE_FILES) > 100
