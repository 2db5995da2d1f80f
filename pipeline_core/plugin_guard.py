"""The one guard every call into plugin code passes through.

A plugin is third-party code: it may raise anything (``SystemExit`` included), recurse
forever, return the wrong type, or print.  The plugin host runs every import,
registration, hook, target and schedule factory, schedule method, strategy, kernel
transform and counter-model builder of a plugin through :class:`PluginGuard`, which

* turns any exception into a :class:`PluginError` naming the plugin, its distribution
  (its module, for ``--plugin``) and the hook or method, so no plugin failure looks like
  an internal error or ends the process; a ``KeyboardInterrupt`` too, unless the user
  pressed Ctrl-C while the plugin ran (:mod:`pipeline_core.interrupts` tells them apart;
  the user's Ctrl-C stops the tool);
* lets documented pipeline-core errors (a ``ConfigError`` about the user's ``-p``
  value, say) through unchanged: those already say what to fix; but code that sees no
  user input (import, registration, the registration hooks: ``user_input=False``) is
  blamed for them too, so a record with an invalid name names the plugin that made it;
* checks each answer against what the hook or method promises (the ``*_RESULTS``
  tables below), consuming lazy answers (generators) while still guarded;
* sends whatever the plugin writes to stdout to stderr, so stdout carries only our
  output (``--format json`` stays one JSON document), and reports the plugin once.

The guard belongs to one host (it reports into that host's warnings); nothing here is
module-global state.
"""
from __future__ import annotations

import contextlib
import io
import sys
import types
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterator

import attrs

from pipeline_core.config import PipelineConfig, ScheduleConfig
from pipeline_core.edges import DepEdge
from pipeline_core.errors import PipelineError, PluginError
from pipeline_core.ops import Entry, Op
from pipeline_core.launch import KernelLaunch
from pipeline_core.schedule import OPTIONAL_MEMBERS, KernelTransform, ScheduleBase

DEVELOPMENT = "(development)"  #: the "distribution" of a module loaded with --plugin
IN_PROCESS = "(in-process)"  #: the "distribution" of an object registered in-process
MAX_PROBLEM_CHARS = 300  #: longer exception texts are cut (``-v`` shows the traceback)


@attrs.frozen(kw_only=True)
class Culprit:
    """Who wrote the code being called: named in every message about it."""

    plugin: str
    distribution: str
    module: str = ""

    def describe(self) -> str:
        if not self.plugin:
            return f"the schedule object {self.module}"
        if self.distribution == DEVELOPMENT:
            return f"plugin {self.plugin!r} (module {self.module}, loaded with --plugin)"
        if self.distribution == IN_PROCESS:
            return f"plugin {self.plugin!r} (in-process, {self.module})"
        return f"plugin {self.plugin!r} from distribution {self.distribution}"


