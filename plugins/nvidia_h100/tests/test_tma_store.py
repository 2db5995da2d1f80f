"""The TMA-store epilogue (docs/guide/matmul.md, "The TMA-store epilogue"; docs/guide/agents.md,
"Bulk stores"): ``warpspecialized-gemm -p store=tma`` declares a bulk store, the agents lowering
derives each consumer's staging steps (store wait, sync, staging writes, proxy fence, sync,
store, commit) and its drain, the checker proves them over the staging buffers' reuse and
refuses each edit of them, the cuda-wgmma emitter writes exactly those steps, nvcc builds the
kernel without spills with the TMA store and the bulk waits in its SASS, and the call plans
C's tensor map."""
from __future__ import annotations

import re

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations, mutate_compiled  # noqa: E402
from pipeline_core.check.verdict import HazardKind  # noqa: E402
from pipeline_core.errors import ProgramError  # noqa: E402
from pipeline_core.plan import StepKind  # noqa: E402
from pipeline_core.plugins import default_host  # noqa: E402
from pipeline_core.proof import UnsafeScheduleError  # noqa: E402
from pipeline_core.testing import run_cli  # noqa: E402

from pipeline_core_nvidia_h100.cuda import gemm_wgmma_header_source  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import (TensorInfo, TileShape, Tuning,  # noqa: E402
                                                 plan_call)
from pipeline_core_nvidia_h100.toolchain import compile_cubin, sass_of  # noqa: E402

MUTATIONS = ("drop_store_wait", "loosen_store_wait", "drop_proxy_fence", "store_before_sync",
             "drop_store_drain")
#: label -> -p parameters and ring depth: 1, 2 and 3 consumers, tails, fp32 out with an epilogue
SHAPES = {"1c": ({"consumers": "1", "BM": "64"}, 4),
          "2c": ({}, 4),
          "3c": ({"consumers": "3", "BM": "192", "BN": "128", "consumer_registers": "152"}, 3),
          "2c tails": ({"tails": "true", "b_major": "mn"}, 4),
          "2c fp32 gelu": ({"out_dtype": "fp32", "bias": "bf16", "activation": "gelu",
                            "tails": "true"}, 4),
          # the bias read before the sub-tiles (WsGeometry.bias_early)
          "2c bias gelu": ({"bias": "bf16", "activation": "gelu", "tails": "true"}, 4)}


def _tma(params: dict[str, str], stages: int = 4):
    return compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                         params={"store": "tma", **params},
                         target_args={"stages": str(stages)})


@pytest.mark.parametrize("label", sorted(SHAPES))
def test_every_store_variant_is_proven_with_its_staging_modelled(label):
    params, stages = SHAPES[label]
    c = _tma(params, stages)
    assert c.proof.verdict.safe, c.proof.verdict.violations
    consumers = [p for p in c.plan.programs if p.name.startswith("consumer")]
    st = c.plan.store
    assert st is not None and st.agents == tuple(p.name for p in consumers)
    assert len(set(st.barriers)) == len(consumers) and 0 not in st.barriers
    for p, bar in zip(consumers, st.barriers):
        assert [s.kind for s in p.store] == [
            StepKind.STORE_WAIT, StepKind.NAMED_SYNC, StepKind.STAGE_WRITE, StepKind.PROXY_FENCE,
            StepKind.NAMED_SYNC, StepKind.STORE_ISSUE, StepKind.STORE_COMMIT]
        # the deepest wait the buffers allow: the store `buffers` sub-tiles back is done reading
        assert p.store[0].value == st.buffers - 1
        assert {s.barrier for s in p.store if s.kind == StepKind.NAMED_SYNC} == {bar}
        assert [(s.kind, s.value) for s in p.drain] == [(StepKind.STORE_DRAIN, 0)]
    assert any("bulk store 'store' of agents" in a for a in c.proof.verdict.model["assumptions"])
    # the direct store declares none
    plain = compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                          params={"tails": "true"})
    assert plain.plan.store is None and all(p.store == () == p.drain
                                            for p in plain.plan.programs)


