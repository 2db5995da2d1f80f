"""Reading the user guide's Markdown the way the suite needs it: headings and their anchors
(MyST's ``myst_heading_anchors`` slugs), the files and commands a page shows, its links."""
from __future__ import annotations

import re
from pathlib import Path

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
    out: list[tuple[str, str]] = []
    for block in _CONSOLE.finditer(page.read_text()):
        for line in block.group("body").splitlines():
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
