"""The kit's tuner is family-neutral (issue 34): a second family, gemv, lists its candidates
(tile height and ring depth), the kit ranks them on the agents timing model through the
schedule's own trip rule, and caches the winner in the gemv's own file under its own key; a
change to the family, the kit or a device header changes the family's source hash, and only
that family's.  The tuner is built here, in the test: the gemv call itself is not tuned (its
package stays small), and nothing runs on a GPU (a fake timer stands in for CUDA events)."""
from __future__ import annotations

import functools
import io
import json
import shutil
from pathlib import Path

import attrs
import pytest

from pipeline_core.plugin_api import PipelineError, PluginHost, ProgramError, compile_named

from pipeline_core_nvidia_h100 import autotune as gemm_autotune
from pipeline_core_nvidia_h100 import kernel_cache
from pipeline_core_nvidia_h100.kit import autotune as kit_autotune
from pipeline_core_nvidia_h100.kit_api import (PLUGIN_MODULE, Autotuner, TimingModel, Workload,
                                               timing_model)

import pipeline_core_family_gemv
from pipeline_core_family_gemv.schedule import NAME, GemvGeometry

HOST = PluginHost(extra_modules=[PLUGIN_MODULE, "pipeline_core_family_gemv"])
PACKAGE = Path(pipeline_core_family_gemv.__file__).parent
SEARCHED = {"block_m": (32, 64, 128), "stages": (3, 4, 5)}


@attrs.frozen(kw_only=True)
class GemvCandidate:
    block_m: int = 64
    stages: int = 5

    def params(self) -> dict[str, str]:
        return {"block_m": str(self.block_m)}


@attrs.frozen(kw_only=True)
class GemvProblem:
    m: int
    k: int
    sms: int = 132


def candidates(p: GemvProblem) -> list[GemvCandidate]:
    """Every tile height and ring depth whose geometry fits (128 rows take 3 stages only)."""
    found = []
    for block_m in SEARCHED["block_m"]:
        for stages in SEARCHED["stages"]:
            try:
                GemvGeometry(block_m=block_m, stages=stages).validate()
            except ProgramError:
                continue
            found.append(GemvCandidate(block_m=block_m, stages=stages))
    return found


@functools.lru_cache(maxsize=None)
def model(c: GemvCandidate) -> TimingModel | None:
    try:
        compiled = compile_named(NAME, target="h100", host=HOST, params=c.params(),
                                 target_args={"stages": str(c.stages)})
    except PipelineError:
        return None
    return timing_model(compiled)


def workload(c: GemvCandidate, p: GemvProblem) -> Workload | None:
    """The schedule's own trip rule says each output tile's K tiles."""
    m = model(c)
    if m is None:
        return None
    rule = m.compiled.plan.trip_rule
    assert rule is not None
    return Workload(model=m, trips=rule.trip_counts((p.m, p.k)), ctas=p.sms)


def _pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


TUNER: Autotuner[GemvCandidate, GemvProblem] = Autotuner(
    name=NAME, call="gemv", sources=(PACKAGE,), make=GemvCandidate, searched=SEARCHED,
    candidates=candidates, workload=workload, default=GemvCandidate(),
    problem_key=lambda p: (f"{_pow2(p.m)}x{_pow2(p.k)}",),
    describe=lambda p: f"gemv {p.m}x{p.k}")


class FakeTimer:
    def __init__(self, table: dict[GemvCandidate, float] | None = None) -> None:
        self.table, self.timed = table or {}, []

    def __call__(self, c: GemvCandidate) -> float:
        self.timed.append(c)
        return self.table.get(c, 1.0)


def test_the_kit_ranks_the_gemv_candidates_on_the_timing_model():
    p = GemvProblem(m=4096, k=8192)
    ranked = TUNER.rank(p)
    assert ranked == TUNER.rank(p)  # deterministic
    assert [s for s, _ in ranked] == sorted(s for s, _ in ranked)
    assert sorted(attrs.astuple(c) for _, c in ranked) == [
        (32, 3), (32, 4), (32, 5), (64, 3), (64, 4), (64, 5), (128, 3)]  # 128 x 4, 5: no room
    # 4096 rows are one wave at any height: the shortest tile and the deepest ring win
    assert ranked[0][1] == GemvCandidate(block_m=32, stages=5)
    # 131072 rows: 128-row tiles take 8 waves where 32-row ones take 32, and win
    assert TUNER.rank(GemvProblem(m=131072, k=4096))[0][1].block_m == 128