EXPECTED = {"drop_store_wait": HazardKind.SMEM_WAR, "loosen_store_wait": HazardKind.SMEM_WAR,
            "drop_proxy_fence": HazardKind.SMEM_RAW, "store_before_sync": HazardKind.SMEM_RAW,
            "drop_store_drain": HazardKind.SMEM_WAR}


@pytest.mark.parametrize("label", ["1c", "2c", "2c tails"])
def test_every_edit_of_the_store_is_refused(label):
    params, stages = SHAPES[label]
    c = _tma(params, stages)
    picked = {}
    for m in agent_mutations(c.plan, MUTATIONS):
        picked.setdefault(m.category, m)
    assert set(picked) == set(MUTATIONS)
    for cat, m in picked.items():
        with pytest.raises(UnsafeScheduleError, match=EXPECTED[cat].value):
            mutate_compiled(c, m)
        verdict = mutate_compiled(c, m, allow_unsafe=True).proof.verdict
        assert EXPECTED[cat] in {v.kind for v in verdict.violations}, cat
        assert all(v.site.phase in ("store", "drain") for v in verdict.violations)


def test_the_findings_say_what_the_store_may_read_or_overwrite():
    c = _tma({})
    msgs = {}
    for m in agent_mutations(c.plan, MUTATIONS):
        if m.agent == "consumer0":
            v = mutate_compiled(c, m, allow_unsafe=True).proof.verdict.violations[0]
            msgs[m.category] = v.message
    assert "while the store of sub-tile 0 still reads it" in msgs["drop_store_wait"]
    assert "without the other threads' generic-proxy writes" in msgs["drop_proxy_fence"]
    assert "no sync of named barrier" in msgs["store_before_sync"]
    assert "end with bulk stores in flight" in msgs["drop_store_drain"]


def test_an_unsafe_store_verdict_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from pipeline_core.json_output import load_schema

    schema = load_schema("verdict")
    sub = {**schema["$defs"]["violation"], "$defs": schema["$defs"]}
    c = _tma({})
    for m in agent_mutations(c.plan, MUTATIONS):
        for v in mutate_compiled(c, m, allow_unsafe=True).proof.verdict.violations:
            jsonschema.validate(v.to_dict(), sub)


@pytest.mark.parametrize("params, says", [
    ({"split_k": "true"}, "-p store: tma with -p split_k=true"),
    ({"BN": "48", "BM": "64", "consumers": "1"}, "-p store: tma stores sub-tiles"),
    ({"BN": "160", "BM": "128"}, "-p store: tma stores sub-tiles"),
])
def test_a_store_the_kernel_cannot_take_is_one_line(params, says):
    args = ["compile", "warpspecialized-gemm", "-p", "store=tma"]
    for k, v in params.items():
        args += ["-p", f"{k}={v}"]
    res = run_cli(args)
    assert res.exit_code == 2
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_the_text_view_lists_the_store_steps_as_their_instructions():
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "store=tma"])
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "STORE\n  store: consumer0, consumer1 store their results through 2 staging" in out
    store = out[out.index("STORE (once per staged sub-tile"):]
    assert store.index("cp.async.bulk.wait_group.read 1") < store.index("st.shared") \
        < store.index("fence.proxy.async.shared::cta") \
        < store.index("cp.async.bulk.tensor.2d.global.shared::cta") \
        < store.index("cp.async.bulk.commit_group") < store.index("cp.async.bulk.wait_group 0")
    assert "STORE" not in run_cli(["compile", "warpspecialized-gemm"]).stdout


# --- the emitter writes the plan's steps -------------------------------------------------------

def _finish(src: str) -> str:
    return src[src.index("The fused epilogue through shared memory"):]


