"""Helpers for testing pipeline-core plugins (yours or ours), with no test runner needed.

    from pipeline_core.testing import fresh_host, run_cli

    def test_my_schedule_compiles():
        host = fresh_host(my_plugin_module)              # only the core + your plugin
        compiled = compile_named("mine", host=host)

    def test_cli():
        result = run_cli(["compile", "mine", "--format", "json"])
        assert result.exit_code == 0, result.stderr

Under pytest the same helpers come as fixtures (``pipeline_host``, ``pipeline_cli``) with no
import: the core registers :mod:`pipeline_core.pytest_plugin` through the ``pytest11`` entry
point, as pytest's own plugins do.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Sequence

import attrs

from pipeline_core.plugins import PluginHost


def fresh_host(*plugins: Any, autoload: bool = False, **kwargs: Any) -> PluginHost:
    """A new host with the core and the given plugin modules/objects (no entry points by default)."""
    extra = [(getattr(p, "__name__", f"plugin{i}"), p) for i, p in enumerate(plugins)]
    return PluginHost(autoload=autoload, extra_plugins=extra, **kwargs)


@attrs.frozen
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], *, env: dict[str, str] | None = None) -> CliResult:
    """Run ``pipeline-core argv`` in-process; returns exit code and captured output."""
    import os

    from pipeline_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse errors
                code = int(exc.code or 0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CliResult(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def fields_read(*classes: type) -> Any:
    """Record which attrs fields of ``classes`` are read inside the block, as "Class.field":
    what an emitter reads of a plan to write its kernel, seen rather than listed by hand, so a
    field an emitter starts to read is seen the day it does."""
    seen: set[str] = set()
    saved = {c: c.__getattribute__ for c in classes}

    def tracker(cls: type, original: Any) -> Any:
        names = {f.name for f in attrs.fields(cls)}

        def get(self: Any, name: str) -> Any:
            if name in names:
                seen.add(f"{cls.__name__}.{name}")
            return original(self, name)
        return get

    for c, original in saved.items():
        setattr(c, "__getattribute__", tracker(c, original))
    try:
        yield seen
    finally:
        for c, original in saved.items():
            setattr(c, "__getattribute__", original)


def unproven_fields(compiled: Any, emit: Any, *, per_field: int = 6) -> list[str]:
    """The fields of ``compiled``'s plan that ``emit`` reads to write its kernel but the proof
    does not check, as one line each (none: what runs is what was proven).  For every Step,
    Ring, AgentProgram, AgentRole and Plan field ``emit(compiled)`` reads, up to ``per_field``
    single edits of it (:mod:`pipeline_core.check.plan_edits`, evenly spread) go to the prover:
    at least one must be refused (by the prover, or by the emitter itself: then nothing runs),
    and each the prover accepts must be accepted again over longer unrolls (the oracle,
    ``prove_plan(longer=True)``), else the edit is named."""
    from pipeline_core.agents.prove import prove_plan
    from pipeline_core.check.plan_edits import plan_edits
    from pipeline_core.plan import AgentProgram, AgentRole, Plan, Ring, Step

    with fields_read(Step, Ring, AgentProgram, AgentRole, Plan) as seen:
        emit(compiled)
    plan = compiled.plan

    from pipeline_core.errors import PipelineError

    def safe(p: Any, longer: bool = False) -> bool:
        return prove_plan(p, compiled.body, compiled.edges, plan.sync, longer=longer).safe

    def emitted(p: Any) -> bool:
        try:
            emit(attrs.evolve(compiled, plan=p))
        except PipelineError:  # the emitter's own refusal: no kernel, nothing unproven runs
            return False
        return True

    problems = []
    edits = list(plan_edits(plan))
    for field in sorted(seen):
        mine = [e for e in edits if e.field == field]
        if not mine:
            continue
        sample = mine[::max(1, len(mine) // per_field)][:per_field]
        accepted = [e for e in sample if safe(e.apply(plan)) and emitted(e.apply(plan))]
        if len(accepted) == len(sample):
            problems.append(f"{field}: the emitter reads it and the prover accepted every edit "
                            f"of it tried ({', '.join(e.description for e in sample)})")
        problems += [f"{field}: {e.description} accepted, unsafe over longer unrolls"
                     for e in accepted if not safe(e.apply(plan), longer=True)]
    return problems
