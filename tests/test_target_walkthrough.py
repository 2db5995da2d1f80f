"""The target walk-through (docs/guide/target-plugin.md) is true: its files are a complete
target plugin, what it says the Q1's sync model does is what compile does, every error it
shows is the one the tool gives, and (slow) every command it shows runs in a fresh virtual
environment, from `pipeline-core new-plugin` on, with the output the page shows."""
from __future__ import annotations

from pathlib import Path

import pytest

from guide_pages import (DOCS, ROOT, assert_page_ran_as_shown, commands, load_source, run_page,
                         shown_files, steps, text_blocks)

PAGE = DOCS / "guide" / "target-plugin.md"
#: the page's one placeholder: the reader's checkout of pipeline-core (here: this one)
CHECKOUT = "path/to/pipeline-core"
PLUGIN = "quill/pipeline_core_quill/plugin.py"


def test_the_page_shows_a_whole_target_plugin():
    files = shown_files(PAGE)
    assert PAGE.read_text().count("```{code-block}") == len(files)  # no file without a path
    assert set(files) == {PLUGIN, "quill/tests/test_pipeline_core_quill.py"}
    assert "guide/target-plugin" in (DOCS / "index.md").read_text()
    # the files replace what new-plugin wrote: they come after it, before the install
    order = [what for kind, what, _ in steps(PAGE)]
    assert order.index("pipeline-core new-plugin quill") < order.index(PLUGIN) < order.index(
        "pip install -e './quill[test]'")


def test_the_page_runs_new_plugin_compile_check_export_analyze_and_pytest():
    run = [cmd for cmd, _ in commands(PAGE)]
    assert any(c.startswith(f"pip install {CHECKOUT} {CHECKOUT}/examples/hello_schedule") for c in run)
    for needed in ("pipeline-core new-plugin quill", "pip install -e './quill[test]'",
                   "pipeline-core compile hello --target quill-gpu",
                   "pipeline-core check hello --target quill-gpu",
                   "pipeline-core export hello --target quill-gpu",
                   "pipeline-core analyze hello --target quill-gpu", "python -m pytest"):
        assert any(c.startswith(needed) for c in run), needed


def test_every_record_the_target_is_made_of_is_rendered_in_the_guide():
    records = (DOCS / "guide" / "records.md").read_text()
    for name in ("config.TargetProfile", "sync.SyncModel", "sync.Channel", "sync.Effect",
                 "sync.BarrierKind", "sync.BlockBinding", "costs.CostModel", "costs.OpCost",
                 "config.WarpStagger"):
        assert f".. autoclass:: pipeline_core.{name}\n" in records, name


def _load(tmp_path: Path, monkeypatch, name: str, source: str):
    return load_source(tmp_path, monkeypatch, name, source)


def _changed(old: str, new: str) -> str:
    source = shown_files(PAGE)[PLUGIN]
    assert source.count(old) == 1, old
    return source.replace(old, new)


@pytest.fixture
def page_plugin(tmp_path, monkeypatch):
    """The page's plugin module, imported from the extracted file (not installed)."""
    return _load(tmp_path, monkeypatch, "quill_page", shown_files(PAGE)[PLUGIN])


def _shown_lines() -> list[str]:
    return [line for block in text_blocks(PAGE) for line in block.splitlines()]


def test_hello_compiles_safe_for_the_page_target(page_plugin):
    import hello_schedule.plugin as hello
    from pipeline_core.plugin_api import compile_named, fresh_host

    compiled = compile_named("hello", target="quill-gpu", host=fresh_host(hello, page_plugin))
    assert compiled.proof is not None and compiled.proof.safe
    waits = {e.op.tag: e.op.wait_value for e in compiled.kernel if e.op.tag in (140, 141)}
    assert waits == {140: 0, 141: 0}


def test_in_order_copies_give_the_wait_and_the_cycles_the_page_states(tmp_path, monkeypatch):
    from pipeline_core.plugin_api import run_cli

    _load(tmp_path, monkeypatch, "quill_in_order",
          _changed('unit="op", in_order=False', 'unit="op", in_order=True'))
    result = run_cli(["--no-autoload", "--plugin", "hello_schedule.plugin", "--plugin",
                      "quill_in_order", "compile", "hello", "--target", "quill-gpu",
                      "--kernel-only", "--compact"])
    assert result.exit_code == 0, result.stderr
    first_step = next(line for line in result.stdout.splitlines() if line.startswith("   0-7 "))
    assert first_step in _shown_lines()
    assert "timing model: 643.5 cycles/iteration in the steady state" in result.stdout
    assert "drops from 1287.0 to 643.5 cycles per iteration" in " ".join(PAGE.read_text().split())


