"""The plugin host: entry-point discovery, isolation of broken plugins, registries, overrides.

pluggy's own ``load_setuptools_entrypoints`` stops at the first broken plugin
and never names the distribution, so discovery is ours: entry points of the
``pipeline_core`` group are sorted by (name, distribution), each is loaded in
its own ``try``, and failures are recorded with their provenance.  Every
answer the host gives is independent of install order.
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
from pipeline_core.errors import PluginError, UnknownNameError
from pipeline_core.schedule import (KernelTransform, Schedule, ScheduleRecord, StrategyRecord,
                                    TargetRecord)

if TYPE_CHECKING:
    from pipeline_core.config import PipelineConfig
    from pipeline_core.edges import DepEdge
    from pipeline_core.scheduling.registry import Strategy
    from pipeline_core.ops import Op
    from pipeline_core.program.program import Program

_Record = TypeVar("_Record", TargetRecord, ScheduleRecord)

GROUP = "pipeline_core"
ENV_DISABLE = "PIPELINE_CORE_DISABLE_PLUGINS"
ENV_NO_AUTOLOAD = "PIPELINE_CORE_NO_AUTOLOAD"
ENV_STRICT = "PIPELINE_CORE_STRICT_PLUGINS"
ENV_PLUGINS = "PIPELINE_CORE_PLUGINS"

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
    hooks: list[str] = attrs.field(factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "module": self.module, "status": self.status, "error": self.error,
                "targets": self.targets, "schedules": self.schedules,
                "strategies": self.strategies, "hooks": self.hooks}


def _split_env(name: str) -> list[str]:
    return [x.strip() for x in os.environ.get(name, "").replace(";", ",").split(",") if x.strip()]


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _entry_points() -> list[tuple[str, str, str, EntryPoint]]:
    if sys.version_info >= (3, 10):
        from importlib.metadata import entry_points
    else:  # pragma: no cover
        from importlib_metadata import entry_points
    found = []
    for ep in entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        dist_name = dist.metadata["Name"] if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        found.append((ep.name, dist_name, version, ep))
    return sorted(found, key=lambda t: (t[0], t[1]))


class PluginHost:
    """A pluggy manager plus the target / schedule / strategy registries built from it."""

    def __init__(self, *, autoload: bool | None = None, disabled: Iterable[str] = (),
                 extra_modules: Iterable[str] = (), extra_plugins: Iterable[tuple[str, Any]] = (),
                 strict: bool | None = None, trace: Callable[[str], None] | None = None) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.targets: dict[str, TargetRecord] = {}
        self.schedules: dict[str, ScheduleRecord] = {}
        self.strategies: dict[str, StrategyRecord] = {}
        self.conflicts: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self.strict = _truthy_env(ENV_STRICT) if strict is None else strict
        self._disabled = set(disabled) | set(_split_env(ENV_DISABLE))
        if trace is not None:
            self._install_trace(trace)

        from pipeline_core import builtin_plugin
        self._register("core", CORE, _core_version(), builtin_plugin, "pipeline_core.builtin_plugin")
        if autoload is None:
            autoload = not _truthy_env(ENV_NO_AUTOLOAD)
        if autoload:
            for name, dist, version, ep in _entry_points():
                self._load_entry_point(name, dist, version, ep)
        for module in list(extra_modules) + _split_env(ENV_PLUGINS):
            self._load_module(module)
        for name, obj in extra_plugins:
            self._register(name, "(in-process)", "", obj, getattr(obj, "__name__", repr(obj)))
        self._collect()

    # --- loading --------------------------------------------------------------
    def _info(self, name: str, dist: str, version: str, module: str, status: str = "ok",
              error: str = "", tb: str = "") -> PluginInfo:
        info = PluginInfo(name, dist, version, module, status, error, tb)
        self.plugins.append(info)
        return info

    def _fail(self, info: PluginInfo, problem: str, tb: str = "") -> None:
        info.status = f"failed: {problem}"
        info.error = problem
        info.traceback = tb
        self.warnings.append(f"plugin {info.name!r} from distribution {info.distribution} "
                             f"{info.version}: {problem}")

    def _load_entry_point(self, name: str, dist: str, version: str, ep: EntryPoint) -> None:
        if name in self._disabled or dist in self._disabled:
            self._info(name, dist, version, ep.value, status="disabled")
            return
        if any(p.name == name for p in self.plugins):
            other = next(p for p in self.plugins if p.name == name)
            info = self._info(name, dist, version, ep.value, status="conflict")
            info.error = (f"entry-point name {name!r} is also used by distribution "
                          f"{other.distribution}; the first (by distribution name) is kept")
            self.warnings.append(f"plugin {name!r} from distribution {dist}: {info.error}")
            return
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must never break the host
            info = self._info(name, dist, version, ep.value)
            self._fail(info, f"import failed: {type(exc).__name__}: {exc}", traceback.format_exc())
            return
        self._register(name, dist, version, obj, ep.value)

    def _load_module(self, module: str) -> None:
        try:
            obj = importlib.import_module(module)
        except Exception as exc:
            info = self._info(module, "(development)", "", module)
            self._fail(info, f"import failed: {type(exc).__name__}: {exc}", traceback.format_exc())
            return
        self._register(module, "(development)", "", obj, module)

    def _register(self, name: str, dist: str, version: str, obj: Any, module: str) -> None:
        info = self._info(name, dist, version, module)
        try:
            self.pm.register(obj, name=name)
        except Exception as exc:
            self._fail(info, f"registration failed: {exc}", traceback.format_exc())
            return
        unknown = [c.name for c in (self.pm.get_hookcallers(obj) or []) if c.spec is None]
        if unknown:
            self.pm.unregister(obj)
            hints = []
            for hook in unknown:
                close = difflib.get_close_matches(hook, _spec_names(), n=1)
                hints.append(f"{hook!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            self._fail(info, "implements unknown hook " + ", ".join(hints))
            return
        info.hooks = sorted(c.name for c in (self.pm.get_hookcallers(obj) or []))

    # --- calling ----------------------------------------------------------------
    def _call_one(self, hook_name: str, impl: pluggy.HookImpl, **kwargs: Any) -> Any:
        """Call one plugin's implementation through pluggy (so ``--trace`` monitoring sees it)."""
        others = [p for p in self.pm.get_plugins() if p is not impl.plugin]
        caller = self.pm.subset_hook_caller(hook_name, remove_plugins=others)
        results = caller(**kwargs)
        return results[0] if results else None

    # --- registries -----------------------------------------------------------
    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        """Hook implementations of live plugins, sorted by plugin name (never install order)."""
        caller = getattr(self.pm.hook, hook_name)
        impls = [i for i in caller.get_hookimpls()]
        return sorted(impls, key=lambda i: (i.plugin_name != "core", i.plugin_name))

    def _info_by_name(self, name: str) -> PluginInfo:
        return next(p for p in self.plugins if p.name == name and p.status != "conflict")

    def _collect(self) -> None:
        kinds = (("pipeline_core_register_targets", TargetRecord, self.targets, "targets", "target"),
                 ("pipeline_core_register_schedules", ScheduleRecord, self.schedules, "schedules", "schedule"),
                 ("pipeline_core_register_strategies", StrategyRecord, self.strategies, "strategies", "strategy"))
        for hook, record_type, table, attr, label in kinds:
            for impl in self._impls(hook):
                info = self._info_by_name(impl.plugin_name)
                if info.status != "ok":
                    continue
                try:
                    records = list(self._call_one(hook, impl) or [])
                    bad = [r for r in records if not isinstance(r, record_type)]
                    if bad:
                        raise PluginError(f"{hook} returned {type(bad[0]).__name__}, "
                                          f"expected {record_type.__name__}")
                except Exception as exc:
                    self._fail(info, f"{hook} failed: {type(exc).__name__}: {exc}",
                               traceback.format_exc())
                    self.pm.unregister(name=impl.plugin_name)
                    self._drop_records(impl.plugin_name)
                    continue
                for record in records:
                    key = record.name.upper() if record_type is StrategyRecord else record.name
                    record = attrs.evolve(record, provider=f"{info.distribution}")
                    if key in table:
                        first = table[key]
                        msg = (f"{label} {record.name!r} is provided by both {first.provider} "
                               f"and {record.provider}")
                        self.conflicts.setdefault(f"{label}:{key}", [first.provider]).append(record.provider)
                        self.warnings.append(msg)
                        info.status = "conflict"
                        info.error = msg
                        continue
                    table[key] = record
                    getattr(info, attr).append(record.name)

    def _drop_records(self, plugin_name: str) -> None:
        info = self._info_by_name(plugin_name)
        for table, names in ((self.targets, info.targets), (self.schedules, info.schedules),
                             (self.strategies, info.strategies)):
            for n in names:
                table.pop(n.upper() if table is self.strategies else n, None)
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
        return " ".join(f"Plugin {p.name!r} ({p.distribution}) failed to load and may provide it: "
                        f"{p.error}" for p in shown)

    def _lookup(self, kind: str, table: Mapping[str, _Record], name: str) -> _Record:
        key = f"{kind}:{name}"
        if key in self.conflicts:
            raise PluginError(f"{kind} {name!r} is provided by more than one distribution: "
                              f"{', '.join(self.conflicts[key])}; uninstall or disable one")
        if name not in table:
            raise UnknownNameError(kind, name, self.describe(table), self._failed_hint(kind, name))
        return table[name]

    def get_target(self, name: str) -> TargetRecord:
        return self._lookup("target", self.targets, name)

    def get_schedule(self, name: str) -> ScheduleRecord:
        return self._lookup("schedule", self.schedules, name)

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
    def describe(table: Mapping[str, TargetRecord | ScheduleRecord | StrategyRecord]) -> list[str]:
        """Names with their providers, for "Known ..." lists in error messages."""
        return [f"{n} ({table[n].provider})" if table[n].provider else n for n in sorted(table)]

    # --- override resolution ------------------------------------------------------
    def _override(self, hook_name: str, **kwargs: Any) -> Any:
        """One plugin answer wins over the core default; two plugin answers conflict."""
        answers: list[tuple[str, Any]] = []
        core_impl = None
        for impl in self._impls(hook_name):
            if impl.plugin_name == "core":
                core_impl = impl
                continue
            try:
                result = self._call_one(hook_name, impl, **kwargs)
            except Exception as exc:
                info = self._info_by_name(impl.plugin_name)
                raise PluginError(f"plugin {impl.plugin_name!r} ({info.distribution}) failed in "
                                  f"{hook_name}: {type(exc).__name__}: {exc}",
                                  plugin=impl.plugin_name, distribution=info.distribution) from exc
            if result is not None:
                answers.append((impl.plugin_name, result))
        if len(answers) > 1:
            names = " and ".join(f"{n!r} ({self._info_by_name(n).distribution})" for n, _ in answers)
            raise PluginError(f"{hook_name}: plugins {names} both answer for this schedule; "
                              "disable one of them")
        if answers:
            return answers[0][1]
        if core_impl is None:
            return None
        return self._call_one(hook_name, core_impl, **kwargs)

    # The core always answers these (possibly with an empty list), so they never return None.
    def derive_edges(self, schedule: Schedule, body: tuple[Op, ...],
                     config: PipelineConfig) -> Sequence[DepEdge]:
        return self._override("pipeline_core_derive_edges", schedule=schedule, body=body, config=config)

    def explicit_blocks(self, schedule: Schedule, body: tuple[Op, ...],
                        program: Program) -> Sequence[Sequence[Op]]:
        return self._override("pipeline_core_explicit_blocks", schedule=schedule, body=body,
                              program=program)

    def bootstrap_frags(self, schedule: Schedule) -> Sequence[Op]:
        return self._override("pipeline_core_bootstrap_frags", schedule=schedule)

    def kernel_transforms(self, schedule: Schedule, target: str,
                          config: PipelineConfig) -> list[KernelTransform]:
        found: list[KernelTransform] = []
        for impl in self._impls("pipeline_core_kernel_transforms"):
            result = self._call_one("pipeline_core_kernel_transforms", impl, schedule=schedule,
                                    target=target, config=config)
            found.extend(result or [])
        return sorted(found, key=lambda t: (t.order, t.name))

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
