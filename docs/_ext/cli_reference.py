"""``{cli-reference}`` directive: every subcommand's ``--help``, generated from argparse."""
from __future__ import annotations

import contextlib
import io

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _helps() -> list[tuple[str, str]]:
    from pipeline_core.cli import build_parser

    parser = build_parser()
    out = [("pipeline-core", parser.format_help())]
    for action in parser._subparsers._group_actions:  # argparse keeps subparsers here
        for name, sub in sorted(action.choices.items()):
            out.append((f"pipeline-core {name}", sub.format_help()))
    return out


class CliReference(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        result: list[nodes.Node] = []
        for title, text in _helps():
            section = nodes.section(ids=[nodes.make_id(title)])
            section += nodes.title(text=title)
            section += nodes.literal_block(text, text)
            result.append(section)
        return result


def setup(app):
    app.add_directive("cli-reference", CliReference)
    return {"parallel_read_safe": True}
