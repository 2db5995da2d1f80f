"""The cp.async producer (``-p load=cp_async``, docs/guide/matmul.md, "The cp.async producer"):
the producer warp group's 128 threads copy K-major tiles 16 bytes at a time into the 128-byte
swizzled stages and each arrives on the stage's full barrier with
``cp.async.mbarrier.arrive.noinc`` once its copies landed; the consumers fence the generic-proxy
copies before their wgmma reads.  The core derives and proves those waits (``Effect.completes``
"arrival", ``StepKind.ASYNC_ARRIVE``, the readers' ``PROXY_FENCE``), the read-back checks the
kernel against the plan, the mutations are refused, and the call picks the variant exactly for
K-major rows off the 128-byte line."""
from __future__ import annotations

import re

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents.prove import prove_plan  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.verdict import HazardKind as H  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402

from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (TensorInfo, Tuning, cp_async_wanted,  # noqa: E402
                                                 plan_call)
from pipeline_core_nvidia_h100.matmul_call import CALL_STAGES, schedule_params  # noqa: E402
from pipeline_core_nvidia_h100.sync_skeleton import SkeletonMismatch, check_skeleton  # noqa: E402
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant  # noqa: E402

CP = dict(tails=True, load="cp_async")
#: label -> the call's variant (and -p overrides): what the cp.async producer combines with
VARIANTS = {
    "bf16": (GemmVariant(**CP), {}),
    "bf16 split-K": (GemmVariant(**CP, split_k=True), {}),
    "fp16 fp32 gelu bias": (GemmVariant(**CP, dtype="fp16", out_dtype="fp32", bias="fp32",
                                        activation="gelu"), {}),
    "bf16 store=tma": (GemmVariant(**CP, store="tma"), {}),
    "e4m3 row-scaled": (GemmVariant(**CP, dtype="e4m3", scale="row"), {}),
    "bf16 128x128 pingpong": (GemmVariant(**CP, pingpong=True), {"BN": "128"}),
    "bf16 128x128": (GemmVariant(**CP), {"BN": "128"}),
}


def _compiled(label: str):
    v, extra = VARIANTS[label]
    return compile_named("warpspecialized-gemm", target="h100",
                         params={**schedule_params(v), **extra},
                         target_args={"stages": str(CALL_STAGES)})


def _prove(c, plan):
    return prove_plan(plan, c.body, c.edges, c.plan.sync, names=c.tag_names)


def _edit(plan, name, steps):
    """``plan`` with agent ``name``'s kernel steps replaced by ``steps(kernel)``."""
    programs = [attrs.evolve(p, kernel=tuple(steps(p.kernel))) if p.name == name else p
                for p in plan.programs]
    return attrs.evolve(plan, programs=programs)


@pytest.mark.parametrize("label", sorted(VARIANTS))
def test_the_variant_is_proven_and_its_kernel_synchronizes_as_the_plan(label):
    c = _compiled(label)
    assert c.proof.safe, c.proof.verdict.violations
    producer = c.plan.programs[0]
    assert producer.role.issuers == 128
    full = c.plan.ring("full")
    # one arrival per producer thread, no bytes announced: no expect_tx anywhere
    assert (full.arrivals, full.tx_bytes) == (128, 0)
    kinds = [s.kind for s in producer.kernel]
    assert StepKind.EXPECT_TX not in kinds
    assert kinds[-1] == StepKind.ASYNC_ARRIVE  # after both operands' copies
    for consumer in c.plan.programs[1:]:
        ks = [s.kind for s in consumer.kernel]
        # the proxy fence right after the full wait, before the wgmma group
        at = ks.index(StepKind.PHASE_WAIT)
        assert ks[at + 1] == StepKind.PROXY_FENCE and ks.index(StepKind.OP) > at + 1
    src = emit_wgmma(c)
    check_skeleton(c, src, label=label)
    assert "if (wtid == 0) {" not in src.split("// pc:role producer")[1].split("// pc:")[0]
    assert src.count("pcgc::cp_async_arrive(full_bar(") == 1
    assert "tma_load" not in src.split("// pc:role producer")[1].split("// pc:role consumers")[0]


def test_tma_operands_keep_the_tma_producer():
    c = compile_named("warpspecialized-gemm", target="h100",
                      params=schedule_params(GemmVariant(tails=True)),
                      target_args={"stages": str(CALL_STAGES)})
    assert c.plan.programs[0].role.issuers == 1
    assert c.plan.ring("full").tx_bytes > 0
    src = emit_wgmma(c)
    assert "cp_async_arrive" not in src and "CpAsyncOperand" not in src


@pytest.mark.parametrize("arrivals", [1, 4, 127, 129])
def test_a_full_barrier_initialised_with_another_count_is_refused(arrivals):
    c = _compiled("bf16")
    rings = [attrs.evolve(r, arrivals=arrivals) if r.name == "full" else r
             for r in c.plan.rings]
    v = _prove(c, attrs.evolve(c.plan, rings=rings))
    assert not v.safe
    assert {x.kind for x in v.violations} & {H.DEADLOCK, H.PHASE_PARITY, H.PHASE_OVERRUN}


def test_a_dropped_async_arrive_is_refused():
    c = _compiled("bf16")
    plan = _edit(c.plan, "producer",
                 lambda k: [s for s in k if s.kind != StepKind.ASYNC_ARRIVE])
    v = _prove(c, plan)
    assert not v.safe and any(x.kind == H.DEADLOCK for x in v.violations)


