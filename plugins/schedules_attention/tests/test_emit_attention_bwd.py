"""cuda-attention-bwd: the backward's main kernel written on the kit's frame carries the plan's
sync (the dQ hand-off's barriers, the writer's bulk group steps, the consumers' proxy fence),
the trip rule's C agrees with the rule, the deterministic kernel carries its turns (and only
it), and every variant builds for sm_90a with no spill and no serialized wgmma
(docs/guide/attention.md, "The backward")."""
from __future__ import annotations

import re

import pytest

from pipeline_core.api import compile_named
from pipeline_core.errors import ProgramError

from pipeline_core_nvidia_h100.toolchain import compile_cubin, nvcc, sass_command, sass_of

from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
from pipeline_core_schedules_attention.emit_attention_bwd import emit_attention_bwd, tile_exprs

NAME = "flash-attention-bwd"


def compiled(**params):
    return compile_named(NAME, params={k: str(v).lower() for k, v in params.items()})


def test_the_shared_kernel_stages_adds_and_reduces_once_per_query_block():
    src = emit_attention_bwd(compiled())
    assert "if (wtid / 32 == 1) {  // ---- agent dq_writer0 ----" in src
    assert "dq_writer1" not in src
    assert src.count("pcab::reduce_add(") == 1  # one buffer, one reduce
    assert src.count("pcab::stage<DQ_RB, HD, true>(dqacc, dq_at(rb + t, 0), 1);") >= 1  # consumer 1's
    assert "DQ_BUFFERS = 1," in src
    # consumer 0 hands the buffer to consumer 1 (both groups' 256 threads), consumer 1 to the
    # writer (128 + 32)
    assert 'asm volatile("bar.arrive 2, 256;\\n" ::: "memory");' in src
    assert 'asm volatile("bar.sync 2, 256;\\n" ::: "memory");' in src


def test_the_kernel_carries_the_hand_off_and_each_writer_runs_on_a_warp_of_its_own():
    src = emit_attention_bwd(compiled(shared_dq=False))
    assert "if (wtid / 32 == 1) {  // ---- agent dq_writer0 ----" in src
    assert "if (wtid / 32 == 2) {  // ---- agent dq_writer1 ----" in src
    assert "if (lane == 0) pcgc::bulk_wait_read<0>(); __syncwarp();" in src
    assert "if (lane == 0) pcgc::bulk_commit();" in src
    assert src.count("pcab::reduce_add(") == 2  # one per consumer's buffer
    assert src.count("pcgc::fence_proxy_async_shared();") >= 2  # each consumer's hand-over
    for turn in (2, 4):  # each writer's turn: its consumer's 128 threads and its warp's 32
        assert f'asm volatile("bar.sync {turn}, 160;\\n" ::: "memory");' in src
    # hd128: dQ in two parts of 64 columns, each staged
    for c in (0, 1):  # each consumer into its own buffer
        assert f"pcab::stage<DQ_RB, HD, false>(dqacc, dq_at(rb + t, {c}), 1);" in src


def test_the_deterministic_kernel_carries_its_turns_and_the_default_none():
    shared = emit_attention_bwd(compiled(deterministic=True, causal=True))
    assert ("if (lane == 0) pcab::turn_wait(dQsem + (size_t)qhead(t) * MB + qblock(t), "
            "1 * nb + 0); __syncwarp();" in shared)  # one writer: one turn per KV block
    src = emit_attention_bwd(compiled(deterministic=True, causal=True, shared_dq=False))
    counter = "dQsem + (size_t)qhead(t) * MB + qblock(t)"
    for slot in (0, 1):  # consumer 0 before consumer 1, KV block by KV block
        assert (f"if (lane == 0) pcab::turn_wait({counter}, 2 * nb + {slot}); __syncwarp();"
                in src)
    assert src.count(f"if (lane == 0) pcab::turn_release({counter});") == 2
    assert src.count("if (lane == 0) pcgc::bulk_wait<0>();") == 2  # not the .read form
    assert src.count("if (lane == 0) pcab::turn_fence();") == 2
    assert "int* __restrict__ dQsem" in src and "red.release.gpu.global.add.s32" in src
    plain = emit_attention_bwd(compiled(causal=True))
    assert "dQsem" not in plain and "turn_" not in plain