def test_the_emitter_writes_the_plans_store_steps_in_their_order():
    c = _tma({})
    src = emit_wgmma(c)
    fin = _finish(src)
    marks = ["pcgc::bulk_wait_read<1>();", '"bar.sync %0, 128;',
             "epi.stage<SCOLS, false>(acc[mb], buf, s,",
             "pcgc::fence_proxy_async_shared();", "pcgc::tma_store_2d(&tmC",
             "pcgc::bulk_commit();", "pcgc::bulk_wait<0>();"]
    at = [fin.index(x) for x in marks]
    assert at == sorted(at)
    # each consumer meets on the plan's barrier; the drain follows the tile loop
    assert "const int store_bar = consumer == 0 ? 1 : 2;" in fin
    assert fin.index("}  // next output tile") < fin.index("pcgc::bulk_wait<0>();")
    assert "const __grid_constant__ pcwg::TensorMap tmC" in src
    assert "epi.store<" not in src  # no direct store left
    # an edited plan (store before the sync, emitted with --allow-unsafe) is emitted as edited
    m = next(m for m in agent_mutations(c.plan, ("store_before_sync",)))
    bad = c
    for mm in agent_mutations(c.plan, ("store_before_sync",)):
        bad = attrs.evolve(bad, plan=mm.apply(bad.plan))
    assert m.description.endswith("move before step 4 NAMED_SYNC")
    edited = _finish(emit_wgmma(bad))
    assert edited.index("pcgc::tma_store_2d(&tmC") < edited.index(
        '"bar.sync %0, 128;', edited.index("pcgc::fence_proxy_async_shared();"))


def test_both_stores_share_the_epilogue_arithmetic():
    direct = compile_named("warpspecialized-gemm", target="h100", host=default_host(),
                           params={"bias": "fp16", "activation": "silu", "tails": "true"},
                           target_args={"stages": "4"})
    tma = _tma({"bias": "fp16", "activation": "silu", "tails": "true"})
    # one pcgc::Epilogue of the same traits; its direct store and its staging write apply one
    # quad function (gemm_wgmma_h100.cuh)
    for src, store in ((emit_wgmma(direct), "epi.store<"), (emit_wgmma(tma), "epi.stage<")):
        assert ("using Epi = pcgc::Epilogue<pcgc::OutBf16, pcgc::BiasF16, pcgc::ActSilu, "
                "pcgc::ScaleNone>;") in src
        assert "const Epi epi(bias, nullptr, nullptr, m, n, wtid, lane);" in src
        assert store in src[src.index('extern "C"'):]
    header = gemm_wgmma_header_source()
    assert "b[j][1] = col + 1 < n ? Bias::at(bias, col + 1) : 0.f;" in header
    assert "v[3] = Act::f(Scale::apply(frag[4 * j + 3], sa8 * sb1) + b1);" in header
    assert header.count("v[3] = ") == 1  # one quad's arithmetic, the bias given or read
    assert header.count("quad(v, ") == 2  # the direct store's and the staging write's
    assert header.count("quad_biased(v, ") == 2  # quad's own and the early bias's


@pytest.mark.parametrize("params,early", [
    ({"bias": "bf16", "activation": "gelu"}, True),  # 128x256: 128 accumulators + 64 bias
    ({"bias": "fp32", "BN": "192"}, True),
    ({"activation": "gelu"}, False),  # no bias to read
    ({"bias": "bf16", "BM": "256", "BN": "160"}, False),  # 160 accumulators + 40: too many
    ({"bias": "bf16", "BN": "192", "pingpong": "true"}, False),  # 192 accumulators
])
def test_the_bias_is_read_before_the_sub_tiles_where_the_registers_hold_it(params, early):
    """Each TMA-store sub-tile meets its warp group first, so a bias read inside waited for its
    load at every sub-tile; where the consumer's registers hold the thread's bias beside its
    accumulators (WsGeometry.bias_early) it is read once, before them."""
    c = _tma({"tails": "true", **params})
    assert c.launch.geometry.bias_early is early
    src = emit_wgmma(c)
    assert f"if constexpr ({str(early).lower()}) epi.bias_of(bias_pre, tile_n * BN);" in src
    assert f"epi.stage<SCOLS, {str(early).lower()}>(acc[mb], buf, s," in src