class InterruptedInPlugin(KeyboardInterrupt):
    """The user's Ctrl-C, come while a plugin's code ran: it still stops the tool, and
    ``where`` names the code that was running (how a hung plugin is found)."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where


class BadResult(Exception):
    """Raised by a result check: the text says what came back and what was expected."""


def explain(exc: BaseException) -> str:
    """One short line for what a plugin raised."""
    if isinstance(exc, BadResult):
        return str(exc)
    if isinstance(exc, SystemExit):
        why = " (argparse does this when it rejects a command line)" if exc.code == 2 else ""
        return f"it called sys.exit({exc.code!r}){why}"
    if isinstance(exc, KeyboardInterrupt):
        return ("it raised KeyboardInterrupt, but no Ctrl-C was pressed (a plugin fails by "
                "raising an ordinary exception)")
    if isinstance(exc, RecursionError):
        return "RecursionError: maximum recursion depth exceeded (unbounded recursion)"
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    if len(text) > MAX_PROBLEM_CHARS:
        text = text[:MAX_PROBLEM_CHARS - 3] + "..."
    return text


class _StdoutToStderr(io.TextIOBase):
    """What ``sys.stdout`` is while plugin code runs: text goes to stderr, the first write is reported."""

    def __init__(self, on_first_write: Callable[[], None]) -> None:
        super().__init__()
        self._on_first_write = on_first_write
        self._written = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text and not self._written:
            self._written = True
            self._on_first_write()
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class PluginGuard:
    """Runs plugin code for one host; ``report`` receives one line per stray stdout writer.

    ``sigints`` counts the SIGINTs the process received (:func:`pipeline_core.interrupts.
    counting_sigints`); without it a ``KeyboardInterrupt`` cannot be told from the user's
    Ctrl-C and always stops the tool.
    """

    def __init__(self, report: Callable[[str], None],
                 sigints: Callable[[], int] | None = None) -> None:
        self._report = report
        self._sigints = sigints
        self._reported: set[tuple[Culprit, str]] = set()

    def _wrote_to_stdout(self, culprit: Culprit, what: str) -> None:
        if (culprit, what) in self._reported:
            return
        self._reported.add((culprit, what))
        self._report(f"{culprit.describe()} wrote to standard output in {what}; the text was "
                     "sent to standard error (plugins must not print: stdout carries only "
                     "pipeline-core's output)")

    @contextlib.contextmanager
    def running(self, culprit: Culprit, what: str, *,
                passthrough: tuple[type[BaseException], ...] = (),
                owns_stdout: bool = False, user_input: bool = True) -> Iterator[None]:
        """Run the ``with`` body as ``culprit``'s code in ``what`` (a hook, factory or method).

        ``owns_stdout``: the code's output is the command's output (a plugin's own
        subcommand), so stdout is left alone.  ``user_input``: the code may raise a
        documented error about what the user typed, which passes unchanged; ``False``
        (import, registration) blames the plugin for any error but a ``PluginError``.
        """
        sink = _StdoutToStderr(lambda: self._wrote_to_stdout(culprit, what))
        sigints = self._sigints() if self._sigints is not None else None
        try:
            with contextlib.nullcontext() if owns_stdout else contextlib.redirect_stdout(sink):
                yield
        except GeneratorExit:
            raise  # a generator closes
        except InterruptedInPlugin:
            raise  # the user's Ctrl-C, already named by the innermost guard
        except KeyboardInterrupt as exc:
            if sigints is None or self._sigints is None or self._sigints() != sigints:
                # the user's Ctrl-C (or one we cannot tell from it) stops the tool
                raise InterruptedInPlugin(f"{culprit.describe()} was running {what}") from exc
            raise self.failure(culprit, what, explain(exc)) from exc
        except PluginError:
            raise  # already names its plugin
        except PipelineError as exc:
            if user_input:
                raise  # already says what to fix
            raise self.failure(culprit, what, explain(exc)) from exc
        except passthrough:
            raise
        except BaseException as exc:  # SystemExit and RecursionError included
            raise self.failure(culprit, what, explain(exc)) from exc

    @staticmethod
    def failure(culprit: Culprit, what: str, problem: str) -> PluginError:
        return PluginError(f"{culprit.describe()} failed in {what}: {problem}",
                           plugin=culprit.plugin, distribution=culprit.distribution, hook=what,
                           problem=problem)

    def call(self, culprit: Culprit, what: str, fn: Callable, *args: Any,
             check: Callable[[Any], Any] | None = None, user_input: bool = True,
             **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` under the guard; ``check`` validates (and may normalise) the answer."""
        with self.running(culprit, what, user_input=user_input):
            result = fn(*args, **kwargs)
            if check is not None:
                result = check(result)
        return result

    def wrap(self, culprit: Culprit, what: str, fn: Callable,
             check: Callable[[Any], Any] | None = None, user_input: bool = True) -> Callable:
        """``fn`` as a function that always runs under the guard."""
        def guarded(*args: Any, **kwargs: Any) -> Any:
            return self.call(culprit, what, fn, *args, check=check, user_input=user_input,
                             **kwargs)

        return guarded

    def schedule(self, schedule: Any, culprit: Culprit, label: str) -> "GuardedSchedule":
        """``schedule`` seen through this guard (already-guarded objects are returned as they are)."""
        if isinstance(schedule, GuardedSchedule):
            return schedule
        return GuardedSchedule(schedule, culprit, label, self)


