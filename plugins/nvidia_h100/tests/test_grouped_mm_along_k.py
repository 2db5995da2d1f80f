"""grouped_mm's 2-D x 2-D without a GPU (groups along K, the MoE weight gradient; docs/guide/
matmul.md, "Groups along K"): the plan (shapes, maps, refusals), the schedule proven with its
descriptor acquire and its uneven trip counts, the acquire's removal refused by the proof and by
the sync read-back, the kernel and its pre-pass built without spills.  The GPU half is
benchmarks/grouped_mm_call.py."""
from __future__ import annotations

import math
import shutil

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents.prove import prove_plan  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.verdict import HazardKind  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402
from pipeline_core_nvidia_h100.cuda import group_maps_source  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (MatmulArgumentError,  # noqa: E402
                                                 MatmulTypeError, TensorInfo)
from pipeline_core_nvidia_h100.gemm_grouped import plan_grouped  # noqa: E402
from pipeline_core_nvidia_h100.gemm_tiles import GroupKTrips  # noqa: E402
from pipeline_core_nvidia_h100.group_maps import SIGNATURE, k_field  # noqa: E402
from pipeline_core_nvidia_h100.matmul_call import CALL_STAGES, schedule_params  # noqa: E402
from pipeline_core_nvidia_h100.sync_skeleton import SkeletonMismatch, check_skeleton  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import MAX_GROUPS, GemmVariant  # noqa: E402

NVCC = shutil.which("nvcc")


def t(shape, strides=None, dtype="bf16", device="cuda:0"):
    dense = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return TensorInfo(shape=tuple(shape), strides=tuple(strides or dense), dtype=dtype,
                      ptr=4096, device=device)


def offs(g, dtype="int32"):
    return t((g,), dtype=dtype)


# --- the plan ------------------------------------------------------------------------------------

def test_the_weight_gradient_is_one_launch_of_every_groups_tiles():
    # dW = X^T dY over 8 experts of 16k tokens: a = X^T (M contiguous), b = dY (N contiguous)
    x, dy = (16384, 4096), (16384, 14336)
    p = plan_grouped(t((4096, 16384), (1, 4096)), t(dy), offs(8), sms=132)
    assert p.variant == GemmVariant(tails=True, batch="grouped_k", a_major="mn", b_major="mn")
    assert (p.m, p.n, p.k, p.groups, p.out_shape) == (4096, 14336, 16384, 8, (8, 4096, 14336))
    assert (p.ldc, p.c_batch, p.grid) == (14336, 4096 * 14336, 132)
    # the maps are the templates of the whole operands: the pre-pass moves them per group
    assert (p.a.major, p.a.inner, p.a.outer, p.a.stride) == ("mn", 4096, 16384, x[1])
    assert k_field(p.a, "bf16") == (1, 4096 * 2) and k_field(p.b, "bf16") == (1, 14336 * 2)
    # K-major operands: the K step is one element, K the map's inner dimension
    q = plan_grouped(t((300, 1000)), t((1000, 200), (1, 1000)), offs(3))
    assert (q.variant.a_major, q.variant.b_major) == ("k", "k")
    assert k_field(q.a, "bf16") == (0, 2) and q.grid == 3 * 3 * 1  # no sms: a CTA per tile


def test_the_output_is_g_by_m_by_n_with_rows_padded_as_torch_pads_them():
    p = plan_grouped(t((100, 64)), t((64, 70), (72, 1)), offs(5), out_dtype="fp32")
    assert (p.out_shape, p.ldc, p.c_batch, p.variant.out_dtype) == ((5, 100, 70), 72, 7200,
                                                                     "fp32")


def test_groups_along_k_keep_no_table_so_their_count_is_not_capped():
    p = plan_grouped(t((64, 256)), t((256, 64)), offs(MAX_GROUPS + 1))
    assert p.groups == MAX_GROUPS + 1


def test_an_empty_product_plans_no_read():
    p = plan_grouped(t((0, 64)), t((64, 70), (72, 1)), offs(4))
    assert p.out_shape == (4, 0, 70) and p.grid == 0


