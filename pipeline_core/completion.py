"""``pipeline-core completion bash|zsh``: a shell completion script written from the CLI's parser.

Why a library and not a hand-written script: the script must follow every command and option
the parser has (plugin commands included), and shtab writes it from the argparse parser itself,
as a static script the shell sources without starting Python on each Tab (argcomplete would).
shtab is the optional extra ``completion`` and is imported only by this command, never by the
CLI at start-up.  The script also offers the names installed when it was written: schedules
after a compiling command, ``--target`` names, ``--emitter`` names, and files after ``-o`` and
``--input``, and the ``KEY=`` of ``-p``, ``-T``, ``-c`` and ``-O`` (docs/guide/cli.md, "Shell
completion").
"""
from __future__ import annotations

import argparse
from typing import Any

from pipeline_core.errors import PipelineError

SHELLS = ("bash", "zsh")
INSTALL_HINT = "pip install 'gpu-pipeline-core[completion]'  (or: pip install shtab)"


class MissingShtab(PipelineError):
    """shtab is needed to write a completion script; the message says how to install it."""

    def __init__(self) -> None:
        super().__init__(f"completion scripts are written by shtab, which is not installed: "
                         f"{INSTALL_HINT}")


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [p for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for p in dict.fromkeys(action.choices.values())]


def _offer_names(parser: argparse.ArgumentParser, host: Any) -> None:
    """Give the actions that take a registered name its names as choices (shtab lists an
    action's choices; this parser only writes the script, so parsing is untouched)."""
    import shtab

    import attrs

    from pipeline_core.config import ScheduleConfig

    def keys(records: Any, field: str) -> list[str]:  # "KEY=" of every record's parameters
        return sorted({f"{p.name}=" for r in records for p in (getattr(r, field) or ())})

    names = {"schedule": sorted(host.schedules), "target": sorted(host.targets),
             "emitter": sorted(host.emitters),
             # -p / -T / -O complete to the keys any installed schedule, target or emitter
             # takes (the script is static: one list per flag), -c to every knob
             "params": keys(host.schedules.values(), "params"),
             "target_args": keys(host.targets.values(), "params"),
             "emit_options": keys(host.emitters.values(), "options"),
             "overrides": sorted(f"{f.name}=" for f in attrs.fields(ScheduleConfig))}
    for command in _subparsers(parser):
        for action in command._actions:
            if action.dest in names and names[action.dest]:
                action.choices = names[action.dest]
            elif action.dest in ("output", "input"):
                action.complete = shtab.FILE  # type: ignore[attr-defined]


def script(parser: argparse.ArgumentParser, shell: str, host: Any) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    try:
        import shtab
    except ImportError:
        raise MissingShtab() from None
    _offer_names(parser, host)
    return shtab.complete(parser, shell=shell)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS,
                        help="the shell to write the script for: bash (source it, or save it "
                             "as ~/.local/share/bash-completion/completions/pipeline-core) or "
                             "zsh (save it as _pipeline-core in a folder on $fpath)")
    from pipeline_core.cli_options import add_output_option

    add_output_option(parser)
