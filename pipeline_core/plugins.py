"""The plugin host: entry-point discovery, isolation of broken plugins, registries, overrides.

pluggy's own ``load_setuptools_entrypoints`` stops at the first broken plugin
and never names the distribution, so discovery is ours: entry points of the
``pipeline_core`` group are sorted by (name, distribution), each is loaded under
the plugin guard (:mod:`pipeline_core.plugin_guard`), and failures are recorded
with their provenance.  Every answer the host gives is independent of install order.
"""
from __future__ import annotations

import difflib
import importlib
import os
import sys
import time
import traceback
from importlib.metadata import EntryPoint
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

import attrs
import pluggy

from pipeline_core import DISTRIBUTION as CORE
from pipeline_core import hookspecs
from pipeline_core.distributions import installed_entry_points
from pipeline_core.commands import CommandRecord
from pipeline_core.emitters import EmitterRecord
from pipeline_core.lowering import LoweringRecord
from pipeline_core.config import TargetProfile
from pipeline_core.errors import PluginError, UnknownNameError
from pipeline_core.ops import Entry
from pipeline_core.plugin_guard import (DEVELOPMENT, HOOK_RESULTS, IN_PROCESS, Culprit, PluginGuard,
                                        instance_of, list_of, optional, order, records_of,
                                        schedule_object)
from pipeline_core.schedule import (BuildContext, KernelTransform, ScheduleRecord, StrategyRecord,
                                    TargetRecord)

if TYPE_CHECKING:
    from pipeline_core.config import PipelineConfig
    from pipeline_core.edges import DepEdge
    from pipeline_core.ops import Op
    from pipeline_core.plugin_guard import GuardedSchedule
    from pipeline_core.scheduling.registry import Strategy
    from pipeline_core.program.program import Program

_Record = TypeVar("_Record", TargetRecord, ScheduleRecord)

ENV_DISABLE = "PIPELINE_CORE_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "PIPELINE_CORE_NO_AUTOLOAD"
ENV_STRICT = "PIPELINE_CORE_STRICT_PLUGINS"
ENV_PLUGINS = "PIPELINE_CORE_PLUGINS"
ENV_SLOW_IMPORT = "PIPELINE_CORE_SLOW_IMPORT_S"
#: A plugin whose import takes at least this long (seconds) is reported: every command pays it.
DEFAULT_SLOW_IMPORT_S = 1.0

#: The hooks that fill the registries: (hook, record type, registry and PluginInfo list, label).
#: They are called once, while loading, and see no user input.
REGISTRIES = (("pipeline_core_register_targets", TargetRecord, "targets", "target"),
              ("pipeline_core_register_schedules", ScheduleRecord, "schedules", "schedule"),
              ("pipeline_core_register_strategies", StrategyRecord, "strategies", "strategy"),
              ("pipeline_core_register_commands", CommandRecord, "commands", "command"),
              ("pipeline_core_register_emitters", EmitterRecord, "emitters", "emitter"),
              ("pipeline_core_register_lowerings", LoweringRecord, "lowerings", "lowering"))
REGISTRATION_HOOKS = tuple(hook for hook, *_ in REGISTRIES)
#: What each hook must return: a registration hook, a list of its records
RESULT_CHECKS = {**HOOK_RESULTS, **{hook: optional(records_of(record_type))
                                    for hook, record_type, *_ in REGISTRIES}}
OVERRIDE_HOOKS = ("pipeline_core_derive_edges", "pipeline_core_explicit_blocks",
                  "pipeline_core_bootstrap_frags")