def test_a_workload_is_its_busiest_ctas_output_tiles():
    m = model(GemvCandidate())
    assert m is not None
    uniform = Workload(model=m, trips=(8,) * 300, ctas=132)
    assert uniform.cycles() == 3 * m.cycles(8)  # 300 tiles on 132 CTAs: 3 waves
    # tiles of different counts, dealt round robin: CTA 0 runs 4 and 8, CTA 1 runs 0 and 4
    mixed = Workload(model=m, trips=(4, 0, 8, 4), ctas=2)
    assert mixed.cycles() == m.cycles(4) + m.cycles(8)
    # past the exactly modelled K tiles the steady state's slope carries on
    assert m.cycles(100) - m.cycles(90) == pytest.approx(10 * (m.cycles(32) - m.cycles(31)),
                                                         rel=0.05)


def test_a_gemv_winner_is_cached_under_its_own_key_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.ENV, str(tmp_path))
    path = TUNER.cache_path()
    assert path == tmp_path / "autotune-gemv.json" != gemm_autotune.TUNER.cache_path()
    p = GemvProblem(m=4000, k=8000)
    best3 = [c for _, c in TUNER.rank(p)[:3]]
    timer, err = FakeTimer({best3[1]: 0.5}), io.StringIO()
    won = TUNER.tune(p, device="NVIDIA H100", toolkit="cuda_12.4", timer=timer, err=err)
    assert timer.timed == best3 and won == best3[1]
    (line,) = err.getvalue().splitlines()
    assert line.startswith("pipeline-core gemv: tuning gemv 4000x8000 on NVIDIA H100: timing "
                           "the model's best 3 of 7 variants once")
    data = json.loads(path.read_text())
    assert data["family"] == "gemv"
    (key,) = data["tunings"]
    assert key.split("|") == ["gemv", "NVIDIA H100", "4096x8192", "cuda_12.4",
                              TUNER.source_hash()]
    assert data["tunings"][key]["winner"] == attrs.asdict(won)
    # warm: the bucket's winner, nothing timed, nothing said
    again, quiet = FakeTimer(), io.StringIO()
    assert TUNER.tune(GemvProblem(m=4096, k=8192), device="NVIDIA H100", toolkit="cuda_12.4",
                      timer=again, err=quiet) == won
    assert again.timed == [] and quiet.getvalue() == ""
    # the GEMM's file is another family's: one warning line, never a gemv winner
    gemm = gemm_autotune.TUNER
    gemm.store(path, gemm_autotune.tune_key("d", gemm_autotune.GemmVariant(), 1, 1, 1, "t"),
               gemm_autotune.DEFAULT)
    warned = io.StringIO()
    assert TUNER.load(path, warned) == {}
    assert "is malformed (ValueError: family 'gemm-wgmma', not 'gemv')" in warned.getvalue()


def test_a_stored_winner_outside_the_gemv_search_is_not_trusted(tmp_path):
    path = tmp_path / "autotune-gemv.json"
    for winner in ({"block_m": 48, "stages": 3}, {"block_m": 64.0, "stages": 3},
                   {"block_m": 64}):
        path.write_text(json.dumps({"format": 2, "family": "gemv",
                                    "tunings": {"k": {"winner": winner}}}))
        err = io.StringIO()
        assert TUNER.load(path, err) == {}
        (line,) = err.getvalue().splitlines()
        assert line.startswith(f"pipeline-core gemv: warning: tuning cache {path} is malformed")


def _copy(tmp_path: Path) -> tuple[Autotuner[GemvCandidate, GemvProblem], Path]:
    here = Path(gemm_autotune.__file__).parent
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PACKAGE, tmp_path / "gemv", ignore=skip)
    shutil.copytree(here / "kit", tmp_path / "kit", ignore=skip)
    shutil.copytree(here / "cuda", tmp_path / "cuda", ignore=skip)
    for name in gemm_autotune.SOURCES:
        shutil.copy(here / name, tmp_path / name)
    return attrs.evolve(TUNER, sources=(tmp_path / "gemv",), kit=tmp_path / "kit",
                        headers=tmp_path / "cuda"), tmp_path


@pytest.mark.parametrize("changed", ["gemv/schedule.py", "gemv/gemv.cuh", "kit/frame.py",
                                     "kit/autotune.py", "cuda/pipeline_h100.cuh"])
def test_a_change_to_the_family_the_kit_or_a_header_changes_the_familys_hash(tmp_path,
                                                                              changed):
    copy, root = _copy(tmp_path)
    assert copy.source_hash() == TUNER.source_hash()  # names relative to their folders
    gemm_before = gemm_autotune.source_hash(root)
    (root / changed).write_text((root / changed).read_text() + "// changed\n")
    kit_autotune.source_hash.cache_clear()
    assert copy.source_hash() != TUNER.source_hash()
    # a gemv file is not the GEMM's: its tunings stay; the kit and headers are everyone's
    assert (gemm_autotune.source_hash(root) == gemm_before) == changed.startswith("gemv/")
