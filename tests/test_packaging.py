"""The distributions are fit to publish: each sdist and wheel carries its license, its README
as the long description, its py.typed marker and its dependencies by the published names, and
no sdist carries a partial test tree (the suite needs the whole repository)."""
from __future__ import annotations

import email
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: distribution directory -> (import package, the requirements it must declare)
DISTRIBUTIONS = {
    ".": ("pipeline_core", ("attrs", "pluggy", "networkx")),
    "plugins/amd_mi355x": ("pipeline_core_amd_mi355x", ("gpu-pipeline-core~=0.1",)),
    "plugins/schedules_pingpong": ("pipeline_core_schedules_pingpong",
                                   ("gpu-pipeline-core~=0.1", "pipeline-core-amd-mi355x~=0.1")),
    "plugins/schedules_4wave": ("pipeline_core_schedules_4wave",
                                ("gpu-pipeline-core~=0.1", "pipeline-core-amd-mi355x~=0.1")),
    "plugins/schedules_matmul_grid": ("pipeline_core_schedules_matmul_grid",
                                      ("gpu-pipeline-core~=0.1", "pipeline-core-amd-mi355x~=0.1")),
    "plugins/nvidia_h100": ("pipeline_core_nvidia_h100", ("gpu-pipeline-core~=0.1",)),
    "plugins/target_a100": ("pipeline_core_target_a100", ("gpu-pipeline-core~=0.1",)),
    "examples/hello_schedule": ("hello_schedule", ("gpu-pipeline-core~=0.1",)),
}

pytestmark = pytest.mark.slow  # builds 12 distributions once per run (--dist loadfile)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    pytest.importorskip("build")
    out = {}
    for directory in DISTRIBUTIONS:
        dest = tmp_path_factory.mktemp("dist")
        subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dest),
                        str(ROOT / directory)], check=True, capture_output=True, text=True,
                       timeout=600)
        out[directory] = (next(dest.glob("*.tar.gz")), next(dest.glob("*.whl")))
    return out


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name))


@pytest.mark.parametrize("directory", DISTRIBUTIONS)
def test_the_sdist_holds_the_package_license_and_readme_but_no_tests(built, directory):
    sdist, _ = built[directory]
    package, _ = DISTRIBUTIONS[directory]
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", f"{package}/py.typed"} <= names
    assert not [n for n in names if n.startswith("tests")], "an sdist carries a partial test tree"


@pytest.mark.parametrize("directory", DISTRIBUTIONS)
def test_the_wheel_metadata_is_complete(built, directory):
    _, wheel = built[directory]
    package, requirements = DISTRIBUTIONS[directory]
    meta = metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    readme = (ROOT / directory / "README.md").read_text()
    assert meta.get_payload(decode=True).decode("utf-8").strip() == readme.strip()
    declared = [r.split(";")[0].replace(" ", "") for r in meta.get_all("Requires-Dist") or []]
    for requirement in requirements:
        assert any(d.startswith(requirement) for d in declared), (requirement, declared)
    assert not any(d.split("~")[0].split(">")[0] == "pipeline-core" for d in declared)
    with zipfile.ZipFile(wheel) as z:
        assert f"{package}/py.typed" in z.namelist()
        assert any(n.endswith("licenses/LICENSE") for n in z.namelist())
        if package == "pipeline_core":  # the JSON Schemas readers validate against
            from pipeline_core.json_output import SCHEMAS

            assert {f"pipeline_core/schemas/{name}" for name in SCHEMAS.values()} <= set(z.namelist())