@attrs.define
class PluginInfo:
    """What the host knows about one plugin (shown by ``pipeline-core plugins``)."""

    name: str
    distribution: str
    version: str
    module: str
    status: str = "ok"  #: ok | failed: <error> | disabled | conflict
    error: str = ""
    traceback: str = ""
    targets: list[str] = attrs.field(factory=list)
    schedules: list[str] = attrs.field(factory=list)
    strategies: list[str] = attrs.field(factory=list)
    commands: list[str] = attrs.field(factory=list)
    emitters: list[str] = attrs.field(factory=list)
    lowerings: list[str] = attrs.field(factory=list)
    hooks: list[str] = attrs.field(factory=list)
    location: str = ""  #: the directory of the plugin's module ('' when it cannot be found)

    @property
    def failed(self) -> bool:
        return self.status.startswith("failed")

    @property
    def culprit(self) -> Culprit:
        return Culprit(plugin=self.name, distribution=self.distribution, module=self.module)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "module": self.module, "status": self.status, "error": self.error,
                "targets": self.targets, "schedules": self.schedules,
                "strategies": self.strategies, "commands": self.commands, "emitters": self.emitters, "lowerings": self.lowerings,
                "hooks": self.hooks,
                "location": self.location}


def split_env(name: str) -> list[str]:
    """A comma- (or semicolon-) separated environment variable as a list of names."""
    return [x.strip() for x in os.environ.get(name, "").replace(";", ",").split(",") if x.strip()]


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