def test_a_store_plan_without_its_steps_is_refused_by_the_emitter():
    c = _tma({})
    bare = attrs.evolve(c, plan=attrs.evolve(c.plan, programs=[
        attrs.evolve(p, store=()) for p in c.plan.programs]))
    with pytest.raises(ProgramError, match="needs the consumers' bulk-store store steps"):
        emit_wgmma(bare)


# --- nvcc: no spills, the TMA store and the bulk waits in the SASS --------------------------------

@pytest.mark.needs_nvcc
@pytest.mark.parametrize("label", ["1c", "2c", "2c fp32 gelu", "2c bias gelu"])
def test_the_store_kernel_builds_without_spills_and_stores_by_tma(label, tmp_path):
    params, stages = SHAPES[label]
    proc, cubin = compile_cubin(emit_wgmma(_tma(params, stages)), tmp_path, "tma")
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no nvdisasm / cuobjdump for the SASS part")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    assert re.search(r"\bUTMASTG\.2D\b", sass)           # the TMA store
    assert re.search(r"\bUTMACMDFLUSH\b", sass)           # its commit_group
    waits = set(re.findall(r"\bDEPBAR\.LE SB0, 0x([0-9a-f]+)", sass))
    assert {"1", "0"} <= waits, waits                     # wait_group.read 1, the drain's 0
    assert re.search(r"\bFENCE\.VIEW\.ASYNC\.S\b", sass)  # fence.proxy.async.shared::cta
    # the consumer's own named barrier, 128 threads (a register id with several consumers)
    assert re.search(r"\bBAR\.SYNC\.DEFER_BLOCKING (R\d+|0x[1-9a-f]), 0x80\b", sass)
    assert not re.search(r"\bSTG\.E", sass)              # no direct global store of C


# --- the call plans C's tensor map -------------------------------------------------------------

def _t(shape, strides=None, dtype="bf16", ptr=4096):
    if strides is None:
        strides = (shape[1], 1) if len(shape) == 2 else (1,)
    return TensorInfo(shape=tuple(shape), strides=tuple(strides), dtype=dtype, ptr=ptr)


ON = Tuning(tma_store=True)


def test_the_call_takes_the_tma_store_by_default():
    assert Tuning().tma_store  # measured faster than the direct store (docs/guide/matmul.md)
    p = plan_call(_t((1000, 512)), _t((512, 3000)), sms=132)
    assert p.variant.store == "tma"


@pytest.mark.parametrize("out_dtype, box", [("bf16", 64), ("fp16", 64), ("fp32", 32)])
def test_the_call_stores_by_tma_in_boxes_of_one_swizzled_row(out_dtype, box):
    p = plan_call(_t((1000, 512)), _t((512, 3000)), out_dtype=out_dtype, tuning=ON, sms=132)
    assert p.variant.store == "tma" and p.c is not None
    assert (p.c.inner, p.c.outer, p.c.stride, p.c.box_inner, p.c.box_outer) == (
        3000, 1000, 3000, box, 64)


@pytest.mark.parametrize("case, kwargs", [
    ("unaligned row stride", dict(b=_t((512, 3001), (1, 512)))),
    ("unaligned out rows", dict(out=_t((1000, 3000), (3001, 1)))),
    ("split-K", dict(a=_t((128, 4096)), b=_t((4096, 256)))),
    ("off", dict(tuning=Tuning(tma_store=False))),
])
def test_the_call_stores_directly_where_tma_cannot(case, kwargs):
    args = {"a": _t((1000, 512)), "b": _t((512, 3000)), "tuning": ON, "sms": 132, **kwargs}
    p = plan_call(args.pop("a"), args.pop("b"), **args)
    assert p.variant.store == "direct" and p.c is None, case


def test_a_tile_that_splits_into_odd_boxes_stores_directly():
    # 96 columns: one and a half 128-byte rows, three 64-byte ones a consumer's 64-row block
    p = plan_call(_t((1000, 512)), _t((512, 3000)), tuning=ON,
                  tile=TileShape(bm=128, bn=96, bk=64))
    assert p.variant.store == "direct"


