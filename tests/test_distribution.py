"""What the installed distributions promise plugin authors, checked on this installation."""
from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points, version

import pytest

import pipeline_core

PLUGIN_DISTRIBUTIONS = {
    "pipeline_core_amd_mi355x": "pipeline-core-amd-mi355x",
    "pipeline_core_schedules_pingpong": "pipeline-core-schedules-pingpong",
    "pipeline_core_schedules_4wave": "pipeline-core-schedules-4wave",
    "pipeline_core_schedules_matmul_grid": "pipeline-core-schedules-matmul-grid",
    "pipeline_core_nvidia_h100": "pipeline-core-nvidia-h100",
}


def test_the_core_version_is_the_installed_distribution_version():
    assert pipeline_core.DISTRIBUTION == "gpu-pipeline-core"
    assert pipeline_core.__version__ == version("gpu-pipeline-core")


@pytest.mark.parametrize("package,distribution", PLUGIN_DISTRIBUTIONS.items())
def test_each_plugin_version_is_its_distribution_version(package, distribution):
    module = __import__(package)
    assert module.__version__ == version(distribution)


def test_an_uninstalled_distribution_has_an_explicit_unknown_version():
    assert pipeline_core.installed_version("no-such-distribution-anywhere") == "0+unknown"


def test_the_testing_helpers_import_without_pytest():
    code = ("import sys; sys.modules['pytest'] = None; "
            "import pipeline_core.testing, pipeline_core_amd_mi355x.testing; "
            "r = pipeline_core.testing.run_cli(['targets']); "
            "assert r.exit_code == 0 and 'mi355x' in r.stdout, r")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_fixtures_are_offered_through_pytest11():
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("pipeline_core") == "pipeline_core.pytest_plugin"


def test_the_pytest11_fixtures_work_without_an_import(pipeline_host, pipeline_cli):
    from pipeline_core.plugins import PluginHost

    assert isinstance(pipeline_host(), PluginHost)
    assert pipeline_cli(["--version"]).exit_code == 0
