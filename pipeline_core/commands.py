"""Subcommands that plugins add to ``pipeline-core`` (hook ``pipeline_core_register_commands``).

A command is a record, like targets and schedules: its name, a one-line help, a function
that adds its options to the ``argparse`` parser the core creates for it, and the function
that runs it.  The host stamps each record with its provider and wraps both functions in
the plugin guard (:mod:`pipeline_core.plugin_guard`), so a plugin command that raises is
reported as that plugin's failure.  The plugin's ``run`` writes its own output: unlike
other plugin code, its stdout is not redirected (a command's output is the point).
"""
from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, Callable

import attrs

from pipeline_core.errors import ConfigError

if TYPE_CHECKING:
    from pipeline_core.plugins import PluginHost

_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def _check_name(inst: Any, attribute: "attrs.Attribute[str]", value: Any) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ConfigError(type(inst).__name__, attribute.name, value,
                          "a lower-case command name of letters, digits and '-'")


@attrs.frozen(kw_only=True)
class CommandRecord:
    """A subcommand: ``pipeline-core NAME [options]``."""

    name: str = attrs.field(validator=_check_name)
    help: str = attrs.field(validator=attrs.validators.instance_of(str))
    add_arguments: Callable[[argparse.ArgumentParser], None] = attrs.field(
        validator=attrs.validators.is_callable())
    run: Callable[[argparse.Namespace, "PluginHost"], "int | None"] = attrs.field(
        validator=attrs.validators.is_callable())
    #: command lines shown under "examples:" in the command's --help
    examples: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    provider: str = ""  #: distribution (filled in by the plugin host)
