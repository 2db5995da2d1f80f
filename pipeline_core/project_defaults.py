"""Defaults for ``-p`` / ``-T`` / ``-c`` from ``[tool.pipeline-core]`` in ``pyproject.toml``.

As pytest, tox and ruff read theirs, ``pipeline-core`` reads the nearest ``pyproject.toml``
(the working directory, then each parent) that has a ``[tool.pipeline-core]`` table, one
table per schedule, keyed by the flags' letters::

    [tool.pipeline-core.schedules.pingpong]
    p = { BM = 128 }
    T = { max_globals = 1 }
    c = { auto_waits = false }

The command line wins over the file, key by key (docs/guide/cli.md, "Defaults from
pyproject.toml").  A value is read as if typed after its flag (``true``, ``128``, ``"CSP"``),
and a bad table, key or value is refused with exit 2 naming the file, the table and the key.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import attrs

from pipeline_core.config import value_text
from pipeline_core.errors import ConfigError, PipelineError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML through tomli (the dependency's marker)
    import tomli as tomllib  # type: ignore[import-not-found]

TOOL = "pipeline-core"
#: the table letter -> the flag its values stand for
FLAGS = {"p": "-p", "T": "-T", "c": "-c"}


@attrs.frozen(kw_only=True)
class ProjectDefaults:
    """The file read (None: none found) and, per schedule, per flag, its ``KEY=VALUE`` strings."""

    path: Path | None = None
    schedules: Mapping[str, Mapping[str, Mapping[str, str]]] = attrs.field(factory=dict)

    def table(self, schedule: str) -> str:
        return f"{self.path} [tool.{TOOL}.schedules.{schedule}]"

    def for_schedule(self, schedule: str) -> Mapping[str, Mapping[str, str]]:
        """``{flag: {key: text}}`` the file gives ``schedule`` (empty when none)."""
        return self.schedules.get(schedule, {})


def find(start: Path | None = None) -> Path | None:
    """The nearest ``pyproject.toml`` from ``start`` (default: the working directory) upward
    that has a ``[tool.pipeline-core]`` table; None when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and f"tool.{TOOL}" in _read(candidate):
            return candidate
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _text(where: str, key: str, value: Any) -> str:
    if isinstance(value, (bool, int, str)):
        return value_text(value)
    raise ConfigError(where, key, value, "a string, an integer or true/false, as typed after "
                                         "its flag")


def load(path: Path | None) -> ProjectDefaults:
    """The defaults ``path`` declares (structure checked; values are checked per schedule by
    :func:`merged`)."""
    if path is None:
        return ProjectDefaults()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PipelineError(f"{path}: not readable TOML ({exc}); pipeline-core reads its "
                            f"[tool.{TOOL}] table for -p/-T/-c defaults: fix the file") from None
    tool = data.get("tool", {}).get(TOOL, {})
    where = f"{path} [tool.{TOOL}]"
    if not isinstance(tool, dict):
        raise ConfigError(where, "", tool, "a table")
    unknown = sorted(k for k in tool if k != "schedules")
    if unknown:
        raise ConfigError(where, unknown[0], tool[unknown[0]],
                          "the only key is schedules (one table per schedule: "
                          f"[tool.{TOOL}.schedules.NAME] with p, T and c)")
    schedules: dict[str, dict[str, dict[str, str]]] = {}
    for name, table in tool.get("schedules", {}).items():
        here = f"{path} [tool.{TOOL}.schedules.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(here, "", table, "a table with p, T and c")
        per_flag: dict[str, dict[str, str]] = {}
        for letter, pairs in table.items():
            if letter not in FLAGS:
                raise ConfigError(here, letter, pairs, "one of p (-p), T (-T), c (-c)")
            if not isinstance(pairs, dict):
                raise ConfigError(here, letter, pairs, f"a table of {FLAGS[letter]} KEY = VALUE")
            per_flag[FLAGS[letter]] = {str(k): _text(here, f"{letter}.{k}", v)
                                       for k, v in pairs.items()}
        schedules[str(name)] = per_flag
    return ProjectDefaults(path=path, schedules=schedules)


def merged(defaults: ProjectDefaults, schedule: str, given: Mapping[str, Mapping[str, str]],
           checks: Mapping[str, Callable[[Mapping[str, str]], Any]]) -> dict[str, dict[str, str]]:
    """``given`` (``{flag: {key: text}}`` from the command line) over the file's values for
    ``schedule``.  Each file value the command line does not replace is checked by
    ``checks[flag]`` (the parser the flag's values go through) first, so that a bad one is
    refused naming the file, the table and the key."""
    out = {flag: dict(pairs) for flag, pairs in given.items()}
    letters = {flag: letter for letter, flag in FLAGS.items()}
    for flag, pairs in defaults.for_schedule(schedule).items():
        for key, text in pairs.items():
            if key in out.get(flag, {}):
                continue  # the command line wins
            try:
                checks[flag]({key: text})
            except PipelineError as exc:
                raise ConfigError(defaults.table(schedule), f"{letters[flag]}.{key}", text,
                                  f"{exc} (the value comes from this file: fix it there)"
                                  ) from None
            out.setdefault(flag, {})[key] = text
    return out
