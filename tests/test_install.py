"""Real installs: a plugin pip-installed into a fresh virtual environment is discovered,
and the install order of plugins never changes the output (byte for byte)."""
from __future__ import annotations

import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = [ROOT / "plugins" / "amd_mi355x", ROOT / "plugins" / "schedules_pingpong",
           ROOT / "plugins" / "schedules_4wave", ROOT / "plugins" / "schedules_matmul_grid",
           ROOT / "examples" / "hello_schedule"]

# The module builds two virtual environments (most of a minute) once, in whichever xdist
# worker runs this file (the suite runs with --dist loadfile); -m "not slow" skips them.
pytestmark = pytest.mark.slow


def make_env(path: Path, packages: list[Path]) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    py = path / "bin" / "python"
    # one pip call (the plugins depend on each other, and none is on an index), with the
    # local paths in the order given: pip installs them in that order
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(ROOT), *map(str, packages)], check=True, capture_output=True, text=True,
                   timeout=900)
    return path / "bin" / "pipeline-core"


def write_plugin(root: Path) -> Path:
    pkg = root / "tmp_plugin"
    (pkg / "tmp_plugin").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "tmp-plugin"
        version = "1.2.3"
        dependencies = ["gpu-pipeline-core~=0.1"]
        [project.entry-points."pipeline_core"]
        tmp = "tmp_plugin"
        [tool.setuptools]
        packages = ["tmp_plugin"]
    """))
    (pkg / "tmp_plugin" / "__init__.py").write_text(textwrap.dedent("""
        from pipeline_core import hookimpl
        from pipeline_core.config import PipelineConfig, TargetProfile
        from pipeline_core.costs import CostModel, OpCost
        from pipeline_core.ops import OpRole, ResourceKind, op
        from pipeline_core.schedule import ScheduleRecord, TargetRecord

        COSTS = CostModel({0: OpCost(ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, name="FRAG"),
                           1: OpCost(ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE, name="MMA")})

        class Two:
            name = "two-ops"
            def __init__(self, target):
                self.target = target
            def config(self):
                return self.target.pipeline
            def build_body(self):
                return [op(0, ResourceKind.LDS, 20, OpRole.FRAGMENT_LOAD, channel=0),
                        op(1, ResourceKind.MMA_UNIT, 16, OpRole.COMPUTE)]

        @hookimpl
        def pipeline_core_register_targets():
            return [TargetRecord("tmp-gpu", "temporary target", lambda: TargetProfile(
                COSTS, PipelineConfig(depth=1, num_partitions=1, m_mmas=1, n_mmas=1)))]

        @hookimpl
        def pipeline_core_register_schedules():
            return [ScheduleRecord("two-ops", "two ops", lambda ctx: Two(ctx.make_target()),
                                   default_target="tmp-gpu")]
    """))
    return pkg


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    base = tmp_path_factory.mktemp("envs")
    plugin = write_plugin(base)
    forward = make_env(base / "forward", PLUGINS + [plugin])
    backward = make_env(base / "backward", [plugin] + list(reversed(PLUGINS)))
    return forward, backward


def run(exe: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=300)


def test_a_pip_installed_plugin_is_discovered_and_compiles(envs):
    exe, _ = envs
    listing = run(exe, "plugins")
    assert listing.returncode == 0, listing.stderr
    assert "tmp  (tmp-plugin 1.2.3)  ok" in listing.stdout
    # --allow-unsafe: the throwaway target declares no sync model (docs/guide/checker.md, "Compile proves what it emits")
    result = run(exe, "compile", "two-ops", "--format", "json", "--allow-unsafe")
    assert result.returncode == 0, result.stderr
    assert '"schedule": "two-ops"' in result.stdout
    assert "tmp-plugin 1.2.3" in run(exe, "--version").stdout


@pytest.mark.parametrize("argv", [
    ("compile", "pingpong", "--format", "json"),
    ("compile", "4wave", "--format", "json"),
    ("compile", "default-matmul"),
    ("compile", "hello", "--format", "json", "--allow-unsafe"),
    ("schedules",),
    ("targets", "--json"),
])
def test_install_order_does_not_change_output(envs, argv):
    forward, backward = envs
    a, b = run(forward, *argv), run(backward, *argv)
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
