"""The error hierarchy: every failure a user can trigger is one of these.

Each error carries the facts a user needs to act (which field, op, block, rule,
plugin) as attributes *and* in its message, so the CLI can print ``str(err)``
and tests can assert on attributes.
"""
from __future__ import annotations

from typing import Any


class PipelineError(Exception):
    """Base class of every documented pipeline-core error."""


class ConfigError(PipelineError, ValueError):
    """A configuration value is invalid.

    Carries the owning record, the field, the offending value and what is allowed.
    ``flag`` is the command-line flag the value came from (``-p``, ``-T``, ``-c``),
    when it came from one: the message then names what the user typed
    (``-c wait_vm_last=300 is invalid for ScheduleConfig: ...``), not the record.
    """

    def __init__(self, owner: str, field: str, value: Any, allowed: str, *, flag: str = "") -> None:
        self.owner = owner
        self.field = field
        self.value = value
        self.allowed = allowed
        self.flag = flag
        if flag:
            where = f" for {owner}" if owner else ""
            typed = f"{field}={value}" if field else f"{value}"
            message = f"{flag} {typed} is invalid{where}: {allowed}"
        else:
            message = f"{owner}.{field} = {value!r} is invalid: {allowed}"
        super().__init__(message)


class GraphError(PipelineError):
    """The dependency graph is malformed (bad edge index, self-loop, cycle)."""

    def __init__(self, message: str, *, edge: int | None = None, cycle: tuple[int, ...] = ()) -> None:
        self.edge = edge
        self.cycle = cycle
        super().__init__(message)


class SchedulingError(PipelineError):
    """A scheduling strategy cannot produce a complete, valid order."""

    def __init__(self, message: str, *, strategy: str = "", ops: tuple[int, ...] = ()) -> None:
        self.strategy = strategy
        self.ops = ops
        super().__init__(message)


class TransformError(PipelineError):
    """A body transform would lose or misplace ops."""

    def __init__(self, message: str, *, ops: tuple[int, ...] = ()) -> None:
        self.ops = ops
        super().__init__(message)


class ProgramError(PipelineError):
    """The ordered body cannot be turned into a block program."""

    def __init__(self, message: str, *, block: int | None = None, ops: tuple[int, ...] = ()) -> None:
        self.block = block
        self.ops = ops
        super().__init__(message)


class VerificationError(PipelineError):
    """A structural check of the final block program failed.

    ``rule`` is a stable identifier (e.g. ``"stage-consistency"``) so tools can
    match on it; ``block`` / ``partition`` say where.
    """

    def __init__(self, rule: str, message: str, *, block: int | None = None,
                 partition: int | None = None) -> None:
        self.rule = rule
        self.block = block
        self.partition = partition
        super().__init__(f"[{rule}] {message}")


class TargetFactError(PipelineError, LookupError):
    """A target does not declare a fact a stage needs (its sync model, its warps per agent)."""

    def __init__(self, target: str, fact: str, message: str) -> None:
        self.target = target
        self.fact = fact
        super().__init__(message)


class PluginError(PipelineError):
    """A plugin failed to load, registered something invalid, or collided with another.

    ``hook`` names the hook, factory or schedule method that failed, when one did, and
    ``problem`` says what went wrong without the plugin's name (for listings).
    """

    def __init__(self, message: str, *, plugin: str = "", distribution: str = "",
                 hook: str = "", problem: str = "") -> None:
        self.plugin = plugin
        self.distribution = distribution
        self.hook = hook
        self.problem = problem or message
        super().__init__(message)


class OutputError(PipelineError):
    """An output file cannot be written (``-o FILE``): the message names the path.

    ``path`` ``-`` is standard output (closed with ``>&-``, a full disk): the message says
    so and how to write elsewhere.  ``broken_pipe``: its reader went away (``| head``),
    which the command line ends quietly, as a command killed by SIGPIPE is.
    """

    def __init__(self, path: str, reason: str, *, broken_pipe: bool = False) -> None:
        self.path = path
        self.reason = reason
        self.broken_pipe = broken_pipe
        super().__init__(f"cannot write standard output: {reason}; give -o FILE to write to a "
                         f"file instead" if path == "-" else f"cannot write -o {path}: {reason}")


class UnknownNameError(PipelineError, LookupError):
    """A schedule, target, strategy or parameter name is not known.

    ``given_as`` says where the user typed it (``-c scheduling``), ``plural`` overrides
    the plural of ``kind`` in the list of known names.
    """

    def __init__(self, kind: str, name: str, known: list[str], hint: str = "", *,
                 plural: str = "", given_as: str = "") -> None:
        import difflib

        self.kind = kind
        self.name = name
        self.known = list(known)
        bare = [k.split(" (", 1)[0] for k in self.known]  # entries may carry "(provider)"
        close = difflib.get_close_matches(name, bare, n=1)
        msg = f"Unknown {kind} {name!r}" + (f" ({given_as})." if given_as else ".")
        if close:
            msg += f" Did you mean {close[0]!r}?"
        if hint:
            msg += f" {hint}"
        msg += f" Known {plural or _plural(kind)}: {', '.join(self.known) if self.known else '(none)'}."
        super().__init__(msg)


def _plural(noun: str) -> str:
    """English plural of the last word of ``noun`` ("scheduling strategy" -> "... strategies")."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"
