"""The user guide builds offline with warnings as errors (what ``tox -e docs`` runs)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built_guide(tmp_path_factory) -> Path:
    """The guide built once for this module's tests, as ``tox -e docs`` builds it."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("sphinx_argparse_cli")
    out = tmp_path_factory.mktemp("html")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "-n", "--keep-going", "-b",
                          "html", str(ROOT / "docs"), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return out


@pytest.mark.slow
def test_the_guide_builds_and_generates_the_hook_record_and_cli_references(built_guide):
    hooks = (built_guide / "guide" / "hooks.html").read_text()
    assert "pipeline_core_register_commands" in hooks and "When:" in hooks
    cli = (built_guide / "guide" / "cli.html").read_text()
    assert "pipeline-core analyze" in cli and "--compact" in cli
    records = (built_guide / "guide" / "records.html").read_text()
    assert "pipeline_core.schedule.TargetRecord" in records and "EmitterRecord" in records


def _subcommand(parser, name: str):
    """The parser of command ``name`` (None: no such command)."""
    return next((a.choices[name] for a in parser._subparsers._group_actions if name in a.choices),
                None)


@pytest.mark.slow
def test_the_cli_reference_has_an_anchor_per_option(built_guide):
    """One linkable entry per option (docs/guide/cli.md), not ``--help`` text in a <pre>."""
    from pipeline_core.cli import documented_parser

    cli = (built_guide / "guide" / "cli.html").read_text()
    ids = set(re.findall(r'id="([^"]+)"', cli))
    assert {"pipeline-core-compile---target", "pipeline-core-compile---allow-unsafe",
            "pipeline-core-compile--T", "pipeline-core-export---format"} <= ids
    compile_ = _subcommand(documented_parser(), "compile")
    options = [opt for action in compile_._actions if action.help != argparse.SUPPRESS
               for opt in action.option_strings]
    assert len(options) > 10
    missing = [opt for opt in options if f"pipeline-core-compile-{opt}" not in ids]
    assert not missing, f"no anchor for compile {missing}"
    assert "usage: pipeline-core compile" not in cli  # no --help dump


def test_the_documented_parser_has_the_plugins_commands(tmp_path, monkeypatch):
    """The reference lists plugin commands too: documented_parser builds with a plugin host."""
    from pipeline_core.cli import build_parser, documented_parser

    (tmp_path / "cli_doc_plugin.py").write_text(textwrap.dedent("""
        from pipeline_core.commands import CommandRecord
        from pipeline_core.plugin_api import hookimpl

        @hookimpl
        def pipeline_core_register_commands():
            return [CommandRecord(name="tally", help="count things",
                                  add_arguments=lambda p: p.add_argument("--upto"),
                                  run=lambda args, host: 0)]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PIPELINE_CORE_PLUGINS", "cli_doc_plugin")
    tally = _subcommand(documented_parser(), "tally")
    assert tally is not None and any("--upto" in a.option_strings for a in tally._actions)
    assert _subcommand(build_parser(), "tally") is None


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
    """Section titles the CLI reference generates (sphinx-argparse-cli: one per command)."""
    from pipeline_core.cli import build_parser

    parser = build_parser()
    names = {name for action in parser._subparsers._group_actions for name in action.choices}
    return {"pipeline-core"} | {f"pipeline-core {n}" for n in names} | names


def section_titles(page: Path) -> set[str]:
    titles = set(headings(page))
    if "{sphinx_argparse_cli}" in page.read_text():
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
