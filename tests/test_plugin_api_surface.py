"""The curated surface is the one the bundled plugins use: every core name a plugin module, the
example or the ``new-plugin`` template imports comes from ``pipeline_core.plugin_api`` and is
in its ``__all__`` (docs/guide/target-plugin.md, "5. The plugin"; their tests may import
anything).  Read with ``ast``, so an import inside a function or under ``TYPE_CHECKING``
counts too."""
from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

import pytest

import pipeline_core.plugin_api as plugin_api
from pipeline_core import scaffold

ROOT = Path(__file__).resolve().parents[1]
SURFACE = "pipeline_core.plugin_api"


def plugin_modules() -> dict[str, str]:
    """{path relative to the checkout: source} of every module a plugin ships (not its tests),
    and of the ``new-plugin`` project's package modules."""
    packages = sorted(ROOT.glob("plugins/*/pipeline_core_*")) + [
        ROOT / "examples" / "hello_schedule" / "hello_schedule"]
    found = {str(f.relative_to(ROOT)): f.read_text() for p in packages for f in sorted(p.rglob("*.py"))}
    for rel, text in scaffold.files_for("surface-check").items():
        if rel.endswith(".py") and not rel.startswith("tests/"):
            found[f"new-plugin template: {rel}"] = text
    return found


def off_surface_imports(source: str, filename: str, surface: str = SURFACE,
                        names: Sequence[str] = tuple(plugin_api.__all__)) -> list[str]:
    """One line per name of ``surface``'s package that ``source`` imports other than from the
    curated ``surface``, or from it but outside its ``names`` (its ``__all__``): the file, the
    line and the name.  The core's surface by default; the H100 kit's door
    (``pipeline_core_nvidia_h100.kit_api``) for a kernel family."""
    package = surface.split(".")[0]
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package and alias.name != surface:
                    found.append(f"{filename}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != package:
                continue
            for alias in node.names:
                if node.module != surface:
                    found.append(f"{filename}:{node.lineno}: {node.module}.{alias.name} "
                                 f"(import it from {surface})")
                elif alias.name not in names:
                    found.append(f"{filename}:{node.lineno}: {alias.name} is not in "
                                 f"{surface}.__all__")
    return found


def test_every_bundled_plugin_imports_core_names_only_from_the_surface():
    modules = plugin_modules()
    # the eight bundled plugins, the example and the template are all read (no vacuous pass)
    assert {Path(p).parts[1] for p in modules if p.startswith("plugins/")} == {
        "amd_mi355x", "family_gemv", "nvidia_h100", "schedules_4wave", "schedules_attention",
        "schedules_matmul_grid", "schedules_pingpong", "target_a100"}
    assert "examples/hello_schedule/hello_schedule/plugin.py" in modules
    assert "new-plugin template: pipeline_core_surface_check/plugin.py" in modules
    offending = [line for name, text in modules.items() for line in off_surface_imports(text, name)]
    assert offending == []


@pytest.mark.parametrize("source, expected", [
    ("from pipeline_core.sync import BlockBinding\n",
     "p.py:1: pipeline_core.sync.BlockBinding (import it from pipeline_core.plugin_api)"),
    ("def f():\n    from pipeline_core.agents.timing import AgentMachine\n",
     "p.py:2: pipeline_core.agents.timing.AgentMachine (import it from pipeline_core.plugin_api)"),
    ("from pipeline_core import installed_version\n",
     "p.py:1: pipeline_core.installed_version (import it from pipeline_core.plugin_api)"),
    ("import pipeline_core.ops as ops\n", "p.py:1: import pipeline_core.ops"),
    ("from pipeline_core.plugin_api import attrs\n",
     "p.py:1: attrs is not in pipeline_core.plugin_api.__all__"),
])
def test_an_import_past_the_surface_is_named_with_file_line_and_name(source, expected):
    assert off_surface_imports(source, "p.py") == [expected]


def test_the_surface_and_other_packages_pass():
    source = ("from pipeline_core.plugin_api import BlockBinding, hookimpl\n"
              "import pipeline_core.plugin_api\nimport pipeline_core_amd_mi355x\n"
              "from pipeline_core_amd_mi355x.tags import CHANNEL_A\nfrom . import plugin\n")
    assert off_surface_imports(source, "p.py") == []


def test_the_names_a_target_needs_are_on_the_surface():
    # the records docs/guide/target-plugin.md builds its target from
    for name in ("TargetRecord", "TargetProfile", "CostModel", "OpCost", "PipelineConfig",
                 "WarpStagger", "SyncModel", "Channel", "Effect", "BarrierKind", "BlockBinding",
                 "Param", "Bound", "COPY_RING", "hookimpl"):
        assert name in plugin_api.__all__, name


def test_framework_op_refuses_a_tag_that_is_no_block_template_op():
    from pipeline_core.plugin_api import FrameworkTag, framework_op

    with pytest.raises(ValueError, match="framework_op: NONE is no block-template op"):
        framework_op(FrameworkTag.NONE)


KIT = "pipeline_core_nvidia_h100.kit_api"


def test_kernel_families_reach_the_h100_plugin_only_through_its_kit_door():
    """A Hopper kernel family (schedules_attention today) imports the H100 plugin through
    ``kit_api`` and only names in its ``__all__`` (the kit's first step, issue 34), so the
    plugin may move its private pieces without breaking a family."""
    kit_api = pytest.importorskip(KIT)
    modules = {name: text for name, text in plugin_modules().items()
               if name.startswith("plugins/") and not name.startswith("plugins/nvidia_h100/")}
    for family in ("schedules_attention", "family_gemv"):  # each is read (no vacuous pass)
        assert any(name.startswith(f"plugins/{family}/") and KIT in text
                   for name, text in modules.items()), family
    offending = [line for name, text in modules.items()
                 for line in off_surface_imports(text, name, KIT, kit_api.__all__)]
    assert offending == []
    missing = [n for n in kit_api.__all__ if not hasattr(kit_api, n)]
    assert missing == []


def test_an_import_past_the_kit_door_is_named():
    source = "from pipeline_core_nvidia_h100.runtime import _require\n"
    assert off_surface_imports(source, "f.py", KIT, ("KernelBuilder",)) == [
        f"f.py:1: pipeline_core_nvidia_h100.runtime._require (import it from {KIT})"]