REFUSALS = {
    "K mismatch": (dict(b=t((80, 72))), MatmulArgumentError, "b", "b.shape[0] must be a's K=64"),
    "offs int64": (dict(offs=offs(4, "int64")), MatmulTypeError, "offs", "offs.to(torch.int32)"),
    "offs 2-D": (dict(offs=t((4, 1), dtype="int32")), MatmulArgumentError, "offs", "1-D [G]"),
    "offs strided": (dict(offs=t((4,), (2,), dtype="int32")), MatmulArgumentError, "offs",
                     "offs.contiguous()"),
    "no offs": (dict(offs=None), MatmulArgumentError, "offs", "pass offs"),
    "bias": (dict(bias=t((72,))), MatmulArgumentError, "bias", "add it to the result"),
    "b unaligned rows": (dict(b=t((64, 72), (73, 1))), MatmulArgumentError, "b",
                         "16-byte aligned, as torch._grouped_mm"),
    "scaled": (dict(a=t((100, 64), dtype="e4m3"), b=t((64, 72), (1, 64), dtype="e4m3"),
                    scales=(t((100,), dtype="fp32"), t((72,), dtype="fp32"))),
               MatmulArgumentError, "b", "torch._scaled_grouped_mm"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_bad_argument_is_one_line_naming_it(case):
    change, kind, name, fix = REFUSALS[case]
    args = {"a": t((100, 64)), "b": t((64, 72)), "offs": offs(4), **change}
    with pytest.raises(kind) as info:
        plan_grouped(args.pop("a"), args.pop("b"), args.pop("offs"), **args)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{name}: "), text
    assert fix in text, text


def test_the_trip_rule_counts_each_groups_own_k_tiles():
    rule = GroupKTrips(block_m=128, block_n=256, block_k=64)
    assert not rule.uniform
    # 2 x 1 output tiles per group; groups of 130, 0, 8 and 64 K: 3, 0, 1, 1 K tiles each
    assert rule.trip_counts((200, 256, (130, 0, 8, 64))) == (3, 3, 0, 0, 1, 1, 1, 1)
    sample = rule.sample(8)
    assert sample is not None and sample.trips == (8, 4, 0, 1) and sample.full == 8


# --- the schedule: proven, the acquire where the proof wants it ---------------------------------

VARIANTS = {"k k": GemmVariant(tails=True, batch="grouped_k"),
            "mn mn": GemmVariant(tails=True, batch="grouped_k", a_major="mn", b_major="mn"),
            "fp16 k mn fp32 out": GemmVariant(dtype="fp16", tails=True, batch="grouped_k",
                                              b_major="mn", out_dtype="fp32")}


def _compiled(label):
    return compile_named("warpspecialized-gemm", target="h100",
                         params=schedule_params(VARIANTS[label]),
                         target_args={"stages": str(CALL_STAGES)})


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_each_variant_is_proven_safe_by_check(label):
    params = [x for k, v in schedule_params(VARIANTS[label]).items() for x in ("-p", f"{k}={v}")]
    res = run_cli(["check", "warpspecialized-gemm", "--target", "h100", "-T",
                   f"stages={CALL_STAGES}", *params])
    assert res.exit_code == 0, res.stderr
    assert "warpspecialized-gemm: SAFE" in res.stdout


def test_the_producer_acquires_the_groups_maps_once_per_tile_before_its_copies():
    c = _compiled("mn mn")
    assert isinstance(c.plan.trip_rule, GroupKTrips)  # uneven and empty tiles are proven too
    producer = c.plan.programs[0]
    first = [s.kind for s in producer.prologue[0]]
    assert first[0] == StepKind.DESCRIPTOR_ACQUIRE and producer.prologue[0][0].once
    assert StepKind.DESCRIPTOR_ACQUIRE not in [s.kind for s in producer.kernel]
    for consumer in c.plan.programs[1:]:
        assert StepKind.DESCRIPTOR_ACQUIRE not in [s.kind for p in consumer.prologue for s in p]


def _without_acquire(plan):
    def drop(steps):
        return tuple(s for s in steps if s.kind != StepKind.DESCRIPTOR_ACQUIRE)
    programs = [attrs.evolve(p, prologue=tuple(drop(i) for i in p.prologue), kernel=drop(p.kernel))
                for p in plan.programs]
    return attrs.evolve(plan, programs=programs)


def test_a_copy_through_the_groups_maps_without_the_acquire_is_refused():
    c = _compiled("k k")
    verdict = prove_plan(_without_acquire(c.plan), c.body, c.edges, c.plan.sync,
                         names=c.tag_names)
    assert not verdict.safe
    found = [v for v in verdict.violations if "stale map" in v.message]
    assert found and all(v.kind == HazardKind.SMEM_RAW for v in found)
    assert "descriptor acquire of producer's" in found[0].message


def test_an_acquire_after_the_copies_is_refused():
    c = _compiled("k k")
    producer = c.plan.programs[0]
    first = producer.prologue[0]
    late = (*first[1:], first[0])  # the acquire after the tile's first copies
    moved = attrs.evolve(producer, prologue=(late, *producer.prologue[1:]))
    plan = attrs.evolve(c.plan, programs=(moved, *c.plan.programs[1:]))
    verdict = prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)
    assert any("stale map" in v.message for v in verdict.violations)


def test_the_kernel_reads_each_group_through_its_own_maps_and_synchronizes_as_the_plan():
    c = _compiled("mn mn")
    src = emit_wgmma(c)
    kernel = src[src.index('extern "C"'):]
    assert ("const int* __restrict__ offs, int groups, const pcwg::TensorMap* __restrict__ maps, "
            "int k, long long c_batch) {") in kernel
    assert kernel.count("pcgk::tile_of(tile, offs, k, M / BM, N / BN, GROUP_M, BK, group, tile_m, "
                        "tile_n, KT);") == 2  # producer and consumers alike
    assert kernel.count("rb += KT) {") == 2 and kernel.count("if (KT == 0) {") == 2
    assert "LoadA::load(stage_a(((rb + t) % STAGES)), maps + 2 * group, " in kernel
    assert "LoadB::load(stage_b(((rb + t) % STAGES)), maps + 2 * group + 1, " in kernel
    assert kernel.count("pcgk::acquire_maps(maps + 2 * group);") == 1
    assert "static_cast<char*>(C) + (size_t)group * c_batch" in kernel
    for text in ("&tmA, full_bar", "blockIdx.z", "group_table"):
        assert text not in kernel, text
    check_skeleton(c, src)  # the read-back: every sync statement is the plan's
    with pytest.raises(SkeletonMismatch):
        check_skeleton(c, src.replace("pcgk::acquire_maps(maps + 2 * group);", ""))


def test_the_prepass_signature_matches_its_kernel():
    text = group_maps_source()
    params = text[text.index("pc_ws_group_maps("):text.index(") {", text.index("pc_ws_group_maps("))]
    names = [p.strip().split()[-1] for p in params[len("pc_ws_group_maps("):].split(",")]
    assert names == [p.name for p in SIGNATURE.params]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_kernels_build_without_spills(label, tmp_path):
    proc, _ = compile_cubin(emit_wgmma(_compiled(label)), tmp_path, "group_k")
    report = proc.stderr if proc.returncode == 0 else pytest.fail(proc.stderr)
    assert "0 bytes spill stores, 0 bytes spill loads" in report and "C7520" not in report


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_the_prepass_builds(tmp_path):
    proc, _ = compile_cubin(group_maps_source(), tmp_path, "group_maps")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores" in proc.stderr


# --- the GPU benchmark's along-K cases, drawn and planned here -----------------------------------

def test_the_benchmark_draws_its_along_k_cases_and_plans_every_one(monkeypatch):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "grouped_mm_call.py"
    monkeypatch.syspath_prepend(str(path.parent))  # its neighbours, as when run as a script
    spec = importlib.util.spec_from_file_location("grouped_mm_call", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = bench.draw_k_cases(24)
    assert cases == bench.draw_k_cases(24)  # a fixed seed
    sizes = [s for c in cases for s in c[1]]
    # empty groups, groups under a K tile, every offset a multiple of 8 elements (torch's rule)
    assert 0 in sizes and any(0 < s < 64 for s in sizes) and all(s % 8 == 0 for s in sizes)
    assert any(all(s == 0 for s in c[1]) for c in cases)
    plans = [bench.k_plan_without_torch(c) for c in cases]  # every case passes the checks
    assert all(p.variant.batch == "grouped_k" and p.out_shape == (c[0], c[2], c[3])
               for p, c in zip(plans, cases))
    counts = bench.k_timing_counts()
    assert sum(counts) == 16384 and len(counts) == 8 and all(c % 8 == 0 for c in counts)
    timed = bench.k_timing_plan()
    assert (timed.variant.a_major, timed.variant.b_major, timed.out_shape) == (
        "mn", "mn", (8, 4096, 14336))
    kernels = bench.dry_run([], [], cases)
    assert {v.batch for v, _ in kernels} >= {"grouped_k"}