if TYPE_CHECKING:
    _Declared = ScheduleBase  # what the core may call on a guarded schedule, typed
else:
    _Declared = object  # at run time every member comes through __getattr__


class GuardedSchedule(_Declared):
    """A schedule object whose every attribute read and method call runs under the guard.

    It is the declared schedule protocol (:class:`pipeline_core.schedule.ScheduleBase`) for
    the core: a member the object lacks is answered with ScheduleBase's default, so the core
    calls ``schedule.wait_source()`` on any schedule and never looks methods up.  Methods of
    the protocol have their answers checked (``SCHEDULE_RESULTS``).  ``isinstance`` sees the
    schedule's own class, so plugin hooks that test ``isinstance(schedule, MySchedule)`` keep
    working.
    """

    __slots__ = ("_schedule", "_culprit", "_label", "_guard")

    def __init__(self, schedule: Any, culprit: Culprit, label: str, guard: PluginGuard) -> None:
        object.__setattr__(self, "_schedule", schedule)
        object.__setattr__(self, "_culprit", culprit)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_guard", guard)

    @property  # type: ignore[misc]
    def __class__(self):  # noqa: D105 - isinstance() consults it after type()
        return type(object.__getattribute__(self, "_schedule"))

    def __getattr__(self, name: str) -> Any:
        schedule = object.__getattribute__(self, "_schedule")
        culprit = object.__getattribute__(self, "_culprit")
        label = object.__getattribute__(self, "_label")
        guard = object.__getattribute__(self, "_guard")
        # AttributeError passes: a member the object lacks is the protocol's default, or absent
        with guard.running(culprit, f"{label} attribute {name}", passthrough=(AttributeError,)):
            try:
                value = getattr(schedule, name)
            except AttributeError:
                if name not in OPTIONAL_MEMBERS:
                    raise
                return _default(self, name)
            if name in OPTIONAL_MEMBERS and name != "target" and not callable(value):
                raise BadResult(f"has {name} = {_name_of(value)}, expected a method "
                                f"{name}() (pipeline_core.schedule.ScheduleBase.{name})")
        if callable(value) and not isinstance(value, type):
            return guard.wrap(culprit, f"{name}() of {label}", value, check=SCHEDULE_RESULTS.get(name))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"schedule objects are read-only here (setting {name!r})")

    def __repr__(self) -> str:
        return f"<guarded {object.__getattribute__(self, '_label')}>"


def _default(schedule: GuardedSchedule, name: str) -> Any:
    """:class:`ScheduleBase`'s default for ``name``, bound to ``schedule`` (core code: unguarded)."""
    member = vars(ScheduleBase)[name]
    return types.MethodType(member, schedule) if callable(member) else member


# --- result checks ----------------------------------------------------------------