def test_an_arrive_before_a_copy_does_not_cover_that_copy():
    """The arrival tracks only the copies its thread issued before it: moved between A's and
    B's copies, B's tile may be read before it landed."""
    c = _compiled("bf16")

    def move(k):
        steps = [s for s in k if s.kind != StepKind.ASYNC_ARRIVE]
        arrive = next(s for s in k if s.kind == StepKind.ASYNC_ARRIVE)
        last = max(i for i, s in enumerate(steps) if s.kind == StepKind.OP)
        return [*steps[:last], arrive, *steps[last:]]
    v = _prove(c, _edit(c.plan, "producer", move))
    assert not v.safe
    raw = [x for x in v.violations if x.kind == H.SMEM_RAW]
    assert raw and "CP_B" in str(raw[0].other.op if raw[0].other else raw[0].message)


def test_a_dropped_proxy_fence_is_refused():
    c = _compiled("bf16")
    v = _prove(c, _edit(c.plan, "consumer0",
                        lambda k: [s for s in k if s.kind != StepKind.PROXY_FENCE]))
    assert not v.safe
    raw = [x for x in v.violations if x.kind == H.SMEM_RAW]
    assert raw and "proxy" in raw[0].message


def test_the_read_back_refuses_a_kernel_that_is_not_the_plan():
    c = _compiled("bf16")
    src = emit_wgmma(c)
    head, producer = src.split("// pc:role producer", 1)
    one_thread = head + "// pc:role producer" + producer.replace(
        "{  // every thread of the warp group issues the producer's program",
        "if (wtid == 0) {", 1)
    for bad in (one_thread,  # the plan's 128 arrivals from one thread
                src.replace("pcgc::fence_proxy_async_shared();", "", 1),
                src.replace("pcgc::cp_async_arrive(full_bar(((rb + t) % STAGES)));", "", 1)):
        assert bad != src
        with pytest.raises(SkeletonMismatch):
            check_skeleton(c, bad)


def test_the_schedule_refuses_what_the_cp_async_producer_does_not_load():
    for extra in ({"b_major": "mn"}, {"batch": "a"}, {"cluster": "2"}):
        with pytest.raises(ProgramError, match=r"-p load: cp_async loads K-major"):
            compile_named("warpspecialized-gemm", target="h100",
                          params={"tails": "true", "load": "cp_async", **extra})


# --- the call's choice ------------------------------------------------------------------------

def _ab(m, n, k, lda, ldb, dtype="bf16"):
    return (TensorInfo(shape=(m, k), strides=(lda, 1), dtype=dtype, ptr=4096),
            TensorInfo(shape=(k, n), strides=(1, ldb), dtype=dtype, ptr=4096))


@pytest.mark.parametrize("m, n, k, lda, ldb, load", [
    # (M = 300: copying into aligned rows would cost more than the GEMM, gemm_staging.copy_pays)
    (300, 5000, 3000, 3000, 3000, "cp_async"),    # 6000-byte rows: 16-byte aligned only
    (300, 5000, 3000, 3072, 3072, "tma"),         # padded to the 128-byte line
    (300, 5000, 3000, 3008, 3008, "tma"),         # 6016 bytes: 47 lines
    (300, 5000, 3000, 3072, 3000, "cp_async"),    # one operand off the line moves both
    (4000, 4000, 4000, 4000, 4000, "cp_async"),   # 8000 bytes: 64-byte aligned
    (2048, 5120, 3072, 3072, 3072, "tma"),
    (1000, 1000, 1000, 1000, 1000, "cp_async"),
    (1, 4096, 4096, 4096, 4096, "tma"),
    (1, 4096, 3000, 3000, 3000, "cp_async"),      # B's rows; A's one row has no stride
])
def test_the_call_picks_cp_async_exactly_for_rows_off_the_line(m, n, k, lda, ldb, load):
    """Switched on (Tuning.cp_async; off by default: slower than TMA on the H200)."""
    a, b = _ab(m, n, k, lda, ldb)
    plan = plan_call(a, b, sms=132, tuning=Tuning(cp_async=True))
    assert plan.variant.load == load
    assert plan_call(a, b, sms=132).variant.load == "tma"
    if load == "cp_async":
        assert plan.variant.cluster == 1 and plan.variant.batch == "none"


def test_an_mn_major_operand_stays_on_tma():
    a, _ = _ab(2000, 5000, 3000, 3000, 3000)
    b = TensorInfo(shape=(3000, 5000), strides=(5000, 1), dtype="bf16", ptr=4096)  # N-major
    assert plan_call(a, b, sms=132).variant.load == "tma"
    m = plan_call(a, b, sms=132)
    assert not cp_async_wanted((m.a, m.b), 2)


# --- the machine code -------------------------------------------------------------------------

@pytest.mark.needs_nvcc
@pytest.mark.parametrize("label", ["bf16", "bf16 split-K", "e4m3 row-scaled", "bf16 128x128"])
def test_the_sass_copies_by_cp_async_arrives_fences_and_spills_nothing(label, tmp_path):
    proc, cubin = compile_cubin(emit_wgmma(_compiled(label)), tmp_path, "cp")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr  # ptxas did not ignore setmaxnreg
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert re.search(r"\bLDGSTS\.E\.BYPASS\.128\.ZFILL\b", sass)  # 16-byte, zero-filled
    assert re.search(r"\bARRIVES\.LDGSTSBAR\.64\.ARVCNT\b", sass)  # the .noinc arrival
    assert re.search(r"\bFENCE\.VIEW\.ASYNC\.S\b", sass)          # the consumers' proxy fence
    assert not re.search(r"\bUTMALDG\b", sass)
    assert re.search(r"USETMAXREG\.DEALLOC\.CTAPOOL 0x28\b", sass)  # the producer's 40
    assert not re.search(r"\b(LDL|STL)\b", sass)
