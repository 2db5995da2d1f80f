"""The core's import graph stays layered (docs/guide/architecture.md, "Architecture"): every import counts,
module- or function-level, ``TYPE_CHECKING`` blocks included, since a type-only import is still
a dependency a reader must follow.

Why a test: the records many layers share (``compiled.py``, ``check/verdict.py``, the plugin
markers) were cut loose from the engines that compute them so that the compiler, the document,
the proof and the checker stopped importing each other; a later import that closes a loop
again is caught here, naming the modules in it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import attrs
import networkx as nx
import pytest

import pipeline_core
from pipeline_core.compiled import CompiledSchedule

PACKAGE = Path(pipeline_core.__file__).resolve().parent
#: the largest group of modules that may import each other: today commands / hookspecs /
#: plugins (a plugin command receives the host, whose hooks return command records; type-only)
MOST_IN_A_CYCLE = 3


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> nx.DiGraph:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(files)

    def owner(name: str) -> str | None:  # the module (or package) an imported name lives in
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in files.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = owner(name) if name.split(".")[0] == PACKAGE.name else None
                # a submodule's import of its own package runs that package's __init__ anyway
                if target and target != module and not module.startswith(target + "."):
                    graph.add_edge(module, target)
    return graph


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return _graph()


def test_the_graph_sees_the_package(graph):
    assert graph.number_of_nodes() > 90
    assert graph.has_edge("pipeline_core.compiler", "pipeline_core.compiled")
    # a function-level import counts: the compiler imports the proof stage inside a function
    assert graph.has_edge("pipeline_core.compiler", "pipeline_core.proof")


def test_no_group_of_more_than_three_modules_imports_itself(graph):
    groups = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    too_big = [group for group in groups if len(group) > MOST_IN_A_CYCLE]
    assert too_big == [], "modules importing each other: " + "; ".join(" ".join(g) for g in too_big)


@pytest.mark.parametrize("record, engines", [
    ("pipeline_core.compiled", ("compiler", "proof", "document", "check.checker", "plugins",
                                "sync.settle", "agents.prove")),
    ("pipeline_core.check.verdict", ("check.checker", "check.trace", "proof", "compiler")),
    ("pipeline_core.markers", ("hookspecs", "plugins", "builtin_plugin")),
    ("pipeline_core.scheduling.registry", ("scheduling.builtin", "scheduling.exact")),
    ("pipeline_core.cli_options", ("cli", "check.cli", "analyze_cli")),
])
def test_a_shared_record_module_reaches_none_of_the_engines_that_read_it(graph, record, engines):
    reached = nx.descendants(graph, record)
    assert sorted(e for e in engines if f"pipeline_core.{e}" in reached) == []


def test_the_sync_settle_stage_takes_the_prover_instead_of_importing_it(graph):
    reached = nx.descendants(graph, "pipeline_core.sync.settle")
    assert "pipeline_core.proof" not in reached and "pipeline_core.check.trace" not in reached


def test_the_compiled_record_names_the_real_type_of_every_field():
    loose = [f.name for f in attrs.fields(CompiledSchedule) if "Any" in str(f.type)]
    assert loose == []