@pytest.mark.parametrize("bm, bn, consumers, box", [
    (128, 256, 2, 64),   # 128-byte rows wherever they tile the columns in whole buffers
    (256, 160, 2, 32),   # five 64-byte rows a 64-row block, ten a consumer: two buffers' worth
    (128, 192, 2, 32),   # three 128-byte rows a consumer: odd; six 64-byte ones
    (256, 192, 2, 64),   # three 128-byte rows a block, six a consumer
    (128, 64, 1, 64),    # a consumer of two 64-row blocks: two 128-byte rows
    (64, 64, 1, 32),     # one block: one 128-byte row, two 64-byte ones
    (128, 160, 2, None),  # five 64-byte rows of one block: odd either way
])
def test_the_store_box_is_the_widest_swizzled_row_a_consumer_tiles_in_whole_buffers(
        bm, bn, consumers, box):
    from pipeline_core_nvidia_h100 import autotune
    from pipeline_core_nvidia_h100.matmul_call import TUNING, plan_infos

    c = autotune.Candidate(bm=bm, bn=bn, stages=3, consumers=consumers)
    p = plan_infos(_t((2000, 3000)), _t((3000, 5000), (1, 3000)), None, None, None, None, 132,
                   TUNING, c)
    if box is None:
        assert p.variant.store == "direct" and p.c is None
        return
    assert p.variant.store == "tma" and p.c is not None
    # the plan's C box is the sub-tile the kernel stages (its SCOLS), so TMA writes what the
    # consumers staged
    geo = c.geometry(p.variant)
    assert p.c.box_inner == geo.store_cols == box
    assert re.search(rf"constexpr int SCOLS = {box}, SBUF = 2;.*\n.*SBUF_BYTES = {64 * box * 2};",
                     emit_wgmma(compile_named("warpspecialized-gemm", target="h100",
                                              host=default_host(), params=c.params(p.variant),
                                              target_args={"stages": "3"})))


def test_a_box_of_64_byte_rows_takes_the_64_byte_swizzle():
    from pipeline_core_nvidia_h100.tma import SWIZZLE_64B, SWIZZLE_128B, swizzle_of

    assert (swizzle_of(128), swizzle_of(64)) == (SWIZZLE_128B, SWIZZLE_64B)
    with pytest.raises(ValueError, match="128 or 64 bytes, not 96"):
        swizzle_of(96)


def test_autotuning_keeps_the_candidates_that_must_store_directly():
    from pipeline_core_nvidia_h100 import autotune
    from pipeline_core_nvidia_h100.warpspecialized import GemmVariant

    tma, direct = GemmVariant(tails=True, store="tma"), GemmVariant(tails=True)
    found = autotune.candidates(4096, 4096, 4096, tma, 132)
    assert found == autotune.candidates(4096, 4096, 4096, direct, 132)
    # a deep ring leaves no room for the staging: it runs (matmul_call._plan stores directly)
    deep = [c for c in found if not autotune.takes(c, tma)]
    assert deep and all(autotune.takes(c, autotune.direct_store(tma)) for c in deep)
    assert autotune.takes(autotune.DEFAULT, tma)


def test_the_document_carries_the_store_and_validates(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    import json

    from pipeline_core.json_output import load_schema

    out = tmp_path / "st.json"
    res = run_cli(["compile", "warpspecialized-gemm", "-p", "store=tma", "--format", "json",
                   "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema("schedule"))
    agents = doc["agents"]
    assert agents["store"] == {"name": "store", "agents": ["consumer0", "consumer1"],
                               "buffers": 2, "barriers": [1, 2]}
    steps = agents["programs"][1]["store"]
    assert [s["kind"] for s in steps][::2] == ["store_wait", "stage_write", "named_sync",
                                               "store_commit"]
    assert steps[0]["isa"].startswith("cp.async.bulk.wait_group.read 1")
    assert [s["kind"] for s in agents["programs"][1]["drain"]] == ["store_drain"]
    assert "store" not in agents["programs"][0]
