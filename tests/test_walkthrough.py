"""The newcomer walk-through (docs/guide/walkthrough-grid-plugin.md) is true: its files are a
complete plugin, the errors it warns about are the ones the tool gives, and (slow) every
command it shows runs in a fresh virtual environment with the output the page shows."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from guide_pages import (DOCS, ROOT, assert_page_ran_as_shown, commands, run_page, shown_files,
                         text_blocks)

PAGE = DOCS / "guide" / "walkthrough-grid-plugin.md"
#: the page's one placeholder: the reader's checkout of pipeline-core (here: this one)
CHECKOUT = "path/to/pipeline-core"


def write_files(base: Path) -> None:
    for rel, body in shown_files(PAGE).items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


def test_the_page_shows_a_whole_project():
    files = shown_files(PAGE)
    assert PAGE.read_text().count("```{code-block}") == len(files)  # no file without a path
    assert set(files) == {"mygrid/pyproject.toml", "mygrid/mygrid/__init__.py",
                          "mygrid/mygrid/plugin.py", "mygrid/tests/test_grid3x2.py"}
    assert 'mygrid = "mygrid.plugin"' in files["mygrid/pyproject.toml"]
    assert "guide/walkthrough-grid-plugin" in (DOCS / "index.md").read_text()


def test_the_page_runs_compile_check_and_pytest():
    run = [cmd for cmd, _ in commands(PAGE)]
    assert any(c.startswith(f"pip install {CHECKOUT} ") for c in run)
    for needed in ("pip install -e './mygrid[test]'", "pipeline-core compile grid3x2",
                   "pipeline-core check grid3x2", "python -m pytest"):
        assert any(c.startswith(needed) for c in run), needed


@pytest.fixture
def page_plugin(tmp_path, monkeypatch):
    """The page's plugin module, imported from the extracted file (not installed)."""
    write_files(tmp_path)
    spec = importlib.util.spec_from_file_location("walkthrough_grid_plugin",
                                                  tmp_path / "mygrid" / "mygrid" / "plugin.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile_error(module) -> str:
    import pipeline_core_amd_mi355x.plugin as mi355x
    from pipeline_core.errors import PipelineError
    from pipeline_core.plugin_api import compile_named, fresh_host

    with pytest.raises(PipelineError) as info:
        compile_named(module.NAME, host=fresh_host(module, mi355x))
    return str(info.value)


def test_the_page_plugin_compiles_safe(page_plugin):
    import pipeline_core_amd_mi355x.plugin as mi355x
    from pipeline_core.plugin_api import compile_named, fresh_host

    compiled = compile_named(page_plugin.NAME, host=fresh_host(page_plugin, mi355x))
    assert compiled.proof is not None and compiled.proof.safe
    assert len(compiled.body) == 32 and len(compiled.plan.details.program.blocks) == 12


def _without_completion(ops):
    return ops[1:]


def _completion_subtile_0(ops):
    return [ops[0].evolve(subtile=0)] + ops[1:]


def _completion_k_prev(ops):
    from pipeline_core.plugin_api import KOffset

    return [ops[0].evolve(k_offset=KOffset.K_PREV)] + ops[1:]


def _mma_stage_is_partition(ops):
    from pipeline_core_amd_mi355x import DoubleBufferTag as T

    h = ops[1].stage  # a prefetch's stage is the partition's
    return [o.evolve(stage=h) if o.tag == T.MMA else o for o in ops]


@pytest.mark.parametrize("mistake", [_without_completion, _completion_subtile_0,
                                     _completion_k_prev, _mma_stage_is_partition],
                         ids=lambda f: f.__name__.strip("_"))
def test_each_body_mistake_fails_as_the_page_shows(page_plugin, monkeypatch, mistake):
    right = page_plugin.partition_ops
    monkeypatch.setattr(page_plugin, "partition_ops", lambda h: mistake(right(h)))
    shown = [line for block in text_blocks(PAGE) for line in block.splitlines()]
    assert "error: " + _compile_error(page_plugin) in shown


def test_a_config_without_the_grid_fails_as_the_page_says(page_plugin, monkeypatch):
    monkeypatch.setattr(page_plugin.Grid3x2, "config", lambda self: self.target.pipeline)
    message = _compile_error(page_plugin)
    assert message.startswith("10 ops are left after the last block (7): ")
    assert "`10 ops are left after the last block (7): ...`" in PAGE.read_text()


@pytest.mark.slow
def test_every_command_of_the_page_runs_as_shown(tmp_path):
    write_files(tmp_path)
    steps = [("run", cmd, shown) for cmd, shown in commands(PAGE)]
    assert_page_ran_as_shown(run_page(tmp_path, steps, {CHECKOUT: str(ROOT)}))
