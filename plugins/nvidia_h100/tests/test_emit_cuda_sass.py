"""pipeline-core emit -> nvcc sm_90a -> SASS: derived waits, no spills, HMMA per K tile (needs nvcc)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.sync import WAIT_CP_ASYNC  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import nvcc, sass_command  # noqa: E402

NVCC = nvcc() or "nvcc"  # the needs_nvcc rule (conftest.py) skips or fails without it
pytestmark = pytest.mark.needs_nvcc
VARIANTS = {"first-light": (["-p", "BM=128", "-p", "BN=128", "-p", "BK=32", "-p", "warps_m=2",
                             "-p", "warps_n=2", "-T", "stages=2"], 2),
            "perf-s3": (["-T", "stages=3"], 3), "perf-s4": (["-T", "stages=4"], 4)}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_emitted_kernel_compiles_without_spills_and_keeps_derived_waits(variant, tmp_path, pipeline_cli):
    args, stages = VARIANTS[variant]
    out = tmp_path / "k.cu"
    res = pipeline_cli(["emit", "multistage-gemm", "--target", "h100", *args, "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    src = out.read_text()
    comp = pipeline_cli(["compile", "multistage-gemm", "--target", "h100", *args, "--format", "json"])
    doc = json.loads(comp.stdout)
    waits = {e["op"]["wait_value"] for ph in ("prologue", "kernel", "epilogue") for e in doc[ph]
             if e["op"]["tag"] == WAIT_CP_ASYNC}
    assert waits == set(range(stages - 1))
    proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas=-v",
                           "-o", str(tmp_path / "k.cubin"), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    ptx = subprocess.run([NVCC, "-ptx", "-arch=sm_90a", "-o", "-", str(out)], capture_output=True,
                         text=True, check=True).stdout
    for needle in ("cp.async.wait_group", "ldmatrix", "mma.sync"):
        assert needle in ptx
    for n in waits:
        assert f"cp_async_wait_group<{n}>" in src
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    sass = subprocess.run([*tool, str(tmp_path / "k.cubin")], capture_output=True,
                          text=True, check=True).stdout
    for n in waits:
        assert re.search(rf"DEPBAR\.LE SB0, 0x{n:x}\b", sass), n
    assert not re.search(r"\b(LDL|STL)\b", sass)
    # every MMA entry of the kernel and epilogue is one warp tile of m16n8k16 mma.sync: the
    # machine code holds exactly that many HMMA (the prologue issues none)
    params = doc["params"]
    per_entry = (params["BM"] // params["warps_m"] // 16) * (params["BN"] // params["warps_n"] // 8)
    entries = sum(e["op"]["role_name"] == "COMPUTE" for ph in ("prologue", "kernel", "epilogue")
                  for e in doc[ph])
    assert len(re.findall(r"\bHMMA\.16816\.F32\.BF16\b", sass)) == entries * per_entry
