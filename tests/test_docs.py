"""The user guide builds offline with warnings as errors (what ``tox -e docs`` runs)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_guide_builds_and_generates_the_hook_record_and_cli_references(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "-n", "--keep-going", "-b",
                          "html", str(ROOT / "docs"), str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    hooks = (tmp_path / "guide" / "hooks.html").read_text()
    assert "pipeline_core_register_commands" in hooks and "When:" in hooks
    cli = (tmp_path / "guide" / "cli.html").read_text()
    assert "pipeline-core analyze" in cli and "--compact" in cli
    records = (tmp_path / "guide" / "records.html").read_text()
    assert "pipeline_core.schedule.TargetRecord" in records and "EmitterRecord" in records


# --- citations of the guide from code, and links between its pages --------------------------

import re  # noqa: E402

from guide_pages import anchors, headings, links  # noqa: E402

#: a page of the docs folder (optionally with ``#anchor``) and the quoted section titles that
#: follow it: (PAGE, "Drain mask"), (PAGE, "A", "B"), (PAGE, "A" to "B"); this file spells its
#: examples in pieces so that it passes its own rule
CITATION = re.compile(r'(?P<page>docs/[\w./-]+?\.md)(?:#(?P<anchor>[\w-]+))?'
                      r'(?P<titles>(?:\s*(?:,|to)\s*"[^"\n]+")*)')
CODE_FILES = sorted(p for base in ("pipeline_core", "plugins", "examples", "tests")
                    for p in (ROOT / base).rglob("*.py") if "build" not in p.parts)


def _cli_titles() -> set[str]:
    """Section titles the ``{cli-reference}`` directive generates (docs/_ext/cli_reference.py)."""
    from pipeline_core.cli import build_parser

    parser = build_parser()
    names = {name for action in parser._subparsers._group_actions for name in action.choices}
    return {"pipeline-core"} | {f"pipeline-core {n}" for n in names} | names


def section_titles(page: Path) -> set[str]:
    titles = set(headings(page))
    if "{cli-reference}" in page.read_text():
        titles |= _cli_titles()
    return titles


def citations(text: str):
    """(page, anchor, [titles]) of every docs/ citation; comment markers across lines joined."""
    flat = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", text)
    for m in CITATION.finditer(flat):
        yield m.group("page"), m.group("anchor"), re.findall(r'"([^"]+)"', m.group("titles"))


def test_every_guide_citation_in_code_names_a_page_and_section_that_exist():
    cited = 0
    for path in CODE_FILES:
        for page, anchor, titles in citations(path.read_text()):
            cited += 1
            where = f"{path.relative_to(ROOT)} cites {page}"
            assert (ROOT / page).is_file(), f"{where}: no such file"
            if anchor:
                assert anchor in anchors(ROOT / page), f"{where}#{anchor}: no such section"
            for title in titles:
                assert title in section_titles(ROOT / page), f'{where}, "{title}": no such section'
    assert cited > 80


def test_the_citation_rule_fires(tmp_path):
    page = "do" + "cs/guide/reference-behaviours.md"
    found = list(citations(f'# ({page}, "Drain mask",\n#: "No such section")'))
    assert found == [(page, None, ["Drain mask", "No such section"])]
    assert "No such section" not in section_titles(ROOT / found[0][0])
    assert "Drain mask" in section_titles(ROOT / found[0][0])
    assert "pipeline-core analyze" in section_titles(ROOT / "docs" / "guide" / "cli.md")


def test_links_between_guide_pages_resolve():
    pages = sorted((ROOT / "docs").rglob("*.md"))
    checked = 0
    for page in pages:
        for target, anchor in links(page):
            linked = (page.parent / target).resolve()
            assert linked.is_file(), f"{page.relative_to(ROOT)} links to {target}: no such page"
            if anchor:
                checked += 1
                assert anchor in anchors(linked), f"{page.relative_to(ROOT)} links to {target}#{anchor}"
    assert checked >= 10