def _compile_error(module) -> str:
    import hello_schedule.plugin as hello
    from pipeline_core.plugin_api import PipelineError, compile_named, fresh_host

    with pytest.raises(PipelineError) as info:
        compile_named("hello", target="quill-gpu", host=fresh_host(hello, module))
    return "error: " + str(info.value)


@pytest.mark.parametrize("old, new", [
    ('    MMA: OpCost(ResourceKind.MMA_UNIT, 64, OpRole.COMPUTE, vgpr_def=16, name="MMA"),\n', ""),
    ('             Effect(role=OpRole.FRAGMENT_LOAD, counter="frag"),\n', ""),
    ("quill_gpu, family=COPY_RING,", "quill_gpu,"),
], ids=["cost-model-lacks-a-tag", "no-effect-for-fragment-loads", "no-family"])
def test_each_compile_mistake_fails_as_the_page_shows(tmp_path, monkeypatch, old, new):
    module = _load(tmp_path, monkeypatch, "quill_mistake", _changed(old, new))
    assert _compile_error(module) in _shown_lines()


@pytest.mark.parametrize("old, new", [
    ("WAIT_COPY, WAIT_FRAG, RDV_SYNC = 140, 141, 142", "WAIT_COPY, WAIT_FRAG, RDV_SYNC = 4, 5, 6"),
    ('Effect(role=OpRole.GLOBAL_LOAD, counter="copy")',
     'Effect(role=OpRole.GLOBAL_LOAD, counter="copies")'),
], ids=["sync-tag-among-kernel-tags", "effect-on-an-undeclared-channel"])
def test_each_import_mistake_fails_as_the_page_shows(tmp_path, monkeypatch, old, new):
    with pytest.raises(ValueError) as info:
        _load(tmp_path, monkeypatch, "quill_mistake", _changed(old, new))
    assert f"ValueError: {info.value}" in _shown_lines()


# --- the rule the page's "Tag numbering" states, on every tag a sync model declares -------------

def _model(**changes):
    from pipeline_core.plugin_api import BarrierKind, Channel, Effect, OpRole, SyncModel

    fields = dict(name="m", channels=(Channel(name="c", label="c", wait_tag=140, wait_name="W",
                                              commit_tag=changes.pop("commit_tag", 141)),),
                  effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="c"),),
                  barriers=(BarrierKind(tag=changes.pop("barrier_tag", 142), name="b"),))
    return SyncModel(**{**fields, **changes})


@pytest.mark.parametrize("changes, field", [
    ({"commit_tag": 0}, "channels[0].commit_tag is 0"),
    ({"barrier_tag": 127}, "barriers[0].tag is 127"),
    ({"barrier_tag": 255}, "barriers[0].tag is 255"),
    ({"hint_tags": {3: "HINT"}}, "hint_tags key 3 is 3"),
    ({"priority_tag": 5}, "priority_tag is 5"),
    ({"agent_tags": {"arrive": 9}}, "agent_tags['arrive'] is 9"),
])
def test_a_sync_tag_outside_128_254_is_refused_naming_the_field(changes, field):
    with pytest.raises(ValueError, match=r"give it a tag in \[128, 254\]") as info:
        _model(**changes)
    assert str(info.value).startswith(f"SyncModel m: {field}, but tags 0-127 are the kernel's")


def test_the_block_templates_tags_are_sync_tags():
    from pipeline_core.plugin_api import FrameworkTag

    assert _model(barrier_tag=int(FrameworkTag.BARRIER), hint_tags={254: "H"}).barrier.tag == 128


@pytest.mark.slow
def test_every_command_of_the_page_runs_as_shown(tmp_path):
    checked = assert_page_ran_as_shown(run_page(tmp_path, steps(PAGE), {CHECKOUT: str(ROOT)}))
    assert checked >= 8  # targets twice, new-plugin, schedules, compile, check, export, analyze
    assert (tmp_path / "hello.json").is_file() and (tmp_path / "hello.trace.json").is_file()
