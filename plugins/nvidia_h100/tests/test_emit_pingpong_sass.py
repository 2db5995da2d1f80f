"""pipeline-core emit pingpong -> nvcc sm_90a -> SASS: no spills, the non-aligned barrier, the
derived waits, one HMMA block per MMA entry (needs nvcc; the SASS part needs nvdisasm/cuobjdump).

What differs in SASS between ``barrier.sync 0`` and ``bar.sync 0`` (nvcc 13.0, checked on tiny
kernels): where ptxas sees a converged warp both become ``BAR.SYNC.DEFER_BLOCKING 0x0``; where it
cannot (the stagger's ``if (wg == ...)`` barriers) the non-aligned form gets a
``WARPSYNC.COLLECTIVE.ALL`` ... ``BAR.SYNC.DEFER_BLOCKING Rn, Rn`` ... ``ENDCOLLECTIVE`` path for a
diverged warp, while the aligned form becomes a bare predicated ``@P BAR.SYNC`` with no such path.
"""
from __future__ import annotations

import json
import re
import subprocess

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.emit_pingpong import geometry_from_options  # noqa: E402
from pipeline_core_nvidia_h100.pingpong import PingPongTag  # noqa: E402
from pipeline_core_nvidia_h100.sync import BARRIER_SYNC_NONALIGNED, WAIT_CP_ASYNC  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import GENCODE, nvcc, sass_command  # noqa: E402

NVCC = nvcc() or "nvcc"  # the needs_nvcc rule (conftest.py) skips or fails without it
pytestmark = pytest.mark.needs_nvcc
PHASES = ("prologue", "kernel", "epilogue")
TILES = {"128x128x64": {}, "128x128x32": {"BK": 32}}  # typed, as the core passes -O
COLLECTIVE = "WARPSYNC.COLLECTIVE"


def _build(src: str, tmp_path, name: str):
    cu, cubin = tmp_path / f"{name}.cu", tmp_path / f"{name}.cubin"
    cu.write_text(src)
    proc = subprocess.run([NVCC, "-cubin", GENCODE, "-Xptxas=-v", "-o", str(cubin), str(cu)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return cu, cubin, proc.stderr


def _sass(cubin):
    tool = sass_command()
    if tool is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    return subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("tile", sorted(TILES))
def test_emitted_pingpong_compiles_without_spills_with_its_waits_and_barriers(tile, tmp_path,
                                                                              pipeline_cli):
    opts = [a for k, v in TILES[tile].items() for a in ("-O", f"{k}={v}")]
    res = pipeline_cli(["emit", "pingpong", "--target", "h100-pingpong", *opts])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(pipeline_cli(["compile", "pingpong", "--target", "h100-pingpong",
                                   "--format", "json"]).stdout)
    cu, cubin, ptxas = _build(res.stdout, tmp_path, "pp")
    assert "0 bytes spill stores, 0 bytes spill loads" in ptxas
    regs = int(re.search(r"Used (\d+) registers", ptxas).group(1))
    assert regs <= 255
    ptx = subprocess.run([NVCC, "-ptx", "-arch=sm_90a", "-o", "-", str(cu)], capture_output=True,
                         text=True, check=True).stdout
    barriers = sum(e["op"]["tag"] == BARRIER_SYNC_NONALIGNED for ph in PHASES for e in doc[ph])
    assert len(re.findall(r"\bbarrier\.sync 0;", ptx)) == barriers + 3  # + the stagger's three
    assert not re.search(r"\bbar\.sync\b", ptx)
    sass = _sass(cubin)
    assert not re.search(r"\b(LDL|STL)\b", sass)
    waits = [e["op"]["wait_value"] for ph in PHASES for e in doc[ph]
             if e["op"]["tag"] == WAIT_CP_ASYNC]
    depbar = [int(v, 16) for v in re.findall(r"DEPBAR\.LE SB0, (0x[0-9a-f]+)", sass)]
    assert set(depbar) == set(waits)
    assert depbar.count(3) == waits.count(3) == 2  # the kernel's two derived waits, as emitted
    # the non-aligned barrier: a collective path at the stagger's conditional barriers
    assert sass.count(COLLECTIVE) >= 2
    assert re.search(r"BAR\.SYNC\.DEFER_BLOCKING R\d+, R\d+", sass)
    g = geometry_from_options(TILES[tile])
    mmas = sum(e["op"]["tag"] == PingPongTag.MMA for ph in PHASES for e in doc[ph])
    assert len(re.findall(r"\bHMMA\.16816\.F32\.BF16\b", sass)) == mmas * g.mma_per_entry
    mi, ni = g.mma_tiles
    frags = {t: sum(e["op"]["tag"] == t for ph in PHASES for e in doc[ph])
             for t in (PingPongTag.MMA_LOAD_A, PingPongTag.MMA_LOAD_B)}
    ldsm = frags[PingPongTag.MMA_LOAD_A] * g.k_steps * mi + frags[PingPongTag.MMA_LOAD_B] * g.k_steps * (ni // 2)
    assert len(re.findall(r"\bLDSM\.16\.M88\.4\b", sass)) == ldsm


def test_the_aligned_form_of_the_same_kernel_has_no_collective_barrier_path(tmp_path, pipeline_cli):
    """Why the SASS test above tells the two forms apart (the same source with bar.sync)."""
    src = pipeline_cli(["emit", "pingpong", "--target", "h100-pingpong"]).stdout
    entries = src.split("// ---- the compiled entries")
    aligned = entries[0] + "// ---- the compiled entries" + entries[1].replace(
        "barrier_sync<0>();", "bar_sync_aligned<0>();")
    _, cubin, _ = _build(aligned, tmp_path, "aligned")
    sass = _sass(cubin)
    assert COLLECTIVE not in sass
    assert re.search(r"@!?P\d BAR\.SYNC\.DEFER_BLOCKING 0x0", sass)
