"""Reading the user guide's Markdown the way the suite needs it: headings and their anchors
(MyST's ``myst_heading_anchors`` slugs), the files and commands a page shows, its links."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```\s*$", re.M | re.S)
#: a file shown in full: a MyST code-block whose caption is its path in the project
_FILE_BLOCK = re.compile(r"^```\{code-block\}[^\n]*\n:caption: (?P<path>[^\n]+)\n\n(?P<body>.*?)^```\s*$",
                         re.M | re.S)
_CONSOLE = re.compile(r"^```console\n(?P<body>.*?)^```\s*$", re.M | re.S)
_TEXT = re.compile(r"^```text\n(?P<body>.*?)^```\s*$", re.M | re.S)
#: a Markdown link to another page of the guide, with an optional #anchor
_LINK = re.compile(r"\]\((?P<page>[\w./-]+\.md)(?:#(?P<anchor>[\w-]+))?\)")


def slug(title: str) -> str:
    """MyST's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", title).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"\s+", "-", text)


def headings(page: Path) -> list[str]:
    """The page's heading titles, outside fenced code."""
    text = _FENCE.sub("", page.read_text())
    return [m.group(2) for m in _HEADING.finditer(text)]


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in headings(page)}


def shown_files(page: Path) -> dict[str, str]:
    """{caption path: content} of every file the page shows in full."""
    return {m.group("path").strip(): m.group("body") for m in _FILE_BLOCK.finditer(page.read_text())}


def commands(page: Path) -> list[tuple[str, str]]:
    """(command, output shown after it) for every ``$ `` line of the console blocks, in order."""
    return [pair for block in _CONSOLE.finditer(page.read_text())
            for pair in _console_commands(block.group("body"))]


def steps(page: Path) -> list[tuple[str, str, str]]:
    """The page in reading order: ``("file", path, content)`` for each file shown in full and
    ``("run", command, shown output)`` for each ``$ `` line, so a file the reader writes after
    a command (over what the command generated) is written then."""
    text = page.read_text()
    found: list[tuple[int, tuple[str, str, str]]] = [
        (m.start(), ("file", m.group("path").strip(), m.group("body")))
        for m in _FILE_BLOCK.finditer(text)]
    for block in _CONSOLE.finditer(text):
        for cmd, shown in _console_commands(block.group("body")):
            found.append((block.start(), ("run", cmd, shown)))
    return [step for _, step in sorted(found, key=lambda item: item[0])]


def session_script(base: Path, page_steps: list[tuple[str, str, str]],
                   replace: dict[str, str]) -> str:
    """One bash session running ``page_steps`` in ``base`` (so `. .venv/bin/activate` lasts):
    each command's stdout, stderr and status kept apart (``out{i}``, ``err{i}``, ``rc{i}``, i
    counting commands), each shown file written (from ``base/.page-files``) where the page
    shows it; ``replace`` maps the page's placeholders to real paths."""
    staged = base / ".page-files"
    staged.mkdir(parents=True, exist_ok=True)
    lines = ["cd " + str(base)]
    ran = 0
    for n, (kind, what, body) in enumerate(page_steps):
        if kind == "file":
            (staged / str(n)).write_text(body)
            lines.append(f"mkdir -p \"$(dirname '{what}')\" && cp .page-files/{n} '{what}'")
            continue
        for placeholder, real in replace.items():
            what = what.replace(placeholder, real)
        lines.append(f"{{ {what} ; }} > out{ran} 2> err{ran}; echo $? > rc{ran}")
        ran += 1
    lines.append("command -v pipeline-core > which")
    return "\n".join(lines) + "\n"


def run_page(base: Path, page_steps: list[tuple[str, str, str]],
             replace: dict[str, str]) -> list[tuple[str, str, int, str, str]]:
    """Run the page's steps in ``base`` as a reader would, in a shell where the Python running
    the suite comes first on PATH and no virtual environment is active; (command, shown output,
    exit status, stdout, stderr) per command.  The reader's `.venv` must be the one in use by
    the end (its ``pipeline-core`` is the one found)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(var, None)
    subprocess.run(["bash", "-c", session_script(base, page_steps, replace)], env=env, check=True,
                   timeout=1800)
    assert (base / "which").read_text().strip() == str(base / ".venv" / "bin" / "pipeline-core")
    runs = [(cmd, shown) for kind, cmd, shown in page_steps if kind == "run"]
    return [(cmd, shown, int((base / f"rc{i}").read_text()), (base / f"out{i}").read_text(),
             (base / f"err{i}").read_text()) for i, (cmd, shown) in enumerate(runs)]


def _console_commands(body: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], ""))
        elif out:
            cmd, shown = out[-1]
            out[-1] = (cmd, shown + line + "\n")
    return out


def text_blocks(page: Path) -> list[str]:
    return [m.group("body") for m in _TEXT.finditer(page.read_text())]


def links(page: Path) -> list[tuple[str, str | None]]:
    """(linked page relative to this one, anchor or None), outside fenced code."""
    text = _FENCE.sub("", page.read_text())
    return [(m.group("page"), m.group("anchor")) for m in _LINK.finditer(text)]


def assert_page_ran_as_shown(results: list[tuple[str, str, int, str, str]]) -> int:
    """Every command of a page run by :func:`run_page` did what the page shows: a shown
    ``error: `` line is the command's one line of stderr with exit 2 (a mistake the page makes
    on purpose); any other command exits 0 with the output shown, and a pytest run passes the
    page's 3 tests.  Returns how many commands' outputs were compared."""
    checked = 0
    for cmd, shown, rc, out, err in results:
        if shown.startswith("error: "):
            assert rc == 2 and err == shown and out == "", (cmd, rc, out, err)
            continue
        assert rc == 0, (cmd, out, err)
        if shown:
            assert out == shown, (cmd, out)
            checked += 1
        if cmd.startswith("python -m pytest"):
            assert "3 passed" in out, out
    return checked


def load_source(tmp_path: Path, monkeypatch: Any, name: str, source: str) -> ModuleType:
    """A module a page shows (or a changed copy), written under ``tmp_path`` and imported as
    ``name`` (not installed)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
