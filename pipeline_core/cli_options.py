"""The command-line options and parser behaviour every ``pipeline-core`` command shares.

Why apart from :mod:`pipeline_core.cli`: the commands that live with their layer
(``check``, ``analyze``) add these options too, and the CLI imports those commands; with the
shared spellings here, neither imports the other's module (docs/guide/architecture.md, "Architecture").
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Sequence

EXIT_OK, EXIT_UNSAFE, EXIT_INPUT, EXIT_PLUGINS = 0, 1, 2, 3
EXIT_INTERNAL = 70  #: EX_SOFTWARE (sysexits.h): our bug, never the user's input or a plugin's
EXIT_INTERRUPTED = 130  #: 128 + SIGINT, as shells report Ctrl-C
EXIT_BROKEN_PIPE = 141  #: 128 + SIGPIPE, as shells report a writer whose reader went away


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line, as every other refusal of the CLI
    (docs/guide/cli.md, "Exit status"): the flag and what it allows, then where the full usage is, instead of a
    5-7-line usage block above the message.  Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_INPUT, f"{self.prog}: error: {message} (`{self.prog} --help` lists "
                              "the options)\n")


def add_output_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``-o FILE`` as every command that writes output spells it."""
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write to FILE instead of stdout ('-': stdout)")


class _DeprecatedJson(argparse.Action):
    """``--json``: the old spelling of ``--format json`` (hidden from --help, warns once)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        namespace.format = "json"
        print("warning: --json is deprecated; use --format json", file=sys.stderr)


def add_format_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, choices: Sequence[str] = ("text", "json"),
                      deprecated_json: bool = False) -> None:
    """``--format text|json`` as every command spells it (``--json``: the hidden old alias)."""
    p.add_argument("--format", choices=tuple(choices), default=choices[0],
                   help=f"output format (default: {choices[0]})")
    if deprecated_json:
        p.add_argument("--json", action=_DeprecatedJson)
