"""`pipeline-core completion bash|zsh` (issue 25): a static script shtab writes from the CLI's own
parser, offering the installed schedules, targets and emitters; shtab is the optional extra
`completion`, never imported by the CLI otherwise (pipeline_core/completion.py)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _complete(script: str, tmp_path, words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` with the script sourced."""
    path = tmp_path / "pipeline-core.bash"
    path.write_text(script)
    line = " ".join(words)
    driver = (f'source {path}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; '
              f'COMP_LINE="{line}"; COMP_POINT=${{#COMP_LINE}}; _shtab_pipeline_core; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", driver], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.fixture(scope="module")
def bash_script():
    pytest.importorskip("shtab")
    from pipeline_core.testing import run_cli

    result = run_cli(["completion", "bash"])
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("words, offered", [
    (["pipeline-core", "co"], ["compile", "completion"]),
    (["pipeline-core", "compile", "pi"], ["pingpong"]),
    (["pipeline-core", "check", "pingpong", "--target", "h100"], ["h100", "h100-pingpong"]),
    (["pipeline-core", "compile", "pingpong", "--ka"], []),
    (["pipeline-core", "compile", "pingpong", "--kern"], ["--kernel-only"]),
    # issue 39: the keys of -p / -T / -c, as KEY= (any installed schedule's, target's, knob)
    (["pipeline-core", "compile", "pingpong", "-p", "MMA_"], ["MMA_K=", "MMA_M=", "MMA_N="]),
    (["pipeline-core", "compile", "hello", "-T", "stag"], ["stages="]),
    (["pipeline-core", "compile", "pingpong", "-c", "minimal_b"], ["minimal_barriers="]),
])
def test_bash_completes_commands_names_and_options(bash_script, tmp_path, words, offered):
    from pipeline_core.plugins import default_host

    host = default_host()
    if "pingpong" not in host.schedules or "h100" not in host.targets:
        pytest.skip("bundled plugins not installed")
    assert _complete(bash_script, tmp_path, words) == offered


def test_the_zsh_script_is_a_compdef_with_the_installed_schedules():
    pytest.importorskip("shtab")
    from pipeline_core.plugins import default_host
    from pipeline_core.testing import run_cli

    result = run_cli(["completion", "zsh"])
    assert result.exit_code == 0 and result.stdout.startswith("#compdef pipeline-core")
    assert all(name in result.stdout for name in default_host().schedules)


def test_without_shtab_the_command_names_the_extra(monkeypatch):
    from pipeline_core.testing import run_cli

    monkeypatch.setitem(sys.modules, "shtab", None)  # import shtab raises ImportError
    result = run_cli(["completion", "bash"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("error: completion scripts are written by shtab, which is not "
                             "installed: pip install 'gpu-pipeline-core[completion]'  (or: pip "
                             "install shtab)\n")


def test_the_cli_does_not_import_shtab_otherwise():
    code = ("import sys; from pipeline_core.cli import main; main(['knobs', '-o', '-']); "
            "sys.stderr.write(str('shtab' in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stderr.endswith("False"), done.stderr