def _name_of(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _items(value: Any, expected: str) -> list:
    """``value`` as a list, if it is a sequence-like collection (not a string or mapping)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise BadResult(f"returned {_name_of(value)}, expected {expected}")
    return list(value)


def list_of(kind: type, expected: str = "") -> Callable[[Any], list]:
    """Check: an iterable of ``kind`` instances (returned as a list)."""
    expected = expected or f"a list of {kind.__name__}"

    def check(value: Any) -> list:
        items = _items(value, expected)
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                raise BadResult(f"returned a list whose item {i} is {_name_of(item)}, expected {expected}")
        return items
    return check


def records_of(kind: type) -> Callable[[Any], list]:
    """Check: a list of ``kind`` records whose fields pass the record's own validators.

    A record built with attrs validators switched off is caught here, under the guard,
    rather than when the host stamps its provider on it.
    """
    items = list_of(kind)

    def check(value: Any) -> list:
        records = items(value)
        for record in records:
            attrs.validate(record)
        return records
    return check


def instance_of(kind: type, expected: str = "") -> Callable[[Any], Any]:
    expected = expected or f"a {kind.__name__}"

    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise BadResult(f"returned {_name_of(value)}, expected {expected}")
        return value
    return check


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Check: ``None`` (nothing to say) or what ``check`` accepts."""
    return lambda value: None if value is None else check(value)


def op_blocks(value: Any) -> list:
    """Check: one list of Op per block."""
    expected = "one list of Op per program block"
    blocks = _items(value, expected)
    out = []
    for b, block in enumerate(blocks):
        ops = _items(block, expected)
        for i, item in enumerate(ops):
            if not isinstance(item, Op):
                raise BadResult(f"returned block {b} holding {_name_of(item)} at position {i}, "
                                f"expected {expected}")
        out.append(ops)
    return out


def tag_names(value: Any) -> dict:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, int) and isinstance(v, str) for k, v in value.items()):
        raise BadResult(f"returned {_name_of(value)}, expected a dict of int tag -> str name")
    return dict(value)


def knob_map(value: Any) -> dict:
    """Check: ``forced_knobs()`` answers a mapping of knob names."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise BadResult(f"returned {_name_of(value)}, expected a dict of knob name -> forced "
                        "value (or pipeline_core.schedule.REFUSED)")
    return dict(value)


def order(value: Any) -> list:
    """Check: a strategy's order (a list of body indices; the core checks it is a permutation)."""
    items = _items(value, "a list of body indices")
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int):
            raise BadResult(f"returned an order whose item {i} is {_name_of(item)}, expected a "
                            "list of body indices")
    return items


def schedule_object(value: Any) -> Any:
    """Check: a schedule factory's answer has the required parts of the schedule protocol."""
    missing = [m for m in ("config", "build_body") if not callable(getattr(value, m, None))]
    if missing:
        raise BadResult(f"returned {_name_of(value)}, expected a schedule object with config() "
                        f"and build_body() methods (missing: {', '.join(missing)})")
    if not isinstance(getattr(value, "name", None), str):
        raise BadResult(f"returned a {_name_of(value)} without a str 'name' attribute")
    return value


#: What each method of the schedule protocol must return.
SCHEDULE_RESULTS: Mapping[str, Callable[[Any], Any]] = {
    "config": instance_of(PipelineConfig),
    "build_body": list_of(Op),
    "schedule_config": instance_of(ScheduleConfig),
    "derive_edges": optional(list_of(DepEdge)),  # None: the core's rule tables
    "transform_kernel": list_of(Entry),
    "build_explicit_blocks": op_blocks,
    "bootstrap_frags": list_of(Op),
    "tag_names": tag_names,
    "forced_knobs": knob_map,
    "epilogue_prefix": list_of(Op),
    "kernel_launch": optional(instance_of(KernelLaunch)),  # None: no kernel family declared
}

#: What each override hook must return (a plugin's answer; ``None`` means "nothing to say").
#: A registration hook returns a list of its records (``records_of``): the host builds those
#: checks from its table of registries (``pipeline_core.plugins.REGISTRIES``), the one home of
#: which record each registration hook returns.
HOOK_RESULTS: Mapping[str, Callable[[Any], Any]] = {
    "pipeline_core_derive_edges": optional(list_of(DepEdge)),
    "pipeline_core_explicit_blocks": optional(op_blocks),
    "pipeline_core_bootstrap_frags": optional(list_of(Op)),
    "pipeline_core_kernel_transforms": optional(list_of(KernelTransform)),
}