class PluginHost:
    """A pluggy manager plus the target / schedule / strategy registries built from it.

    Every call into plugin code goes through ``self.guard`` (see
    :mod:`pipeline_core.plugin_guard`): load-time failures become warnings (fatal
    under ``strict``), failures while a command runs become a :class:`PluginError`
    naming the plugin, its distribution and the hook.  ``clock`` and
    ``slow_import_s`` time plugin imports (``None``: ``PIPELINE_CORE_SLOW_IMPORT_S``,
    else 1 s).  ``sigints`` counts the user's Ctrl-Cs (:mod:`pipeline_core.interrupts`),
    so a plugin that raises ``KeyboardInterrupt`` itself is reported, not obeyed.
    """

    def __init__(self, *, autoload: bool | None = None, disabled: Iterable[str] = (),
                 extra_modules: Iterable[str] = (), extra_plugins: Iterable[tuple[str, Any]] = (),
                 strict: bool | None = None, trace: Callable[[str], None] | None = None,
                 slow_import_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sigints: Callable[[], int] | None = None) -> None:
        disabled = list(disabled)  # read twice: the set below, and the check of each name
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.targets: dict[str, TargetRecord] = {}
        self.schedules: dict[str, ScheduleRecord] = {}
        self.strategies: dict[str, StrategyRecord] = {}
        self.commands: dict[str, CommandRecord] = {}
        self.emitters: dict[str, EmitterRecord] = {}
        self.lowerings: dict[str, LoweringRecord] = {}
        self.conflicts: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self.guard = PluginGuard(self.warnings.append, sigints)
        self.strict = _truthy_env(ENV_STRICT) if strict is None else strict
        self._disabled = set(disabled) | set(split_env(ENV_DISABLE))
        self._registered: dict[str, PluginInfo] = {}  #: live plugins by registration name
        self._providers: dict[str, PluginInfo] = {}  #: "kind:name" -> the plugin that gave it first
        self._clock = clock
        self.slow_import_s = self._slow_import_threshold(slow_import_s)
        if trace is not None:
            self._install_trace(trace)

        from pipeline_core import builtin_plugin
        core = self._info("core", CORE, _core_version(), "pipeline_core.builtin_plugin")
        self._register(core, builtin_plugin)
        if autoload is None:
            autoload = not _truthy_env(ENV_NO_AUTOLOAD)
        installed = installed_entry_points()
        extra_modules = list(extra_modules) + split_env(ENV_PLUGINS)
        self._check_disabled(disabled, installed, extra_modules)
        if (autoload and installed) or extra_modules:
            # every plugin imports the core's door: import it before any plugin's import is
            # timed, so a slow-import warning measures the plugin's own time, net of the core's
            importlib.import_module("pipeline_core.plugin_api")
        if autoload:
            for name, dist, version, ep in installed:
                self._load_entry_point(name, dist, version, ep)
        for module in extra_modules:
            self._load_module(module)
        for name, obj in extra_plugins:
            info = self._info(name, IN_PROCESS, "", getattr(obj, "__name__", type(obj).__name__))
            self._register(info, obj)
        self._collect()

    # --- loading --------------------------------------------------------------
    def _slow_import_threshold(self, given: float | None) -> float:
        if given is not None:
            return float(given)
        text = os.environ.get(ENV_SLOW_IMPORT, "").strip()
        if not text:
            return DEFAULT_SLOW_IMPORT_S
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0:
            self.warnings.append(f"{ENV_SLOW_IMPORT}={text!r} is not a number of seconds >= 0; "
                                 f"using {DEFAULT_SLOW_IMPORT_S:g}")
            return DEFAULT_SLOW_IMPORT_S
        return value

    def _check_disabled(self, given: Iterable[str],
                        installed: Sequence[tuple[str, str, str, EntryPoint]],
                        modules: Sequence[str]) -> None:
        """Every name to disable must be an installed plugin's entry-point or distribution
        name: a typo would otherwise leave the plugin loaded without a word.  A name given
        as an argument (``--disable-plugin``) is refused; one in PIPELINE_CORE_DISABLE_PLUGINS,
        which may be shared by machines with other installs, is reported."""
        names = {n for name, dist, _, _ in installed for n in (name, dist)}
        known = sorted({f"{name} ({dist})" for name, dist, _, _ in installed})
        for name in given:
            if name not in names:
                hint = ("The core's own plugin cannot be disabled." if name == "core" else
                         f"{name!r} is loaded with --plugin: leave that out instead."
                         if name in modules else "")
                raise UnknownNameError("plugin", name, known, hint, given_as="--disable-plugin")
        for name in split_env(ENV_DISABLE):
            if name not in names:
                self.warnings.append(f"{ENV_DISABLE} names {name!r}, which is no installed "
                                     "plugin's entry-point or distribution name; installed: "
                                     f"{', '.join(known) or 'none'}")

    def _info(self, name: str, dist: str, version: str, module: str,
              status: str = "ok") -> PluginInfo:
        info = PluginInfo(name, dist, version, module, status)
        self.plugins.append(info)
        return info

    def _fail(self, info: PluginInfo, problem: str, tb: str = "") -> None:
        info.location = info.location or _module_location(info.module)
        info.status = f"failed: {problem}"
        info.error = problem
        info.traceback = tb
        version = f" {info.version}" if info.version else ""
        self.warnings.append(f"{info.culprit.describe()}{version}: {problem}")

    def _load_entry_point(self, name: str, dist: str, version: str, ep: EntryPoint) -> None:
        if name in self._disabled or dist in self._disabled:
            info = self._info(name, dist, version, ep.value, status="disabled")
            info.location = _module_location(ep.value)
            return
        if any(p.name == name for p in self.plugins):
            other = next(p for p in self.plugins if p.name == name)
            info = self._info(name, dist, version, ep.value, status="conflict")
            info.error = (f"entry-point name {name!r} is also used by distribution "
                          f"{other.distribution}; the first (by distribution name) is kept")
            self.warnings.append(f"plugin {name!r} from distribution {dist}: {info.error}")
            return
        info = self._info(name, dist, version, ep.value)
        loaded, obj = self._import(info, ep.load)
        if loaded:
            self._register(info, obj)

    def _load_module(self, module: str) -> None:
        info = self._info(module, DEVELOPMENT, "", module)
        loaded, obj = self._import(info, lambda: importlib.import_module(module))
        if loaded:
            self._register(info, obj)

    def _import(self, info: PluginInfo, load: Callable[[], Any]) -> tuple[bool, Any]:
        """Run the plugin's import under the guard and time it; (False, None) when it failed."""
        start = self._clock()
        try:
            return True, self.guard.call(info.culprit, "import", load, user_input=False)
        except PluginError as exc:
            self._fail(info, f"import failed: {exc.problem}", _format_traceback(exc))
            return False, None
        finally:
            took = self._clock() - start
            if took >= self.slow_import_s:
                self.warnings.append(
                    f"{info.culprit.describe()} took {took:.1f} s to import (threshold "
                    f"{self.slow_import_s:g} s, set by {ENV_SLOW_IMPORT}); every command pays "
                    "this: disable it with --disable-plugin if you do not need it")

    def _register(self, info: PluginInfo, obj: Any) -> None:
        info.location = _module_location(info.module, obj)
        try:
            self.guard.call(info.culprit, "registration", self.pm.register, obj, name=info.name,
                            user_input=False)
        except PluginError as exc:
            self._fail(info, f"registration failed: {exc.problem}", _format_traceback(exc))
            return
        self._registered[info.name] = info
        unknown = [c.name for c in (self.pm.get_hookcallers(obj) or []) if c.spec is None]
        if unknown:
            self._unregister(info)
            hints = []
            for hook in unknown:
                close = difflib.get_close_matches(hook, _spec_names(), n=1)
                hints.append(f"{hook!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            self._fail(info, "implements unknown hook " + ", ".join(hints))
            return
        info.hooks = sorted(c.name for c in (self.pm.get_hookcallers(obj) or []))
        if not info.hooks:  # `--plugin os`: loads, and would silently add nothing
            self._unregister(info)
            self._fail(info, "implements no pipeline-core hook (no function named "
                             "pipeline_core_* marked @pipeline_core.hookimpl), so it adds "
                             "nothing: check the module name")

    def _unregister(self, info: PluginInfo) -> None:
        self.pm.unregister(name=info.name)
        self._registered.pop(info.name, None)

    # --- calling ----------------------------------------------------------------
    def _call_one(self, hook_name: str, impl: pluggy.HookImpl, **kwargs: Any) -> Any:
        """Call one plugin's implementation through pluggy (so ``--trace`` monitoring sees it).

        A plugin's call runs under the guard and its answer is checked against
        ``RESULT_CHECKS``; the core's own implementations are called as they are.  The
        registration hooks see no user input, so any error they raise is the plugin's.
        """
        others = [p for p in self.pm.get_plugins() if p is not impl.plugin]
        caller = self.pm.subset_hook_caller(hook_name, remove_plugins=others)

        def call() -> Any:
            results = caller(**kwargs)
            return results[0] if results else None

        if impl.plugin_name == "core":
            return call()
        info = self._registered[impl.plugin_name]
        return self.guard.call(info.culprit, f"hook {hook_name}", call,
                               check=RESULT_CHECKS.get(hook_name),
                               user_input=hook_name not in REGISTRATION_HOOKS)

    # --- registries -----------------------------------------------------------
    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        """Hook implementations of live plugins, sorted by plugin name (never install order)."""
        caller = getattr(self.pm.hook, hook_name)
        impls = [i for i in caller.get_hookimpls()]
        return sorted(impls, key=lambda i: (i.plugin_name != "core", i.plugin_name))

    def _collect(self) -> None:
        for hook, record_type, attr, label in REGISTRIES:
            table = getattr(self, attr)
            for impl in self._impls(hook):
                info = self._registered[impl.plugin_name]
                try:
                    records = self._call_one(hook, impl) or []
                except PluginError as exc:
                    self._fail(info, f"{hook} failed: {exc.problem}", _format_traceback(exc))
                    self._drop_records(info)
                    self._unregister(info)
                    continue
                for record in records:
                    key = record.name.upper() if record_type is StrategyRecord else record.name
                    conflict_key = f"{label}:{key}"
                    if key in table:
                        first = self._providers[conflict_key]
                        msg = (f"{label} {record.name!r} is provided by both "
                               f"{first.culprit.describe()} and {info.culprit.describe()}; "
                               f"using it is an error until one is disabled (--disable-plugin NAME)")
                        self.conflicts.setdefault(conflict_key, [first.culprit.describe()]).append(
                            info.culprit.describe())
                        self.warnings.append(msg)
                        info.status = "conflict"
                        info.error = f"{info.error}; {msg}" if info.error else msg
                        continue
                    table[key] = self._provided(record, info, label)
                    self._providers[conflict_key] = info
                    getattr(info, attr).append(record.name)

    def _provided(self, record: Any, info: PluginInfo, label: str) -> Any:
        """``record`` stamped with its provider; a plugin's code in it runs under the guard."""
        record = attrs.evolve(record, provider=info.distribution)
        if info.name == "core":
            return record
        culprit, guard = info.culprit, self.guard
        if isinstance(record, TargetRecord):
            return attrs.evolve(record, factory=guard.wrap(
                culprit, f"factory of target {record.name!r}", record.factory,
                check=instance_of(TargetProfile)))
        if isinstance(record, ScheduleRecord):
            factory, name = record.factory, record.name

            def build(ctx: BuildContext) -> GuardedSchedule:
                obj = guard.call(culprit, f"factory of schedule {name!r}", factory, ctx,
                                 check=schedule_object)
                return guard.schedule(obj, culprit, f"schedule {name!r}")

            return attrs.evolve(record, factory=build)
        if isinstance(record, EmitterRecord):
            refuses = record.refuses
            return attrs.evolve(record, emit=guard.wrap(
                culprit, f"emitter {record.name!r}", record.emit, check=instance_of(str)),
                refuses=None if refuses is None else guard.wrap(
                    culprit, f"refuses of emitter {record.name!r}", refuses,
                    check=instance_of(str)))
        if isinstance(record, LoweringRecord):
            from pipeline_core.plan import Plan

            finish = record.finish
            return attrs.evolve(record, lower=guard.wrap(
                culprit, f"lowering {record.name!r}", record.lower, check=instance_of(Plan)),
                finish=None if finish is None else guard.wrap(
                    culprit, f"finish of lowering {record.name!r}", finish))
        if isinstance(record, CommandRecord):
            return attrs.evolve(record, add_arguments=guard.wrap(
                culprit, f"add_arguments of command {record.name!r}", record.add_arguments,
                user_input=False),
                run=_guarded_run(guard, culprit, record))
        return attrs.evolve(record, function=guard.wrap(
            culprit, f"strategy {record.name!r}", record.function, check=order))

    def _drop_records(self, info: PluginInfo) -> None:
        for table, names, label in ((self.targets, info.targets, "target"),
                                    (self.schedules, info.schedules, "schedule"),
                                    (self.commands, info.commands, "command"),
                                    (self.emitters, info.emitters, "emitter"),
                                    (self.lowerings, info.lowerings, "lowering"),
                                    (self.strategies, info.strategies, "strategy")):
            for n in names:
                key = n.upper() if table is self.strategies else n
                table.pop(key, None)
                self._providers.pop(f"{label}:{key}", None)
            names.clear()

    # --- lookups ----------------------------------------------------------------
    def problems(self) -> list[str]:
        return list(self.warnings)

    def _failed_hint(self, kind: str, name: str) -> str:
        failed = [p for p in self.plugins if p.status.startswith("failed")]
        if not failed:
            return ""
        guesses = [p for p in failed if name.replace("-", "_") in p.name or name in p.distribution
                   or p.name.split("_")[-1] in name]
        shown = guesses or failed
        return " ".join(f"The {p.culprit.describe()} failed to load and may provide it: "
                        f"{p.error}" for p in shown)

    def _lookup(self, kind: str, table: Mapping[str, _Record], name: str) -> _Record:
        key = f"{kind}:{name}"
        if key in self.conflicts:
            raise PluginError(f"{kind} {name!r} is provided by more than one plugin: "
                              f"{' and '.join(self.conflicts[key])}; uninstall or disable all "
                              "but one (--disable-plugin NAME)")
        if name not in table:
            raise UnknownNameError(kind, name, self.describe(table), self._failed_hint(kind, name))
        return table[name]

    def get_target(self, name: str) -> TargetRecord:
        return self._lookup("target", self.targets, name)

    def get_schedule(self, name: str) -> ScheduleRecord:
        return self._lookup("schedule", self.schedules, name)

    def get_emitter(self, name: str) -> EmitterRecord:
        """A registered emitter; one that two plugins provide is refused naming both."""
        if f"emitter:{name}" in self.conflicts:
            raise PluginError(f"emitter {name!r} is provided by more than one plugin: "
                              f"{', '.join(self.conflicts[f'emitter:{name}'])}")
        if name not in self.emitters:
            raise UnknownNameError("emitter", name, self.describe(self.emitters),
                                   self._failed_hint("emitter", name))
        return self.emitters[name]

    def get_command(self, name: str) -> CommandRecord:
        """A plugin's command; one that two plugins provide is refused naming both."""
        key = f"command:{name}"
        if key in self.conflicts:
            raise PluginError(f"command {name!r} is provided by more than one plugin: "
                              f"{' and '.join(self.conflicts[key])}; uninstall or disable all "
                              "but one (--disable-plugin NAME)")
        return self.commands[name]

    def command_owner(self, name: str) -> PluginInfo:
        """The plugin whose command ``name`` is registered."""
        return self._providers[f"command:{name}"]

    def get_lowering(self, name: str) -> LoweringRecord:
        """The lowering registered under ``name`` (a schedule's ``lowering()`` answer)."""
        key = f"lowering:{name}"
        if key in self.conflicts:
            raise PluginError(f"lowering {name!r} is provided by more than one distribution: "
                              f"{', '.join(self.conflicts[key])}; uninstall or disable one")
        if name not in self.lowerings:
            raise UnknownNameError("lowering", name, self.describe(self.lowerings),
                                   self._failed_hint("lowering", name))
        return self.lowerings[name]

    def get_strategy(self, name: str) -> Strategy:
        """The ordering function registered with *this* host under ``name`` (case-insensitive)."""
        key = name.strip().upper()
        if f"strategy:{key}" in self.conflicts:
            raise PluginError(f"strategy {key!r} is provided by more than one distribution: "
                              f"{', '.join(self.conflicts[f'strategy:{key}'])}; uninstall or "
                              "disable one")
        if key not in self.strategies:
            raise UnknownNameError("scheduling strategy", key, self.describe(self.strategies),
                                   self._failed_hint("strategy", key))
        return self.strategies[key].function

    @staticmethod
    def describe(table: Mapping[str, Any]) -> list[str]:
        """Names with their providers, for "Known ..." lists in error messages."""
        return [f"{n} ({table[n].provider})" if table[n].provider else n for n in sorted(table)]

    # --- override resolution ------------------------------------------------------
    def _override(self, hook_name: str, **kwargs: Any) -> tuple[str, Any]:
        """One plugin answer wins over the core default; two plugin answers conflict.

        Returns (name of the answering plugin, its answer).
        """
        answers = []
        core_impl = None
        for impl in self._impls(hook_name):
            if impl.plugin_name == "core":
                core_impl = impl
                continue
            result = self._call_one(hook_name, impl, **kwargs)
            if result is not None:
                answers.append((impl.plugin_name, result))
        if len(answers) > 1:
            names = " and ".join(self._registered[n].culprit.describe() for n, _ in answers)
            raise PluginError(f"{hook_name}: {names} both answer for this schedule; "
                              "disable one of them")
        if answers:
            return answers[0]
        if core_impl is None:
            return "core", None
        return "core", self._call_one(hook_name, core_impl, **kwargs)

    # The core always answers these (possibly with an empty list), so they never return None.
    def derive_edges(self, schedule: Any, body: tuple[Op, ...],
                     config: PipelineConfig) -> Sequence[DepEdge]:
        return self._override("pipeline_core_derive_edges", schedule=schedule, body=body, config=config)[1]

    def explicit_blocks(self, schedule: Any, body: tuple[Op, ...],
                        program: Program) -> Sequence[Sequence[Op]]:
        return self._override("pipeline_core_explicit_blocks", schedule=schedule, body=body,
                              program=program)[1]

    def explicit_blocks_with_source(self, schedule: Any, body: tuple[Op, ...],
                                    program: Program) -> tuple[str, Sequence[Sequence[Op]]]:
        """The explicit op lists and who wrote them: the answering plugin (with its
        distribution) or the schedule's own ``build_explicit_blocks`` (the core's answer)."""
        name, lists = self._override("pipeline_core_explicit_blocks", schedule=schedule,
                                     body=body, program=program)
        if name == "core":
            return f"build_explicit_blocks() of schedule {schedule.name}", lists
        return self._registered[name].culprit.describe(), lists

    def bootstrap_frags(self, schedule: Any) -> Sequence[Op]:
        return self._override("pipeline_core_bootstrap_frags", schedule=schedule)[1]

    def kernel_transforms(self, schedule: Any, target: str,
                          config: PipelineConfig) -> list[KernelTransform]:
        """The core's transforms (the schedule's own ``transform_kernel``), then every plugin's
        in ``(order, name)`` order."""
        core: list[KernelTransform] = []
        found: list[KernelTransform] = []
        for impl in self._impls("pipeline_core_kernel_transforms"):
            result = self._call_one("pipeline_core_kernel_transforms", impl, schedule=schedule,
                                    target=target, config=config)
            for transform in result or []:
                if impl.plugin_name == "core":
                    core.append(transform)
                    continue
                found.append(attrs.evolve(transform, function=self.guard.wrap(
                    self._registered[impl.plugin_name].culprit,
                    f"kernel transform {transform.name!r}", transform.function,
                    check=list_of(Entry))))
        return core + sorted(found, key=lambda t: (t.order, t.name))

    def guard_schedule(self, schedule: Any) -> GuardedSchedule:
        """A schedule object not built by a registered factory (API callers), under the guard."""
        kind = type(schedule)
        culprit = Culprit(plugin="", distribution=IN_PROCESS,
                          module=f"{kind.__module__}.{kind.__qualname__}")
        return self.guard.schedule(schedule, culprit, f"schedule object {kind.__qualname__}")

    # --- tracing ------------------------------------------------------------------
    def _install_trace(self, log: Callable[[str], None]) -> None:
        starts: list[float] = []

        def before(hook_name: str, hook_impls: Sequence[pluggy.HookImpl],
                   kwargs: Mapping[str, Any]) -> None:
            starts.append(time.perf_counter())
            log(f"[trace] {hook_name} <- {', '.join(i.plugin_name for i in hook_impls) or '(none)'}")

        def after(outcome: Any, hook_name: str, hook_impls: Sequence[pluggy.HookImpl],
                  kwargs: Mapping[str, Any]) -> None:
            took = (time.perf_counter() - starts.pop()) * 1000 if starts else 0.0
            log(f"[trace] {hook_name} done in {took:.3f} ms")

        self.pm.add_hookcall_monitoring(before, after)


def _guarded_run(guard: PluginGuard, culprit: Culprit, record: CommandRecord) -> Callable:
    """A plugin command's ``run`` under the guard; its stdout is the command's output."""
    def run(args: Any, host: Any) -> int:
        with guard.running(culprit, f"command {record.name!r}", owns_stdout=True):
            status = record.run(args, host)
        if status is None:
            return 0
        if isinstance(status, bool) or not isinstance(status, int):
            raise guard.failure(culprit, f"command {record.name!r}",
                                f"returned {type(status).__name__}, expected an exit status (int) "
                                "or None")
        return status

    return run


def _module_location(module_name: str, obj: Any = None) -> str:
    """The directory of a plugin's module file, found without running the plugin's code.

    A loaded plugin (``obj``) says where it is; for one that failed or is disabled, the
    top-level package is looked up on the path (``find_spec`` of a top-level name executes
    nothing).
    """
    import importlib.util

    path = getattr(obj, "__file__", None)
    if path is None and obj is not None:
        path = getattr(sys.modules.get(type(obj).__module__), "__file__", None)
    if path is None:
        top = module_name.split(":")[0].split(".")[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        path = spec.origin if spec is not None and spec.origin not in (None, "built-in") else None
    return os.path.dirname(os.path.abspath(path)) if path else ""


def _spec_names() -> list[str]:
    return [n for n in dir(hookspecs) if n.startswith("pipeline_core_")]


def _core_version() -> str:
    from pipeline_core import __version__
    return __version__


_DEFAULT: PluginHost | None = None


def default_host() -> PluginHost:
    """The host with every installed plugin (built once per process)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = PluginHost()
    return _DEFAULT


def get_plugin_manager(**kwargs: Any) -> PluginHost:
    """A fresh host (tests and tools build their own; nothing is built at import time)."""
    return PluginHost(**kwargs)