def test_a_shifted_turn_is_not_emitted():
    import attrs

    c = compiled(deterministic=True)
    plan = attrs.evolve(c.plan, turns=attrs.evolve(c.plan.turns, first=1))
    with pytest.raises(ProgramError, match="turns start at 1"):
        emit_attention_bwd(attrs.evolve(c, plan=plan))


def _c(lines, name: str) -> str:
    """The C expression a tile line gives ``name`` (inside its warp shuffle), as Python: every
    quotient is of non-negative numbers, where C's / and Python's // agree."""
    line = next(x for x in lines if f"const int {name} = " in x)
    return line.split("__shfl_sync(0xffffffffu, ", 1)[1].rsplit(", 0);", 1)[0].replace("/", "//")


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_the_trip_rules_c_agrees_with_the_rule(align):
    rule = BackwardTrips(causal=True, block_m=64, block_n=128, align=align)
    lines = tile_exprs(rule)
    first, nmask = _c(lines, "first"), _c(lines, "nmask")
    for sq, sk in ((1000, 1000), (100, 1000), (1000, 100), (17, 300), (300, 17), (1, 1)):
        for nb in range(-(-sk // 128)):
            env = {"nb": nb, "Sq": sq, "Sk": sk, "MB": -(-sq // 64), "min": min, "max": max}
            env["first"] = eval(first, env)  # noqa: S307 - the emitter's own C expression
            assert env["first"] == rule.first_block(nb, sq, sk)
            assert eval(nmask, env) == rule.masked_blocks(nb, sq, sk)  # noqa: S307


def test_a_moved_diagonal_start_is_not_emitted():
    with pytest.raises(ProgramError, match="moves the diagonal start"):
        tile_exprs(BackwardTrips(causal=True, block_m=64, block_n=128, start_shift=1))


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_variant_builds_without_spills_or_serialized_wgmma(head_dim, causal, align, dtype,
                                                                  tmp_path):
    params = dict(head_dim=head_dim, causal=causal)
    if causal:
        params["align"] = align
    proc, _ = compile_cubin(emit_attention_bwd(compiled(**params), dtype=dtype), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr  # ptxas kept setmaxnreg
    assert "serialized" not in proc.stderr


def test_the_rows_kernel_reads_its_own_rows_of_every_consumers_ds():
    src = emit_attention_bwd(compiled(head_dim=64, block_m=128, dq_cut="rows"))
    assert "DQ_RB = 1;" in src and "float dqacc[DQ_RB][32];" in src  # one row block held
    for c in (0, 1):  # consumer c: rows 64 c.. of both consumers' dS boxes, into block c
        assert (f"pcab::dq_all<DQ_RB, BN, DS_BYTES, wgmma_kmn_m64n64k16>(dqacc, ds_smem(0) + "
                f"{c} * 64 * 128, k_smem + 0 * BN * 128);") in src
        assert f"pcab::stage<DQ_RB, HD, false>(dqacc, dq_at(rb + t, 0), 0, {c});" in src


def test_the_columns_kernel_reads_every_consumers_ds_and_stages_its_own_columns():
    src = emit_attention_bwd(compiled(dq_cut="columns", causal=True))
    # consumer c: head columns c * 64.. over every key, into the buffer
    for part in (0, 1):
        assert (f"pcab::dq_all<DQ_RB, BN, DS_BYTES, wgmma_kmn_m64n64k16>(dqacc, ds_smem(0), "
                f"k_smem + {part} * BN * 128);") in src
        assert f"pcab::stage<DQ_RB, HD, false>(dqacc, dq_at(rb + t, 0), {part});" in src
    assert "pcab::stage<DQ_RB, HD, true>" not in src  # no add
    assert "DQ_STAGES = 2," in src  # the staging of K tile t + 1 beside the reduce of t
    # the joins' syncs: barrier.sync, not the aligned bar.sync: each consumer's branch and the
    # dQ writer meet from their own code
    assert src.count("barrier.sync 1, 288;") >= 3 and src.count("barrier.sync 2, 256;") >= 2
    assert "bar.sync 1, 288" not in src and "bar.sync 2, 256" not in src


@pytest.mark.parametrize("dk_rs", [False, True])
def test_dk_reads_ds_from_registers_with_dk_rs_and_no_consumer_gathers_its_own(dk_rs):
    """-p dk_rs: dK's wgmma is dV's RS form over the packed dS (``dsp``) and Q's stage, and the
    gradient step gathers dS on no barrier of the consumer's own (the join ds publishes it);
    without it, dK reads the dS box and the step gathers it first."""
    src = emit_attention_bwd(compiled(dq_cut="columns", dk_rs=dk_rs))
    rs = "pcat::pv<BM, HD, wgmma_rs_m64n128k16>(dkacc, dsp, stage_q("
    assert (rs in src) is dk_rs and ("pcab::dk<BM, HD, wgmma_mn_m64n128k16>(dkacc," in src) is not dk_rs
    assert f"pcab::grad<BM, pcat::Bf16, {str(not dk_rs).lower()}>(sacc, dpacc, pp, dsp," in src


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("head_dim, dq_cut, deterministic, dk_rs", [
    (64, "keys", True, False), (128, "keys", True, False), (128, "columns", False, False),
    (128, "columns", True, False), (64, "rows", False, False), (128, "columns", False, True),
    (128, "columns", True, True), (64, "rows", False, True), (64, "rows", True, True)])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
def test_every_deterministic_and_columns_variant_builds_without_spills(head_dim, dq_cut,
                                                                      deterministic, dk_rs,
                                                                      causal, align, tmp_path):
    params = dict(head_dim=head_dim, causal=causal, deterministic=deterministic, dq_cut=dq_cut,
                  dk_rs=dk_rs, **({"block_m": 128} if dq_cut == "rows" else {}))
    if causal:
        params["align"] = align
    proc, _ = compile_cubin(emit_attention_bwd(compiled(**params)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr and "serialized" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("deterministic", [False, True])
def test_every_field_the_emitter_reads_is_proven(deterministic):
    """What runs is what was proven (issue 33): each plan field the emitter reads is one the
    prover checks (``pipeline_core.testing.unproven_fields``), the turns' too."""
    from pipeline_core.plugins import default_host
    from pipeline_core.testing import unproven_fields

    c = compile_named(NAME, target="h100", host=default_host(), params={
        "causal": "true", **({"deterministic": "true"} if deterministic else {})})
    assert unproven_fields(c, emit_attention_bwd, per_field=4) == []


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (8, 1)])
def test_each_load_reads_its_heads_of_the_tensors_own_strides(hq, hkv):
    """Q and dO are read at (head, batch) of query head qhead over B * Hq, K and V at KV head
    bhk over B * Hkv, through rank-4 maps of the tensors' own strides (layout.bhsd_map), and
    dK and dV are stored at the KV head's rows of their own strides: evaluated from the emitted
    source for every head, against torch's [B, H, S, D] indices."""
    import re

    src = emit_attention_bwd(compiled())
    group, b = hq // hkv, 2
    loads = dict(re.findall(r"tma_load_4d\((stage_q|stage_do|k_smem|v_smem)[^;]*, c \* 64, "
                            r"[^,]*\* B[MN], ([^;]*)\);", src))
    assert set(loads) == {"stage_q", "stage_do", "k_smem", "v_smem"}
    c_expr = r"[^,]+"
    for name in ("stage_q", "stage_do"):
        head, batch = re.fullmatch(rf"({c_expr}), ({c_expr})", loads[name]).groups()
        for qhead in range(b * hq):
            # qhead(K tile) is the query head, whatever the K tile's name in the source
            at = {"HKV": hkv, "group": group, "qhead": lambda u, qh=qhead: qh, "t": 0, "u": 0}
            got = tuple(eval(e.replace("/", "//"), at)  # noqa: S307 - our own expression
                        for e in (head, batch))
            assert got == (qhead % hq, qhead // hq)
    for name in ("k_smem", "v_smem"):
        assert loads[name] == "bhk % HKV, bhk / HKV"
    assert ("pcab::finish<HD, pcat::Bf16>(dkacc, dvacc, dK + (bhk / HKV) * dk_sb + (bhk % HKV) "
            "* dk_sh, dk_ss, dV + (bhk / HKV) * dv_sb + (bhk % HKV) * dv_sh, dv_ss,") in src


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_calls_kernels_keep_their_wgmma_descriptors_in_uniform_registers(head_dim,
                                                                              tmp_path):
    """Each k loop builds its descriptors once from the warp-uniform consumer index and steps
    them (wgmma_h100.cuh's desc_step, kit/frame.py's uniform_consumer), so the kernel moves few
    values from vector to uniform registers: before session 18 every wgmma's two descriptors
    were built on the vector pipe and moved (R2UR) before it, 289 moves at D 128 against its
    128 wgmmas (docs/guide/attention.md, "How fast a consumer issues its wgmmas"); 56 after
    it, 64-87 since session 19's gradient step has an unmasked and a masked form."""
    from pipeline_core_schedules_attention import bwd_call

    _, src = bwd_call.source(head_dim, "bf16", False, "top_left")
    assert "__shfl_sync(0xffffffffu, wg - 1, 0)" in src and "desc_step(" in src
    proc, cubin = compile_cubin(src, tmp_path)
    assert proc.returncode == 0, proc.stderr
    sass = sass_of(cubin)
    assert sass is not None
    assert sass.count("R2UR ") < sass.count("HGMMA."), (sass.count("R2UR "),
                                                        sass.count("HGMMA."))
    # dK and dV leave through the forward's row store (pcat::store_row): from 128 columns up
    # two rows of each, 8 bytes a thread a store (2 x 2 x HD / 16 of them); at D 64, 4 bytes
    wide = len(re.findall(r"\bSTG\.E\.64\b", sass))
    assert wide == (2 * 2 * head_dim // 16 if head_dim >= 128 else 0), wide


@pytest.mark.skipif(nvcc() is None or sass_command() is None,
                    reason="needs nvcc and a disassembler")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_the_calls_gradient_step_branches_once_a_query_block_not_per_score(head_dim, causal,
                                                                           tmp_path):
    """attention_bwd.cuh's grad reads ``masked`` through a warp shuffle and branches once
    between an unmasked and a masked form; tested per score (``!masked || keeps(..)``), the
    short circuit put a convergence region (BSSY) around every score: 122-285 in the call's
    kernels (issue_probe.per_score_mask) against their 128 wgmmas, 26-29 since
    (docs/guide/attention.md, "Session 19: dK from registers, the mask once a query block")."""
    from pipeline_core_schedules_attention import bwd_call

    _, src = bwd_call.source(head_dim, "bf16", causal, "top_left")
    assert "uniform_masked(masked)" in src
    proc, cubin = compile_cubin(src, tmp_path)
    assert proc.returncode == 0, proc.stderr
    sass = sass_of(cubin)
    assert sass is not None
    assert sass.count("BSSY") < sass.count("HGMMA.") / 2, (sass.count("BSSY"),
                                                           sass.count("HGMMA."))
