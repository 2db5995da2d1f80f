"""The how-to "Run an existing schedule on my target" (docs/guide/retarget.md) is true: the
files it shows are plugins/target_a100's, every ``pipeline-core`` command it shows gives the
output shown (run in-process, in a scratch directory), the file it emits starts as shown, and
each author's mistake it describes fails as it says."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from guide_pages import DOCS, ROOT, commands, load_source, shown_files

PAGE = DOCS / "guide" / "retarget.md"
PLUGIN = "plugins/target_a100/pipeline_core_target_a100/plugin.py"
NEEDED = ("multistage-gemm", "pingpong", "warpspecialized-gemm")


@pytest.fixture(autouse=True)
def _installed():
    from pipeline_core.plugin_api import default_host

    host = default_host()
    missing = [n for n in NEEDED if n not in host.schedules] + [
        n for n in ("a100", "a100-pingpong") if n not in host.targets]
    if missing:
        pytest.skip(f"plugins not installed: {', '.join(missing)}")


def test_the_page_shows_the_plugin_as_it_is():
    files = shown_files(PAGE)
    assert set(files) == {PLUGIN, "plugins/target_a100/pyproject.toml",
                          "plugins/target_a100/pipeline_core_target_a100/machine.py"}
    for path, text in files.items():
        assert (ROOT / path).read_text() == text, path


def test_the_page_is_on_the_ladder_after_write_a_target():
    index = (DOCS / "index.md").read_text()
    assert index.index("guide/target-plugin\n") < index.index("guide/retarget\n")
    assert "(guide/retarget.md)" in index
    assert "(retarget.md)" in (DOCS / "guide" / "target-plugin.md").read_text()
    # the calibration the target guide links
    assert "(../../benchmarks/h100/README.md)" in (DOCS / "guide" / "target-plugin.md").read_text()


def test_every_command_gives_the_output_shown(tmp_path, monkeypatch):
    from pipeline_core.plugin_api import run_cli

    monkeypatch.chdir(tmp_path)
    ran = 0
    for cmd, shown in commands(PAGE):
        argv = shlex.split(cmd)
        if argv[0] == "pipeline-core":
            result = run_cli(argv[1:])
            if shown.startswith("error: "):
                assert (result.exit_code, result.stdout, result.stderr) == (2, "", shown), cmd
            else:
                assert result.exit_code == 0, (cmd, result.stderr)
                assert (result.stdout or result.stderr) == shown, cmd
            ran += 1
        elif argv[:2] == ["head", "-2"]:
            lines = Path(argv[2]).read_text().splitlines(keepends=True)[:2]
            assert "".join(lines) == shown, cmd
    assert ran >= 9


def _page_plugin(tmp_path, monkeypatch, old: str = "", new: str = ""):
    source = shown_files(PAGE)[PLUGIN]
    if old:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return load_source(tmp_path, monkeypatch, "a100_page", source)


def _refusal(module) -> str:
    from pipeline_core.plugin_api import PipelineError, compile_named, fresh_host
    from pipeline_core_nvidia_h100 import plugin as h100

    with pytest.raises(PipelineError) as info:
        compile_named("multistage-gemm", target="a100", host=fresh_host(h100, module))
    return str(info.value)


@pytest.mark.parametrize("old, new, lacks", [
    ('instructions=("ldmatrix", "mma.sync")', 'instructions=("mma.sync",)', "instruction ldmatrix"),
    ('CP_ASYNC = "cp_async"', 'CP_ASYNC = "cpasync"', "sync channel cp_async"),
], ids=["offer-misses-ldmatrix", "channel-by-another-name"])
def test_each_offer_mistake_is_refused_naming_what_is_missing(tmp_path, monkeypatch, old, new,
                                                             lacks):
    message = _refusal(_page_plugin(tmp_path, monkeypatch, old, new))
    assert f"it needs {lacks}, which target a100 does not offer" in message
    assert "\n" not in message
    assert lacks in " ".join(PAGE.read_text().split())


def test_a_cost_model_without_a_family_tag_is_refused_naming_it(tmp_path, monkeypatch):
    module = _page_plugin(tmp_path, monkeypatch, 'FRAG_B: _fragment("FRAG_B"),\n                        MMA: _mma("MMA")',
                          'FRAG_B: _fragment("FRAG_B")')
    assert "the cost model of target 'a100' lacks kernel tag 4" in _refusal(module)
