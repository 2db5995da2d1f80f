"""-p / -T / -c defaults from [tool.pipeline-core] in the nearest pyproject.toml (issue 25;
pipeline_core/project_defaults.py): the command line wins key by key, and a bad table, key
or value is refused with exit 2 naming the file, the table and the key."""
from __future__ import annotations

import json

import pytest

from pipeline_core.project_defaults import find

pytest.importorskip("pipeline_core_schedules_pingpong")

TABLE = "[tool.pipeline-core.schedules.pingpong]\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with a pyproject.toml; the command runs in a subfolder of it."""
    sub = tmp_path / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)

    def write(text: str):
        (tmp_path / "pyproject.toml").write_text(text)
        return tmp_path / "pyproject.toml"
    return write


def _config(cli, *argv):
    result = cli("compile", "pingpong", "--format", "json", *argv)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    return doc["schedule_config"], doc["config"]


def test_the_files_values_apply_and_the_command_line_wins_key_by_key(cli, project):
    project(TABLE + 'c = { auto_waits = false, wait_vm_last = 4, scheduling = "CSP" }\n'
            'T = { vm_per_load_a = 8 }\n')
    sched, config = _config(cli)
    assert (sched["auto_waits"], sched["wait_vm_last"], config["vm_per_load_a"]) == (False, 4, 8)
    sched, config = _config(cli, "-c", "wait_vm_last=2", "-T", "vm_per_load_a=4")
    assert (sched["auto_waits"], sched["wait_vm_last"], config["vm_per_load_a"]) == (False, 2, 4)


def test_another_schedules_table_does_not_apply(cli, project):
    project("[tool.pipeline-core.schedules.matmul-grid]\nc = { auto_waits = false }\n")
    sched, _ = _config(cli)
    assert sched["auto_waits"] is True


@pytest.mark.parametrize("text, needle", [
    (TABLE + "T = { max_globalz = 1 }\n",
     "[tool.pipeline-core.schedules.pingpong].T.max_globalz = '1' is invalid: Unknown -T "
     "parameter of target mi355x 'max_globalz'. Did you mean 'max_globals'?"),
    (TABLE + "c = { wait_vm_last = 4.5 }\n",
     "[tool.pipeline-core.schedules.pingpong].c.wait_vm_last = 4.5 is invalid: a string, an "
     "integer or true/false"),
    (TABLE + "x = { a = 1 }\n", "[tool.pipeline-core.schedules.pingpong].x = {'a': 1} is "
                                "invalid: one of p (-p), T (-T), c (-c)"),
    ("[tool.pipeline-core]\nschedule = 1\n", "[tool.pipeline-core].schedule = 1 is invalid: "
                                             "the only key is schedules"),
    (TABLE + "p = { fp8 = 3 }\n", ".p.fp8 = '3' is invalid: -p fp8=3 is invalid"),
    # a value another knob overrides (pipeline_core/overrides.py) names the file too
    (TABLE + "c = { wait_vm_last = 4 }\n",
     "[tool.pipeline-core.schedules.pingpong].c.wait_vm_last = '4' is invalid: -c "
     "wait_vm_last=4 is invalid for schedule pingpong: auto_waits=true replaces it"),
    ("[tool.pipeline-core\n", "pyproject.toml: not readable TOML"),
])
def test_a_bad_entry_names_the_file_and_the_key(cli, project, text, needle):
    path = project(text)
    result = cli("compile", "pingpong")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}"), result.stderr
    assert needle in result.stderr and "\n" not in result.stderr.rstrip("\n")


def test_the_nearest_file_with_a_table_is_read(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(TABLE + "c = { auto_waits = false }\n")
    inner = tmp_path / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no table: look further
    assert find(inner) == tmp_path / "pyproject.toml"
    (inner / "pyproject.toml").write_text("[tool.pipeline-core.schedules.hello]\n")
    assert find(inner) == inner / "pyproject.toml"


def test_check_input_takes_no_defaults_from_the_file(cli, project, tmp_path):
    """check --input judges the document as compiled: the file's -c does not apply there."""
    doc = cli("compile", "pingpong", "--format", "json")
    path = tmp_path / "doc.json"
    path.write_text(doc.stdout)
    project(TABLE + "c = { wait_vm_last = 4 }\n")
    assert cli("check", "--input", str(path)).exit_code == 0
