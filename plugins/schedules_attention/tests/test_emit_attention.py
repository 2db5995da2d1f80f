"""Emitter family ``attention`` (cuda-attention) and the ``attention()`` call's argument checks
(docs/guide/attention.md, "Emitting and calling it")."""
from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from pipeline_core.api import compile_named
from pipeline_core.errors import ProgramError
from pipeline_core.testing import run_cli

from pipeline_core_nvidia_h100.toolchain import (GENCODE, compile_cubin, nvcc, sass_command,
                                                  sass_of)

from pipeline_core.plugin_api import StepKind

from pipeline_core_schedules_attention import AttentionTag as T, call
from pipeline_core_schedules_attention.call import (CALL_OVERLAPS, CALL_STAGES, CALL_TILES,
                                                    HEAD_DIMS, LOG2E, SHORT_KEYS, SHORT_TILES,
                                                    AttentionArgumentError, call_params,
                                                    kernel_head_dim, padded_attention,
                                                    call_stages, plan_attention)
from pipeline_core_schedules_attention.emit_attention import emit_attention, tile_bounds_exprs
from pipeline_core_schedules_attention.tile_order import POSITION, loop_head, order_exprs
from pipeline_core_schedules_attention.tiles import LoopBounds

NAME = "flash-attention-fwd"


def compiled(**params):
    p = {"intra_overlap": "false", **{k: str(v).lower() for k, v in params.items()}}
    return compile_named(NAME, params=p, target_args={"stages": "2"})


def emit(*args: str) -> tuple[int, str, str]:
    r = run_cli(["emit", NAME, "--target", "h100", "-T", "stages=2", *args])
    return r.exit_code, r.stdout, r.stderr


VARIANTS = [(pp, hd, dt) for pp in (True, False) for hd in (64, 128) for dt in ("bf16", "fp16")]


@pytest.mark.parametrize("pingpong,head_dim,dtype", VARIANTS)
def test_emitted_kernel_carries_the_plans_steps(pingpong, head_dim, dtype):
    code, src, err = emit("-p", "intra_overlap=false", "-p", f"pingpong={str(pingpong).lower()}",
                          "-p", f"head_dim={head_dim}", "-O", f"dtype={dtype}")
    assert code == 0, err
    assert (f"constexpr int BM = 128, BN = 128, HD = {head_dim}, HDV = {head_dim}, STAGES = 2"
            in src)
    # the producer announces the plan's bytes (Q once: 128 x D, K and V: 128 x D, 2 bytes each);
    # Q's in its prologue and in the branch of a tile with no KV block
    assert src.count(f"mbar_expect_tx(q_full_bar((o % 1)), {128 * head_dim * 2}u);") == 2
    assert f"mbar_expect_tx(k_full_bar(((rb + t) % 2)), {128 * head_dim * 2}u);" in src
    # the consumers' ring waits, releases and the once ring's, as the plan derived them
    assert "mbar_wait(q_full_bar((o % 1)), ((o / 1 + (0)) & 1));" in src
    assert "mbar_wait(k_empty_bar(((rb + t) % 2)), (((rb + t) / 2 + (-1)) & 1));" in src
    assert "if (lane == 0) mbar_arrive(v_empty_bar(((rb + t) % 2)));" in src
    assert "if (lane == 0) mbar_arrive(q_empty_bar((o % 1)));" in src
    assert "wgmma_m64n128k16(" in src and f"wgmma_rs_m64n{head_dim}k16(" in src
    elem = {"bf16": "pcat::Bf16", "fp16": "pcat::Fp16"}[dtype]  # how P and O are packed
    assert (f"pcat::softmax<BN, {elem}, pcat::PackP::now, false>(sacc, pk, rows, "
            "pcat::KeyTail{Sk}, t, FM, scale_log2);") in src
    # O stored at its own strides (q's layout), and each row's log-sum-exp where the call
    # passes an LSE (the backward's)
    assert (f"pcat::finish<HDV, {elem}>(oacc, rows, O + (bh / H) * o_sb + (bh % H) * o_sh, "
            "o_ss, LSE, bh, Sq);") in src
    assert "unsigned short* __restrict__ O, float* __restrict__ LSE," in src
    named = re.findall(r"bar\.(sync|arrive) (\d+), 256", src)
    if pingpong:  # consumer 0 and 1 take turns: each syncs on one id and arrives on the other
        assert "if (consumer == 0) {" in src and "} else if (consumer == 1) {" in src
        assert {(k, i) for k, i in named} == {("sync", "1"), ("arrive", "1"),
                                              ("sync", "2"), ("arrive", "2")}
    else:
        assert not named and "if (consumer == 0)" not in src


def test_a_tile_without_kv_blocks_runs_the_once_steps_alone():
    src = emit_attention(compiled(pingpong=False))
    zero = src.split("if (KT == 0) {  // an output tile with no K tile: the once steps alone")
    assert len(zero) == 3  # the producer's and the consumers' guard
    producer_zero = zero[1].split("} else {")[0]
    assert "q_full" in producer_zero and "k_full" not in producer_zero
    consumer_zero = zero[2].split("} else {")[0]
    assert "q_empty" in consumer_zero and "wgmma" not in consumer_zero


def test_keys_past_the_end_are_masked_and_rows_past_it_not_stored():
    src = emit_attention(compiled())
    softmax = [x for x in _body(src).split("\n") if "pcat::softmax<" in x]
    assert softmax and all("pcat::KeyTail{Sk}, t, FM," in x for x in softmax)
    assert "bool keeps(int key, int) const { return key < sk; }" in _device(src)
    assert "if (row < sq)" in _device(src) and "if (row + 8 < sq)" in _device(src)


def test_watchdog_bounds_every_wait():
    src = emit_attention(compiled(), watchdog=1000)
    assert "mbar_wait(" not in src.split("extern \"C\"")[1]
    assert "mbar_wait_bounded(k_full_bar(((rb + t) % 2))" in src


def _consumer0_loop(src: str) -> str:
    """Consumer 0's K loop (the kernel stretch) of an emitted source."""
    return src.split("for (int t = 1; t < KT; ++t) {  // consumer kernel")[1].split("}\n")[0]


def test_the_intra_overlap_issues_pv_a_tile_late_and_waits_for_s_alone():
    src = emit_attention(compiled(intra_overlap=True, pingpong=False))
    loop = _consumer0_loop(src)
    order = ["pcat::qk<BM, BN, HD, wgmma_m64n128k16>(sacc, q_smem, stage_k(((rb + t) % STAGES)), "
             "consumer);", "pcat::pv<BN, HDV, wgmma_rs_m64n128k16>(oacc, pk, stage_v(((rb + t - 1)"
             " % STAGES)));", "wgmma_wait<1>();", "(sacc, pk, rows, pcat::KeyTail{Sk}, t, FM, "
             "scale_log2);", "wgmma_wait<0>();", "mbar_arrive(v_empty_bar(((rb + t - 1) % 2)));",
             "pcat::rescale<"]
    at = [loop.index(x) for x in order]
    assert at == sorted(at), loop
    # the first block has no PV_{-1}: S_0, its softmax and rescale before the loop; the last PV
    # after it
    prologue = src.split("// consumer prologue iteration 0")[1].split("// consumer kernel")[0]
    assert "pcat::pv<" not in prologue and "pcat::softmax<" in prologue
    assert "pcat::rescale<" in prologue
    epilogue = src.split("// consumer epilogue iteration 0")[1].split("if (lane == 0) mbar_arrive"
                                                                       "(q_empty_bar")[0]
    assert "stage_v(((rb + t - 1) % STAGES)));" in epilogue and "softmax" not in epilogue


def test_under_the_overlap_p_is_packed_only_after_pv_retired():
    """PV_{t-1} reads the packed P while the softmax of t runs: the softmax keeps P_t in fp32 in
    S's registers and the rescale (after wait_group 0) packs it; without the overlap the softmax
    packs at once: the choice is the template argument ``pcat::PackP`` of both calls, and the
    header packs where it says."""
    for intra, where in ((True, "later"), (False, "now")):
        calls = [x.strip() for x in _body(emit_attention(compiled(intra_overlap=intra)))
                 .split("\n") if "pcat::softmax<" in x or "pcat::rescale<" in x]
        assert calls and all(f"pcat::PackP::{where}" in x for x in calls), calls
    header = _device(emit_attention(compiled()))
    softmax = header.split("void softmax(")[1].split("\n}\n")[0]
    rescale = header.split("void rescale(")[1].split("\n}\n")[0]
    now, later = softmax.split("if constexpr (P == PackP::now) {")[1].split("} else {")
    assert "pk[2 * c] = Elem::pack(p0, p1);" in now and "pk[" not in later.split("}")[0]
    assert "s[4 * c] = p0;" in later
    assert "if constexpr (P == PackP::later) {" in rescale
    assert "pk[2 * c] = Elem::pack(s[4 * c], s[4 * c + 1]);" in rescale


@pytest.mark.parametrize("params,needle", [
    ({"block_m": "256", "head_dim": "64", "intra_overlap": "false"}, "set -p block_m=128"),
])
def test_unwritten_variants_are_refused_in_one_line(params, needle):
    code, out, err = emit(*(x for k, v in params.items() for x in ("-p", f"{k}={v}")))
    assert code == 2 and not out
    assert needle in err and "emitter cuda-attention" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


GEOMETRY_EMIT_REFUSES = ("-p", "consumers=1", "-p", "pingpong=false", "-p", "block_n=32")
ONE_CONSUMER_LINE = ("emitter cuda-attention: writes 64 query rows per consumer; -p block_m=128 "
                     "over 1 consumer gives 128: set -p block_m=64")


def test_compile_warns_of_a_proven_geometry_the_emitter_refuses():
    """Issue 33: this compile proved SAFE with no word, then ``emit`` refused its geometry;
    compile asks the emitter the same question (EmitterRecord.refuses), and says so in one
    warning line with the fix, and ``emit`` refuses with the same text."""
    compiled = run_cli(["compile", "flash-attention-fwd", *GEOMETRY_EMIT_REFUSES])
    assert compiled.exit_code == 0 and compiled.stdout
    assert compiled.stderr == ("warning: no emitter writes this flash-attention-fwd kernel "
                               "(`pipeline-core emit` would refuse it): "
                               f"{ONE_CONSUMER_LINE}\n")
    code, out, err = emit(*GEOMETRY_EMIT_REFUSES)
    assert (code, out, err) == (2, "", f"error: {ONE_CONSUMER_LINE}\n")
    fixed = run_cli(["compile", "flash-attention-fwd", *GEOMETRY_EMIT_REFUSES,
                     "-p", "block_m=64"])
    assert fixed.exit_code == 0 and fixed.stderr == ""  # the fix it names is written


@pytest.mark.parametrize("command", [["check"], ["analyze"], ["export", "--format", "dot"]])
def test_every_command_that_compiles_warns_of_it_too(command):
    """Not only compile: check, analyze and export compile the same schedule, and a user who
    reads their verdict or timing should learn the kernel cannot be written."""
    res = run_cli([command[0], "flash-attention-fwd", *GEOMETRY_EMIT_REFUSES, *command[1:]])
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith("warning: no emitter writes this flash-attention-fwd kernel")
    assert ONE_CONSUMER_LINE in res.stderr and res.stderr.count("\n") == 1


def test_a_schedule_of_another_family_is_refused():
    gemm = compile_named("warpspecialized-gemm", target_args={"stages": "2"})
    with pytest.raises(ProgramError, match="writes kernel family attention"):
        emit_attention(gemm)


@pytest.mark.skipif(nvcc() is None or sass_command() is None, reason="needs nvcc and nvdisasm")
@pytest.mark.parametrize("pingpong,head_dim,intra", [(True, 128, False), (False, 64, False),
                                                     (True, 128, True), (False, 64, True)])
def test_sass_has_no_spills_the_hgmma_counts_and_the_named_barriers(pingpong, head_dim, intra,
                                                                    tmp_path):
    src = emit_attention(compiled(pingpong=pingpong, head_dim=head_dim, intra_overlap=intra))
    cu, cubin = tmp_path / "fa.cu", tmp_path / "fa.cubin"
    cu.write_text(src)
    proc = subprocess.run([nvcc() or "nvcc", "-cubin", GENCODE, "-std=c++17", "-Xptxas=-v",
                           "-o", str(cubin), str(cu)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "C7508" not in proc.stderr  # ptxas kept setmaxnreg
    assert "serialized" not in proc.stderr  # no register an in-flight wgmma reads is written
    sass = subprocess.run([*(sass_command() or []), str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    assert not re.search(r"\b(LDL|STL)\b", sass)
    # the softmax's 2^x is the MUFU alone (ex2.approx.ftz, FA3's): exp2f's accurate path would
    # compare each input with -126 and scale it by predicated FMULs around every MUFU.EX2
    assert sass.count("MUFU.EX2") >= 128 // 2
    assert not re.search(r"FSETP\.GEU\.AND P\d, PT, R\d+, -126", sass)
    ss = re.findall(r"HGMMA\.64x128x16\.F32(?:\.BF16)? R\d+, gdesc\[UR\d+\]", sass)
    rs = re.findall(rf"HGMMA\.64x{head_dim}x16\.F32(?:\.BF16)? R\d+, R\d+, "
                    r"gdesc\[UR\d+\]\.tnspB", sass)
    # S = Q.K^T: D/16 k-steps from shared memory; PV: block_n/16 k-steps, P from registers,
    # V read MN-major; each copy of the consumer's program issues both
    assert ss and rs and len(ss) // (head_dim // 16) == len(rs) // (128 // 16)
    # each S starts from zero (scale-d 0 on its first k step)
    assert re.search(r"HGMMA\.64x128x16\.F32(?:\.BF16)? R\d+, gdesc\[UR\d+\], RZ, !UPT", sass)
    # the plan's wgmma waits: all wait_group 0 without the overlap; with it, the S wait of each
    # consumer's K loop is wait_group 1 (PV_{t-1} still in flight)
    waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)
    assert set(waits) == ({"0x0", "0x1"} if intra else {"0x0"})
    # (each consumer branch issues PV in its K loop and its epilogue)
    assert waits.count("0x1") == (len(rs) // (128 // 16) // 2 if intra else 0)
    named = set(re.findall(r"BAR\.(SYNC\.DEFER_BLOCKING|ARV) (0x[12]), 0x100", sass))
    assert named == ({("SYNC.DEFER_BLOCKING", "0x1"), ("SYNC.DEFER_BLOCKING", "0x2"),
                      ("ARV", "0x1"), ("ARV", "0x2")} if pingpong else set())
    # O's stores (pcat::store_row): from 128 columns up a quad's neighbours swap a pair of
    # column blocks (SHFL.BFLY 0x1) and each thread stores 8 bytes, half the 4-byte stores of
    # D 64's rows, which store each pair where it lies
    wide = re.findall(r"\bSTG\.E\.64\b", sass)
    narrow = re.findall(r"\bSTG\.E\b(?!\.)", sass)
    if head_dim >= 128:
        assert len(wide) == 2 * head_dim // 16 and len(narrow) <= 2  # LSE's two rows
    else:
        assert not wide and len(narrow) >= 2 * head_dim // 8


@pytest.mark.parametrize("causal", [False, True])
def test_at_d64_the_calls_consumers_take_turns_over_s_and_the_lagged_pv(causal, tmp_path):
    """The call's D=64 tile (3 consumers of 64 rows) takes turns as FA3's and FA4's scheduler
    barrier does: each consumer's named-barrier wait opens a stretch that issues S_j and
    PV_{j-1} before its arrival hands the turn on; D=128's tiles take no turns."""
    c = compile_named(NAME, params=call_params(64, causal),
                      target_args={"stages": str(call_stages(64, causal))})
    assert c.proof.safe
    (order,) = c.plan.orders
    tags = [{c.body[i].tag for i in t.ops} for t in order.turns]
    assert len(tags) == 3 and all(t == {T.WGMMA_S, T.WGMMA_PV} for t in tags)
    assert not compile_named(NAME, params=call_params(128, causal),
                             target_args={"stages": str(call_stages(128, causal))}).plan.orders
    proc, cubin = compile_cubin(emit_attention(c), tmp_path)
    assert proc.returncode == 0 and "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no SASS disassembler (nvdisasm or cuobjdump)")
    # each stretch from a turn's wait to its arrival: which wgmmas it issues (S from shared
    # memory, PV with P in registers)
    turns, inside = [], None
    for line in sass.splitlines():
        if re.search(r"BAR\.SYNC\.DEFER_BLOCKING 0x[123], 0x100", line):
            inside = set()
        elif inside is not None and re.search(r"BAR\.ARV 0x[123], 0x100", line):
            turns.append(inside)
            inside = None
        elif inside is not None and "HGMMA" in line:
            inside.add("pv" if re.search(r"HGMMA\S* R\d+, R\d+, gdesc", line) else "s")
    assert {"s", "pv"} in turns, turns


class FakeTensor:
    """Just what plan_attention reads of a torch tensor."""

    def __init__(self, shape, dtype="torch.bfloat16", cuda=True, contiguous=True,
                 device="cuda:0"):
        self.shape, self.dtype, self.is_cuda, self.device = tuple(shape), dtype, cuda, device
        self._contiguous = contiguous

    def is_contiguous(self):
        return self._contiguous

    def stride(self, i):  # contiguous, or rows of 130 bytes (TMA cannot take them: copied)
        return math.prod(self.shape[i + 1:]) if self._contiguous else (
            math.prod(self.shape[i + 1:-1]) * 65 if i < len(self.shape) - 1 else 1)

    def element_size(self):
        return 2

    def data_ptr(self):
        return 1 << 20


def qkv(sq=100, sk=77, d=64, **over):
    q = FakeTensor((2, 3, sq, d), **over.get("q", {}))
    k = FakeTensor((2, 3, sk, d), **over.get("k", {}))
    v = FakeTensor((2, 3, sk, d), **over.get("v", {}))
    return q, k, v


@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_calls_variant_per_head_dim_is_emitted(head_dim, short):
    """The call's overlaps (CALL_OVERLAPS) compile, prove and emit for every head dim it takes,
    on its long- and short-sequence tiles; at D=64 that is the intra-warpgroup overlap
    (wait_group 1 in the K loop)."""
    c = compile_named(NAME, params=call_params(head_dim, False, short=short),
                      target_args={"stages": str(call_stages(head_dim, False, short))})
    assert c.proof.safe
    src = emit_attention(c)
    # HD: the TMA boxes' columns (D=96: two, the second half zeros); S over the head dim's
    # columns and the store of as many where they differ
    box = -(-head_dim // 64) * 64
    assert f"HD = {box}," in src and f"wgmma_rs_m64n{box}k16(" in src
    assert (f"pcat::qk<BM, BN, {head_dim}," in src) == (box != head_dim)
    assert (f"pcat::finish<HDV, pcat::Bf16, {head_dim}>(" in src) == (box != head_dim)
    assert ("wgmma_wait<1>();" in src) == (CALL_OVERLAPS[head_dim]["intra_overlap"] == "true")


def test_the_call_plans_lengths_and_the_folded_scale():
    c = plan_attention(*qkv())
    assert (c.bh, c.sq, c.sk, c.head_dim, c.dtype) == (6, 100, 77, 64, "bf16")
    assert math.isclose(c.scale_log2, LOG2E / 8)
    assert math.isclose(plan_attention(*qkv(), scale=0.5).scale_log2, 0.5 * LOG2E)
    assert plan_attention(*qkv(d=128, q={"dtype": "torch.float16"}, k={"dtype": "torch.float16"},
                               v={"dtype": "torch.float16"})).dtype == "fp16"


@pytest.mark.parametrize("args,kw,needle", [
    (qkv(d=80), {}, "attention: q: head dim 80; supported: 64, 96, 128, 192, 256"),
    (qkv(q={"dtype": "torch.float32"}), {}, "attention: q: dtype torch.float32"),
    (qkv(k={"dtype": "torch.float16"}), {}, "attention: k: dtype torch.float16 differs"),
    (qkv(v={"cuda": False}), {}, "attention: v: a CPU tensor"),
    (qkv(k={"device": "cuda:1"}), {}, "attention: k: on cuda:1"),
    ((FakeTensor((3, 100, 64)),) + qkv()[1:], {}, "attention: q: shape (3, 100, 64)"),
    (qkv(), {"scale": float("nan")}, "attention: scale: nan"),
    (qkv(), {"scale": 0.0}, "attention: scale: 0.0; pass a positive finite float"),
    (qkv(), {"scale": -0.125}, "attention: scale: -0.125; pass a positive finite float"),
    (qkv(sq=0), {}, "attention: q: sequence length 0"),
])
def test_bad_arguments_get_one_line_naming_them(args, kw, needle):
    with pytest.raises(AttentionArgumentError) as info:
        plan_attention(*args, **kw)
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)


@pytest.mark.parametrize("dq,dv,grad,d", [
    (80, 80, False, 96), (80, 80, True, 128),  # Phi-2's head dim: the next the kernels build
    (96, 96, False, 96), (96, 96, True, 128),  # a gradient at 96: the backward's 128
    (192, 128, False, 192), (64, 128, False, 128),  # q/k and v of different head dims
    (192, 128, True, 192),  # no backward holds 192: the call then refuses the gradient
    (32, 32, True, 64), (160, 160, False, 192), (200, 64, True, 256),
    (128, 128, True, 128), (257, 257, False, None), (128, 300, False, None)])
def test_a_head_dim_the_kernels_do_not_build_runs_zero_padded_to_the_next(dq, dv, grad, d):
    assert kernel_head_dim(dq, dv, grad) == d


def test_padding_leaves_the_kernels_head_dims_alone_and_names_a_k_that_differs_from_q():
    plain = {"causal": False, "scale": None, "deterministic": False, "window": None,
             "softcap": None}
    for d in (64, 128):  # the backward's head dims: the call runs as it is, torch untouched
        assert padded_attention(*qkv(d=d), **plain) is None
    q, k, v = FakeTensor((2, 3, 100, 192)), FakeTensor((2, 3, 77, 128)), FakeTensor((2, 3, 77, 128))
    with pytest.raises(AttentionArgumentError) as info:
        padded_attention(q, k, v, **plain)
    assert str(info.value).startswith("attention: k: head dim 128 differs from q's 192")
    # shapes of another rank: the unpadded call names the argument at fault
    assert padded_attention(FakeTensor((3, 100, 80)), k, v, **plain) is None


def test_mismatched_kv_and_heads_that_do_not_group_are_refused():
    q, k, _ = qkv()
    with pytest.raises(AttentionArgumentError, match="attention: v: shape"):
        plan_attention(q, k, FakeTensor((2, 3, 78, 64)))
    q4 = FakeTensor((2, 4, 100, 64))
    for hkv in (3, 8):  # 4 query heads over 3 (or 8) KV heads: no whole group
        kv = FakeTensor((2, hkv, 77, 64))
        with pytest.raises(AttentionArgumentError) as info:
            plan_attention(q4, kv, kv)
        msg = str(info.value)
        assert msg.startswith(f"attention: k: {hkv} heads for q's 4") and "\n" not in msg
    with pytest.raises(AttentionArgumentError, match="attention: k: shape .* batch and head dim"):
        plan_attention(q4, FakeTensor((1, 2, 77, 64)), FakeTensor((1, 2, 77, 64)))


@pytest.mark.parametrize("hq,hkv", [(6, 6), (6, 3), (6, 2), (6, 1), (8, 2)])
def test_grouped_query_heads_read_torchs_kv_head(hq, hkv):
    """Grouped-query attention (torch's SDPA enable_gqa): query head h of batch b reads KV
    head h // (hq / hkv).  The call plans the group, and the kernel's K and V TMA coordinates
    (head and batch, evaluated from the emitted source over the flat [B * H] index) land on
    that head of the rank-4 maps (layout.bhsd_map); the plan and the proof do not change."""
    b, sk = 2, 77
    kv = FakeTensor((b, hkv, sk, 64))
    c = plan_attention(FakeTensor((b, hq, 100, 64)), kv, kv)
    assert (c.bh, c.group) == (b * hq, hq // hkv)
    src = emit_attention(compiled(pingpong=False))
    coords = set(re.findall(r"tma_load_4d\(stage_[kv]\([^;]*c \* 64, t \* BN, ([^,]*), "
                            r"([^;]*)\);", src))
    assert len(coords) == 1  # K and V, in the prologue and the loop, take one head
    (head, batch_of), = coords
    assert "group" in head and "tile_m * BM, bh % H, bh / H);" in src  # Q keeps its own head
    for batch in range(b):
        for h in range(hq):
            at = {"bh": batch * hq + h, "group": c.group, "H": hq}
            got = tuple(eval(e.replace("/", "//"), at)  # noqa: S307 - our own expression
                        for e in (head, batch_of))
            assert got == (h // (hq // hkv), batch), (batch, h)


@pytest.mark.parametrize("causal,align", [(False, None), (True, "top_left"),
                                          ("top_left", "top_left"),
                                          ("bottom_right", "bottom_right")])
def test_the_causal_argument_names_its_diagonal(causal, align):
    c = plan_attention(*qkv(), causal=causal)
    assert c.causal is (align is not None)
    assert c.align == (align or "top_left")


@pytest.mark.parametrize("causal", ["bottom-right", "lower_right", 1, None])
def test_an_unknown_causal_is_one_line_naming_it(causal):
    with pytest.raises(AttentionArgumentError) as info:
        plan_attention(*qkv(), causal=causal)
    msg = str(info.value)
    assert msg.startswith(f"attention: causal: {causal!r}; pass False, True") and "\n" not in msg


def _mutated(c, category, pick, every_consumer=True):
    """``c`` with the mutation(s) of ``category`` that ``pick`` selects applied with
    --allow-unsafe (in every consumer: identical consumers share one emitted program)."""
    from pipeline_core.check.mutate import agent_mutations, mutate_compiled

    picked = [m for m in agent_mutations(c.plan, (category,)) if pick(m)]
    assert picked
    for m in (picked if every_consumer else picked[:1]):
        c = mutate_compiled(c, m, allow_unsafe=True)
    assert not c.proof.safe
    return c


@pytest.mark.parametrize("category,pick,before,after", [
    # a dropped release on the V ring: one arrival fewer per program copy
    ("drop_arrive", lambda m: m.ring == "v_empty" and m.section == "kernel",
     lambda s: s.count("mbar_arrive(v_empty_bar"), lambda n: n - 1),
    # the wait that retires S before the softmax, loosened: a wait_group 1 appears
    ("loosen_counter_wait", lambda m: m.section == "kernel" and m.index < 6,
     lambda s: s.count("wgmma_wait<1>();"), lambda n: n + 1),
    # a flipped parity on the K ring's full barrier
    ("flip_phase_offset", lambda m: m.ring == "k_full" and m.section == "kernel" and m.delta == 1,
     lambda s: s.count("(((rb + t) / 2 + (1)) & 1)"), lambda n: n + 1),
])
def test_a_refused_mutation_reaches_the_kernel_when_forced(category, pick, before, after):
    """What the proof refuses (test_flash_attention.py), emitted with --allow-unsafe, is in the
    kernel text line for line: the emitter writes the plan, it does not repair it."""
    c = compiled(pingpong=False)
    safe, bad = emit_attention(c), emit_attention(_mutated(c, category, pick))
    assert before(bad) == after(before(safe))


def test_a_dropped_named_barrier_reaches_the_kernel_when_forced():
    c = compiled(pingpong=True)
    bad = emit_attention(_mutated(c, "drop_named_arrive", lambda m: m.agent == "consumer0",
                                  every_consumer=False), watchdog=1 << 20)
    safe = emit_attention(c, watchdog=1 << 20)
    assert bad.count("bar.arrive") == safe.count("bar.arrive") - 1
    assert "mbar_wait_bounded(" in bad  # the watchdog turns the hang into a trap on the GPU


@pytest.mark.parametrize("causal,align", [(True, "top_left"), (True, "bottom_right"),
                                          (False, "top_left")])
@pytest.mark.parametrize("bm,bn", [(128, 128), (128, 64), (64, 128)])
def test_the_kernels_tile_bounds_are_the_plans(causal, align, bm, bn):
    """The C expressions the kernel sets KT and FM with, evaluated (C's int division as
    ``//``, which max(0, ...) makes agree on negative quotients), give LoopBounds' trips and
    first_masked for every query block of lengths around the block sizes: causal, and not
    (the key tail's block alone masked)."""
    b = LoopBounds(causal=causal, block_m=bm, block_n=bn, align=align)
    trips, first = (e.replace("/", "//") for e in tile_bounds_exprs(b))
    seqs = (1, 7, 63, 64, 65, 127, 128, 129, 200, 256, 1000)
    for sq in seqs:
        for sk in seqs:
            env = {"Sq": sq, "Sk": sk, "KV_BLOCKS": b.blocks(sk), "min": min, "max": max}
            for i in range(-(-sq // bm)):
                kt = eval(trips, {**env, "tile_m": i})  # noqa: S307 - our own expression
                assert kt == b.trips(i, sq, sk), (sq, sk, i)
                fm = eval(first, {**env, "tile_m": i, "KT": kt})  # noqa: S307
                assert fm == b.first_masked(i, sq, sk), (sq, sk, i)


@pytest.mark.parametrize("causal", [True, False])
def test_the_kernel_takes_the_tile_order_and_declares_it_in_every_agent(causal):
    """The kernel's signature holds the tile order's ``int hg, int snake`` (after the GQA
    group, as the call packs them; the heads and O's strides after them), and the producer
    and the consumers declare the same tile order (tile_order.order_exprs: its C and tile_at
    are held to one map in test_tile_order.py) of the position their loop over the CTA's
    rounds takes (tile_order.POSITION, declared once for the kernel: the snake); causal, in
    groups of hg heads; not causal, head-major from the position."""
    src = emit_attention(compiled(causal=causal))
    assert re.search(r"int BH, int Sq, int Sk, float scale_log2, int group, int hg, int snake, "
                     r"int H,\s+long long o_sb, long long o_sh, long long o_ss\) \{", src)
    decl = "const int " + ", ".join(order_exprs(causal)) + ";"
    producer = src.split("// ---- agent producer")[1].split("// ---- agents consumer")[0]
    consumer = src.split("// ---- agents consumer")[1]
    assert producer.count(decl) == consumer.count(decl) == 1
    assert all(src.count(line.strip()) == 1 for line in POSITION[:2])
    head = loop_head("tile < TILES")
    assert src.count(head) == 2
    for agent in (producer, consumer):
        # the order is declared inside the agent's loop over the persistent tiles
        assert agent.index(head) < agent.index(decl)
    assert ("hg" in decl) == causal and "snake" not in decl


def _body(src: str) -> str:
    """The kernel an emitted source defines (after the headers and device functions)."""
    return src.split('extern "C" __global__')[1]


def _device(src: str) -> str:
    """The family's device functions as pasted in an emitted source (attention.cuh)."""
    return "namespace pcat {" + src.split("namespace pcat {")[1].split("}  // namespace pcat")[0]


@pytest.mark.parametrize("intra", [True, False])
def test_causal_kernel_bounds_each_tile_and_masks_only_its_masked_blocks(intra):
    """-p causal=true: each output tile sets its own KT (producer and consumers alike, so the
    rings' positions rb agree) and the consumers its first masked block FM; the softmax runs the
    causal mask (key > row or past Sk -> -inf) only from FM on, the blocks before keep every
    key.  Without causal the tiles share one KT and the mask is the key tail's, from the same
    FM (the last block, when Sk is not a multiple of block_n)."""
    src = emit_attention(compiled(causal=True, intra_overlap=intra))
    assert src.count("KT = max(0, min(KV_BLOCKS,") == 2  # producer, consumers
    assert src.count("FM = max(0, ") == 1
    assert "int KT = KV_BLOCKS, FM = KV_BLOCKS;" in src
    softmax = [x for x in _body(src).split("\n") if "pcat::softmax<" in x]
    assert softmax and all("pcat::Causal{Sk, 0}, t, FM, scale_log2);" in x for x in softmax)
    header = _device(src)
    assert "return key < sk && key <= last;" in header and "return row + offset;" in header
    masked, unmasked = header.split("    if (j >= first_masked)\n")[1].split("    else\n")
    assert "masked_row_max<BN>(s, x0, x1, mask, j, r.row());" in masked
    assert "row_max<BN>(s, x0, x1);" in unmasked.split("\n")[0]
    assert "mask" not in header.split("void row_max(")[1].split("\n}\n")[0]
    plain = emit_attention(compiled(causal=False, intra_overlap=intra))
    assert "pcat::Causal" not in plain and "KT = max(0, min(KV_BLOCKS," not in plain
    assert "KT = KV_BLOCKS, FM = max(0, KT - (Sk % 128 != 0));" in plain
    softmax = [x for x in _body(plain).split("\n") if "pcat::softmax<" in x]
    assert softmax and all("pcat::KeyTail{Sk}, t, FM, scale_log2);" in x for x in softmax)


@pytest.mark.skipif(nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_calls_kernels_compile_without_spills_or_serialized_wgmma(head_dim, causal,
                                                                      tmp_path):
    """Every long-sequence kernel the call compiles (its tile per head dim and causal,
    CALL_TILES: KV blocks of 176 keys, 3 consumers of 160 registers) builds with no spill; its S
    wgmma is as wide as the tile's KV block (the short-sequence tiles:
    test_the_calls_short_kernels_build_without_spills_and_issue_the_plans_wgmmas)."""
    params = call_params(head_dim, causal)
    c = compile_named(NAME, params=params,
                      target_args={"stages": str(call_stages(head_dim, causal))})
    cu, cubin = tmp_path / "fa.cu", tmp_path / "fa.cubin"
    cu.write_text(emit_attention(c))
    proc = subprocess.run([nvcc() or "nvcc", "-cubin", GENCODE, "-std=c++17", "-Xptxas=-v",
                           "-o", str(cubin), str(cu)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "serialized" not in proc.stderr and "C7508" not in proc.stderr
    assert 'variable "key"' not in proc.stderr  # the unmasked blocks' path declares no key
    if sass_command() is not None:
        sass = subprocess.run([*(sass_command() or []), str(cubin)], capture_output=True,
                              text=True, check=True).stdout
        assert f"HGMMA.64x{params['block_n']}x16.F32" in sass
        assert not re.search(r"\b(LDL|STL)\b", sass)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_the_call_compiles_the_causal_bounds_it_was_asked_for(head_dim):
    """causal=True is planned (no refusal) and compiles the schedule with the plan's causal
    bounds, top-left as torch's is_causal; causal=False compiles none."""
    assert plan_attention(*qkv(), causal=True).causal is True
    assert plan_attention(*qkv()).causal is False
    for causal in (True, False):
        c = compile_named(NAME, params=call_params(head_dim, causal),
                          target_args={"stages": str(call_stages(head_dim, causal))})
        assert c.plan.trip_rule.causal is causal and c.plan.trip_rule.align == "top_left"
        assert ("KT = max(0, min(KV_BLOCKS," in emit_attention(c)) is causal


def test_causal_without_the_plans_bounds_is_refused():
    import attrs

    c = compiled(causal=True)
    c = attrs.evolve(c, plan=attrs.evolve(c.plan, trip_rule=None))
    with pytest.raises(ProgramError, match="the plan records no causal bounds"):
        emit_attention(c)


def test_the_package_exports_the_call_and_importing_it_loads_no_gpu_package():
    """README's example imports ``attention`` from the package: naming it must not pull in torch
    (the call imports torch when it runs)."""
    code = ("import sys, pipeline_core_schedules_attention as p; f = p.attention;"
            "e = p.AttentionArgumentError;"
            "print(sorted(m for m in ('torch', 'cupy', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


GUARD = "const float z = GUARD && x == -INFINITY ? 0.f : x;"


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_bottom_right_causal_offsets_the_diagonal_and_guards_rows_with_no_key(head_dim):
    """causal="bottom_right" compiles -p align=bottom_right: the plan's bounds carry it, the
    kernel's KT, FM and row limit add Sk - Sq (LoopBounds.offset), and the softmax takes the
    exponentials of a row whose max is still -inf (it sees no key) against 0, so that row's
    P, sum and O are 0 rather than exp2(-inf - -inf) = NaN.  Top-left kernels (every row sees
    key 0) carry no guard and stay as they were."""
    c = compile_named(NAME, params=call_params(head_dim, True, "bottom_right"),
                      target_args={"stages": str(call_stages(head_dim, True))})
    assert c.proof.safe and c.plan.trip_rule.align == "bottom_right"
    src = emit_attention(c)
    bn = call_params(head_dim, True)["block_n"]  # 112 at D=192, 80 at D=256
    bm = call_params(head_dim, True)["block_m"]  # 192 at D=64
    assert f"+ (Sk - Sq) + 1 + {bn} - 1) / {bn}" in src  # KT
    assert f"(tile_m * {bm} + (Sk - Sq) + 1) / {bn}" in src  # FM
    softmax = [x for x in _body(src).split("\n") if "pcat::softmax<" in x]
    # the row's last key is row + Sk - Sq; the guard is the softmax's template argument
    assert softmax and all("pcat::PackP::later, true>(sacc, pk, rows, pcat::Causal{Sk, (Sk - Sq)}"
                           in x for x in softmax), softmax
    header = _device(src)
    assert GUARD in header
    assert "c = ex2_approx(m - z);" in header  # advance_one, each row's
    assert "z0 = advance_one<GUARD>(r.m0, r.c0, x0, scale_log2);" in header
    assert "fmaf(s[4 * c], scale_log2, -z0)" in header
    assert "-x0)" not in header and "-x1)" not in header  # none against the raw max
    top = emit_attention(compile_named(NAME, params=call_params(head_dim, True),
                                       target_args={"stages": str(call_stages(head_dim, True))}))
    softmax = [x for x in _body(top).split("\n") if "pcat::softmax<" in x]
    assert softmax and all("pcat::PackP::later, false>(sacc, pk, rows, pcat::Causal{Sk, 0}"
                           in x for x in softmax), softmax
    assert "(Sk - Sq)" not in _body(top)



# --- the short-sequence tiles (call.SHORT_TILES): a double-buffered Q --------------------------

@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
@pytest.mark.parametrize("short", [False, True])
def test_the_calls_d64_kernels_prove_safe_with_their_q_ring(short, causal, align):
    """The call's D=64 kernels as it builds them (``call._source``): the short-sequence tile
    compiles SAFE with Q's once ring two stages deep (both its full and empty barriers), at
    either causal alignment, and emits a Q buffer per stage; the long one keeps one."""
    c, src = call._source(64, "bf16", causal, align, short)
    assert c.proof.safe
    assert c.plan.trip_rule.causal is causal and c.plan.trip_rule.align == align
    depth = 2 if short else 1
    assert c.plan.ring("q_full").stages == c.plan.ring("q_empty").stages == depth
    assert c.plan.ring("q_full").once and not c.plan.ring("k_full").once
    assert c.plan.ring("k_full").stages == call_stages(64, causal, short)
    assert f"Q_STAGES = {depth};" in src and f"q_full_bar(o % {depth})" in src


def test_the_call_takes_the_short_tile_up_to_short_keys():
    """The line is the key length (SHORT_KEYS inclusive), whatever the query length."""
    assert plan_attention(*qkv(sk=SHORT_KEYS)).short
    assert not plan_attention(*qkv(sk=SHORT_KEYS + 1)).short
    assert plan_attention(*qkv(sq=4 * SHORT_KEYS, sk=77)).short
    assert not plan_attention(*qkv(sq=77, sk=4 * SHORT_KEYS), causal="bottom_right").short


@pytest.mark.parametrize("causal", [False, True])
def test_the_short_tile_at_d64_double_buffers_q_on_a_ring_of_three(causal):
    """At D=64 the short-sequence tile is 2 consumers on KV blocks of 128, Q double-buffered,
    a ring of 3; the long one is CALL_TILES' on a ring of 2 (CALL_STAGES) with one Q.  The ring
    depth is -T stages, never a -p parameter."""
    short, long = call_params(64, causal, short=True), call_params(64, causal)
    assert (short["q_stages"], short["consumers"], short["block_m"], short["block_n"]) == (
        "2", "2", "128", "128")
    assert call_stages(64, causal, short=True) == 3
    assert long.items() >= CALL_TILES[64, causal].items() and "q_stages" not in long
    assert call_stages(64, causal) == CALL_STAGES == 2
    for params in (short, long):
        assert "stages" not in params
        assert params["head_dim"] == "64" and params["causal"] == str(causal).lower()
        assert params["intra_overlap"] == CALL_OVERLAPS[64]["intra_overlap"]
    assert call_params(64, True, "bottom_right", short=True)["align"] == "bottom_right"


def test_d128_short_sequences_take_q_double_buffered_or_a_ring_of_three():
    """At D=128 the short tiles differ from the long ones: not causal, KV blocks of 128 (not
    176) with Q double-buffered on a ring of 2 (two Q buffers beside blocks of 176 do not fit);
    causal, the long tile on a ring of 3 with one Q (a second Q beside three stages does not
    fit)."""
    short, long = call_params(128, False, short=True), call_params(128, False)
    assert (long["block_n"], short["block_n"], short["q_stages"]) == ("176", "128", "2")
    assert "q_stages" not in long and "stages" not in short
    assert call_stages(128, False, short=True) == call_stages(128, False) == CALL_STAGES
    short, long = call_params(128, True, short=True), call_params(128, True)
    assert short == long and "q_stages" not in short and "stages" not in short
    assert call_stages(128, True, short=True) == 3 and call_stages(128, True) == CALL_STAGES


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_the_calls_d128_causal_short_kernel_proves_safe_on_a_ring_of_three(align):
    """The call's D=128 causal short-sequence kernel (``call._source``): SAFE at either
    alignment, K and V on a ring of 3, one Q; its shared memory (one Q and 3 K and V stages of
    128 x 128) fits the H100's 227 KiB; not causal, the short kernel is the long one."""
    c, src = call._source(128, "bf16", True, align, True)
    assert c.proof.safe and c.plan.trip_rule.align == align
    assert c.plan.ring("k_full").stages == c.plan.ring("v_full").stages == 3
    assert c.plan.ring("q_full").stages == 1
    g = c.launch.geometry
    assert (g.block_m, g.block_n, g.consumers, g.q_stages, g.stages) == (128, 128, 2, 1, 3)
    assert "STAGES = 3, Q_STAGES = 1;" in src and g.smem_bytes <= 227 * 1024


def test_the_calls_d128_short_kernel_not_causal_double_buffers_q_on_blocks_of_128():
    """Not causal, the D=128 short kernel: SAFE, Q on a ring of 2, K and V on 2 stages of
    128 x 128, within the H100's 227 KiB, and a source of its own (the long one has blocks of
    176 and one Q)."""
    c, src = call._source(128, "bf16", False, "top_left", True)
    assert c.proof.safe and c.plan.ring("q_full").stages == 2
    g = c.launch.geometry
    assert (g.block_n, g.q_stages, g.stages) == (128, 2, 2) and g.smem_bytes <= 227 * 1024
    assert src != call._source(128, "bf16", False, "top_left", False)[1]


def test_a_call_params_stages_wins_the_ring_depth_and_stays_out_of_the_p_parameters(
        monkeypatch):
    """CALL_PARAMS (a benchmark's ablation) is put over the call's own tile, long or short:
    its ``stages`` sets -T stages, and -p gets only the schedule's parameters."""
    monkeypatch.setitem(call.CALL_PARAMS, "stages", "4")
    monkeypatch.setitem(call.CALL_PARAMS, "q_stages", "1")
    for d, causal, short in ((64, False, True), (64, True, False), (128, False, True)):
        assert call_stages(d, causal, short) == 4
        params = call_params(d, causal, short=short)
        assert "stages" not in params and params["q_stages"] == "1"
    c = compile_named(NAME, params=call_params(64, False, short=True),
                      target_args={"stages": str(call_stages(64, False, True))})
    assert c.plan.ring("k_full").stages == 4 and c.plan.ring("q_full").stages == 1


def test_a_double_buffered_q_is_loaded_and_read_in_the_output_tiles_stage():
    """-p q_stages=2: the producer waits for the release of output tile o's Q stage (o % 2,
    freed by tile o - 2) and loads there; each consumer tile reads Q from the stage o % Q_STAGES
    and releases it.  Both the tile with KV blocks and the one without (KT == 0) do."""
    src = emit_attention(compiled(head_dim=64, q_stages=2, pingpong=False))
    assert "STAGES = 2, Q_STAGES = 2;" in src
    load = ("tma_load_4d(stage_q(o % 2) + c * BM * 128, &tmQ, q_full_bar(o % 2), c * 64, "
            "tile_m * BM, bh % H, bh / H);")
    release_wait = "mbar_wait(q_empty_bar((o % 2)), ((o / 2 + (-1)) & 1));"
    assert src.count(load) == src.count(release_wait) == 2
    producer = src.split("// ---- agent producer")[1].split("// ---- agents consumer")[0]
    for part in producer.split("} else {")[:2]:  # the KT == 0 branch, then the other
        assert part.index(release_wait) < part.index("mbar_expect_tx(q_full_bar((o % 2)), "
                                                     "16384u);") < part.index(load)
    assert "stage_q(o % 1)" not in src and "o % Q_STAGES" not in producer
    consumer = src.split("// ---- agents consumer")[1]
    assert "const u32 q_smem = stage_q(o % Q_STAGES);" in consumer
    assert "pcat::qk<BM, BN, HD, wgmma_m64n128k16>(sacc, q_smem, stage_k(" in consumer
    assert consumer.count("mbar_wait(q_full_bar((o % 2)), ((o / 2 + (0)) & 1));") == 2
    assert consumer.count("if (lane == 0) mbar_arrive(q_empty_bar((o % 2)));") == 2


def _layout(src: str) -> tuple[dict[str, int], list[tuple[str, int, int]], int]:
    """The shared memory an emitted kernel lays out, evaluated from its source (ring 0): its
    constants, (what, start, bytes) of each Q, K and V stage and each mbarrier, and the dynamic
    shared memory its header asks the launch for."""
    env: dict[str, int] = dict(zip(("BM", "BN", "HD", "HDV", "STAGES", "Q_STAGES"), map(
        int, re.search(r"constexpr int BM = (\d+), BN = (\d+), HD = (\d+), HDV = (\d+), "
                       r"STAGES = (\d+), Q_STAGES = (\d+);", src).groups())))
    for name, expr in re.findall(r"(Q_BYTES|K_BYTES|V_BYTES) = ([^,;]+)[,;]", src):
        env[name] = eval(expr, dict(env))  # noqa: S307 - our own expression
    env["ring"] = 0
    regions = []
    for x, count in (("q", env["Q_STAGES"]), ("k", env["STAGES"]), ("v", env["STAGES"])):
        expr = re.search(rf"auto stage_{x} = \[&\]\(int s\) \{{ return ([^;]+); \}};", src)[1]
        size = env[f"{x.upper()}_BYTES"]
        regions += [(f"{x}{s}", eval(expr, {**env, "s": s}), size)  # noqa: S307
                    for s in range(count)]
    bars, names = re.search(r"const u32 bars = ([^;]+);  // (.+)", src).groups()
    env["bars"] = eval(bars, dict(env))  # noqa: S307
    depths = dict(re.findall(r"(\w+)\[0\.\.(\w+)\)", names))  # ring -> its depth's constant
    inits = {name: depth for depth, block in re.findall(
        r"for \(int s = 0; s < (\w+); \+\+s\) \{\n((?:\s+mbar_init\(\w+_bar\(s\), \d+\);\n)+)",
        src) for name in re.findall(r"mbar_init\((\w+)_bar", block)}
    assert inits == depths  # every ring's mbarriers initialised, as many as the layout has
    for name, expr in re.findall(r"auto (\w+)_bar = \[&\]\(int s\) \{ return ([^;]+); \};", src):
        at = expr.replace("8u", "8")
        regions += [(f"{name}_bar{s}", eval(at, {**env, "s": s}), 8)  # noqa: S307
                    for s in range(env[depths[name]])]
    smem = int(re.search(r"shared memory (\d+) bytes", src)[1])
    return env, regions, smem


@pytest.mark.parametrize("params,stages", [
    ({"head_dim": 64}, 2),
    ({"head_dim": 64, "q_stages": 2}, 2),
    ({"head_dim": 64, "q_stages": 2, "block_n": 64}, 4),
    ({"head_dim": 128, "q_stages": 2}, 2),
    ({"head_dim": 64, "q_stages": 2, "consumers": 3, "block_m": 192, "consumer_registers": 160},
     3),
    ({"head_dim": 192, "head_dim_v": 128}, 2),  # V's own head dim: its stages narrower than K's
])
def test_the_kernels_q_k_v_stages_and_mbarriers_are_disjoint_and_fit_its_shared_memory(
        params, stages):
    """The layout the emitted kernel computes (its stage_q / stage_k / stage_v and mbarrier
    addresses, evaluated) against the shared memory the schedule declares (the header's, the
    launch's): no two stages or mbarriers overlap, every Q, K and V stage starts on the
    128-byte swizzle's 1024-byte atom, and all of it fits after aligning a dynamic base up to
    1023 bytes short of it.  A Q ring of 2 is two Q buffers, one per output tile parity."""
    c = compile_named(NAME, params={k: str(v).lower() for k, v in params.items()},
                      target_args={"stages": str(stages)})
    env, regions, smem = _layout(emit_attention(c))
    assert smem == c.launch.geometry.smem_bytes
    assert env["Q_STAGES"] == params.get("q_stages", 1)
    assert len([r for r in regions if r[0].startswith("q") and not r[0].startswith("q_")]) == (
        env["Q_STAGES"])
    spans = sorted((start, start + size, what) for what, start, size in regions)
    for (_, end, what), (start, _, nxt) in zip(spans, spans[1:]):
        assert end <= start, (what, nxt)
    assert all(start % 1024 == 0 for what, start, _ in regions if "_bar" not in what)
    assert spans[-1][1] + 1023 <= smem


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
@pytest.mark.parametrize("head_dim,causal", sorted(SHORT_TILES))
def test_the_calls_short_kernels_build_without_spills_and_issue_the_plans_wgmmas(head_dim, causal,
                                                                                 tmp_path):
    """The call's short-sequence kernels (D=64: Q double-buffered, a ring of 3; D=128 and 96
    causal: a ring of 3, one Q; not causal: Q double-buffered, a ring of 2) build for sm_90a
    with no spill and issue the plan's wgmmas (:func:`_sass_of_the_plans_wgmmas`)."""
    c, src = call._source(head_dim, "bf16", causal, "top_left", True)
    g = c.launch.geometry
    want = {64: (2, 3, 2), 128: (1, 3, 2) if causal else (2, 2, 2)}[-(-head_dim // 64) * 64]
    assert (g.q_stages, g.stages, g.consumers) == want
    sass = _sass_of_the_plans_wgmmas(c, src, tmp_path)
    # the intra-warpgroup overlap's wait for S alone (wait_group 1) and the full waits
    assert set(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)) == {"0x0", "0x1"}


def _sass_of_the_plans_wgmmas(c, src: str, tmp_path) -> str:
    """``src`` (emitted from ``c``) built for sm_90a with no spill and no serialized wgmma, and
    its SASS, which issues head_dim/16 HGMMAs of S (64 x block_n, from shared memory) and
    block_n/16 of PV (64 x the boxes' columns, P from registers: D=96's 128, V's last 32 zeros)
    for each S and PV step of the consumer's program (identical consumers share one program)."""
    g = c.launch.geometry
    proc, cubin = compile_cubin(src, tmp_path, f"d{g.head_dim}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr
    assert "serialized" not in proc.stderr and "C7508" not in proc.stderr
    sass = sass_of(cubin)
    if sass is None:
        pytest.skip("no SASS disassembler (nvdisasm or cuobjdump)")
    assert not re.search(r"\b(LDL|STL)\b", sass)
    prog = c.plan.program("consumer0")
    tags = [c.body[s.op].tag for it in (*prog.prologue, prog.kernel, *prog.epilogue) for s in it
            if s.kind == StepKind.OP]
    s_steps, pv_steps = tags.count(T.WGMMA_S), tags.count(T.WGMMA_PV)
    assert s_steps and pv_steps
    ss = re.findall(rf"HGMMA\.64x{g.block_n}x16\.F32(?:\.BF16)? R\d+, gdesc\[UR\d+\]", sass)
    rs = re.findall(rf"HGMMA\.64x{g.v_box_cols}x16\.F32(?:\.BF16)? R\d+, R\d+, gdesc\[UR\d+\]"
                    r"\.tnspB", sass)
    assert len(ss) == s_steps * g.head_dim // 16 and len(rs) == pv_steps * g.block_n // 16
    assert len(re.findall(r"HGMMA\.", sass)) == len(ss) + len(rs)
    return sass


@pytest.mark.parametrize("params,dtype", [
    ({}, "bf16"), ({"intra_overlap": "true"}, "fp16"), ({"causal": "true"}, "bf16"),
    ({"causal": "true", "align": "bottom_right", "intra_overlap": "true"}, "fp16")])
def test_the_kernel_calls_the_headers_device_functions_and_writes_no_math_of_its_own(params,
                                                                                      dtype):
    """Issue 34: the family's device math is ``attention.cuh`` (package data), device functions
    the frame's op steps call with each variant's choices as template arguments; the emitter
    patches no text (no ``.replace`` macro) and the kernel's body holds no softmax, shuffle or
    mask of its own."""
    from importlib import resources
    from pathlib import Path

    import pipeline_core_schedules_attention.emit_attention as module

    assert ".replace(" not in Path(module.__file__).read_text(encoding="utf-8")
    header = resources.files("pipeline_core_schedules_attention").joinpath(
        "attention.cuh").read_text(encoding="utf-8")
    src = emit_attention(compiled(**params), dtype=dtype)
    assert header.replace("#pragma once\n", "") in src  # pasted whole, its include guard dropped
    body = _body(src)
    for fn in ("start", "qk", "softmax", "rescale", "pv", "finish"):
        assert f"pcat::{fn}<" in body, fn
        assert re.search(rf"__device__ __forceinline__ \w+ {fn}\(", header), fn
    for math in ("ex2_approx(", "__shfl_xor_sync", "fmaxf(", "fence_operand(", "INFINITY",
                 "pack"):
        assert math not in body, math


#: the head dims past 64 and 128 (issue 37): D=96 a box and a half, D=192 and D=256 whole boxes
NEW_HEAD_DIMS = (96, 192, 256)


@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
@pytest.mark.parametrize("head_dim", NEW_HEAD_DIMS)
def test_each_new_head_dims_call_tiles_are_proven_within_their_budgets(head_dim, causal, align):
    """Every tile the call compiles at D=96, 192 and 256 (CALL_TILES, and D=96's SHORT_TILES,
    causal or not, either alignment) is proven SAFE, fits the CTA's shared memory and the
    consumers' 240 registers by the schedule's estimate, and reads the head dim in whole
    64-column TMA boxes: D=96 takes D=128's tiles on two boxes (the second half zeros), D=192
    and D=256 FA3's KV blocks of 112 and 80 keys on 3 and 4."""
    from pipeline_core_nvidia_h100.kit_api import H100_SXM

    for short in ((False, True) if (head_dim, causal) in SHORT_TILES else (False,)):
        params = call_params(head_dim, causal, align, short)
        c = compile_named(NAME, params=params,
                          target_args={"stages": str(call_stages(head_dim, causal, short))})
        assert c.proof.safe, (head_dim, causal, short)
        g = c.launch.geometry
        assert (g.block_m, g.block_n, g.consumers) == (
            128, {96: 128 if causal or short else 176, 192: 112, 256: 80}[head_dim], 2)
        assert g.intra_overlap and not g.pingpong
        assert g.box_cols == {96: 128, 192: 192, 256: 256}[head_dim]
        assert g.q_bytes == g.block_m * g.box_cols * 2
        assert g.smem_bytes <= H100_SXM.smem_per_cta_optin
        assert g.consumer_registers_needed <= g.consumer_registers == 240
        assert c.plan.trip_rule.align == align and c.plan.trip_rule.causal is causal


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
@pytest.mark.parametrize("head_dim,causal,dtype", [(96, False, "bf16"), (96, True, "fp16"),
                                                   (192, False, "fp16"), (192, True, "bf16"),
                                                   (256, False, "bf16"), (256, True, "fp16")])
def test_the_new_head_dims_build_without_spills_and_run_the_head_dims_k_steps(head_dim, causal,
                                                                              dtype, tmp_path):
    """The call's long kernels at D=96, 192 and 256 build for sm_90a with no spill and no
    serialized wgmma; the SASS runs S over the head dim (D/16 k steps of 64 x block_n each,
    6 at D=96, not D=128's 8) and PV over the boxes' columns (block_n/16 of 64 x box_cols),
    per S and PV step of the consumer's program; D=96 stores 96 columns of O."""
    c, src = call._source(head_dim, dtype, causal, "bottom_right" if causal else "top_left")
    g = c.launch.geometry
    assert ("pcat::finish<HDV, pcat::" in src
            and (f", {head_dim}>(oacc, rows," in src) == (g.box_cols != head_dim))
    _sass_of_the_plans_wgmmas(c, src, tmp_path)


@pytest.mark.parametrize("head_dim", [d for d in NEW_HEAD_DIMS if d > 128])
def test_a_call_needing_a_gradient_at_a_head_dim_with_no_backward_is_one_line(head_dim,
                                                                               monkeypatch):
    """D=192 and 256 have a forward and no backward (bwd_schedule.BWD_HEAD_DIMS), and no
    backward's head dim holds them: a call whose q, k or v needs a gradient is refused before
    its forward runs, in one line naming the head dim and the way round (no_grad); without a
    gradient the check passes on to the call's own.  (D=96 runs its gradient padded to 128:
    the next test.)"""
    import types

    grad = {"on": True}
    fake = types.SimpleNamespace(is_grad_enabled=lambda: grad["on"])
    monkeypatch.setitem(sys.modules, "torch", fake)
    q, k, v = qkv(d=head_dim)
    k.requires_grad = True
    with pytest.raises(AttentionArgumentError) as info:
        call.attention(q, k, v)
    msg = str(info.value)
    assert msg.startswith(f"attention: q: head dim {head_dim} has no backward yet (built for "
                          "64, 128); run the forward under torch.no_grad()") and "\n" not in msg
    assert "pad q, k and v to D=128" not in msg  # nothing below 192's fits the backward
    # the backward's own refusal (a direct call of the op at 96, past attention()'s padding)
    # still names the padding attention() now does itself
    assert "pad q, k and v to D=128 with zeros" in call.no_backward(96)
    grad["on"] = False  # no gradient: past the refusal (to the kit's call, which needs torch)
    with pytest.raises(Exception) as other:
        call.attention(q, k, v)
    assert "no backward" not in str(other.value)
    assert call.no_backward(64) is call.no_backward(128) is None


@pytest.mark.parametrize("dq,dv,grad,d", [(96, 96, True, 128), (80, 80, False, 96),
                                          (160, 128, False, 192), (64, 128, True, 128)])
def test_a_head_dim_off_the_kernels_runs_zero_padded_and_sliced(dq, dv, grad, d, monkeypatch):
    """attention() pads q and k (and v) with zero columns to kernel_head_dim, passes q's own
    scale, and takes the output's first dv columns; the padded call is the kernels' own."""
    import types

    pads, calls = [], []

    def pad(t, widths):
        pads.append(widths)
        return FakeTensor((*t.shape[:3], t.shape[3] + widths[1]))

    class Out:
        def __getitem__(self, index):
            calls.append(("slice", index))
            return "sliced"
    fake = types.SimpleNamespace(is_grad_enabled=lambda: grad,
                                 nn=types.SimpleNamespace(functional=types.SimpleNamespace(
                                     pad=pad)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "torch.nn", fake.nn)
    monkeypatch.setitem(sys.modules, "torch.nn.functional", fake.nn.functional)
    real = call.attention

    def inner(q, k, v, **kw):
        if q.shape[3] == dq and v.shape[3] == dv:
            return real(q, k, v, **kw)
        calls.append((q.shape[3], k.shape[3], v.shape[3], kw["scale"]))
        return Out()
    monkeypatch.setattr(call, "attention", inner)
    q, k, v = FakeTensor((2, 3, 100, dq)), FakeTensor((2, 3, 77, dq)), FakeTensor((2, 3, 77, dv))
    q.requires_grad = grad
    assert inner(q, k, v, causal=True) == "sliced"
    assert pads == [(0, d - dq), (0, d - dq), (0, d - dv)]
    assert calls == [(d, d, d, dq ** -0.5), ("slice", (Ellipsis, slice(None, dv)))]


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
@pytest.mark.parametrize("head_dim", NEW_HEAD_DIMS)
def test_the_new_head_dims_windowed_and_capped_kernels_build_without_spills(head_dim, tmp_path):
    """A window and the softcap at D=96, 192 and 256 compile SAFE and build with no spill; at
    D=256 the softcap's kernel takes LEAN_TILES' KV blocks of 64 (80 spills there), the plain
    and windowed ones FA3's 80."""
    for causal, align, window, cap in ((True, "bottom_right", (16, -1), True),
                                       (False, "bottom_right", (128, 128), False)):
        c, src = call._source(head_dim, "fp16", causal, align, False, window, cap)
        assert c.proof.safe
        assert c.launch.geometry.block_n == (64 if head_dim == 256 and cap else
                                             int(CALL_TILES[head_dim, True]["block_n"]))
        proc, _ = compile_cubin(src, tmp_path, f"w{head_dim}{int(cap)}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr, (window, cap)
        assert "serialized" not in proc.stderr


@pytest.mark.parametrize("params", [{}, {"causal": "true", "align": "bottom_right"},
                                    {"head_dim": "64", "softcap": "true"}])
def test_a_call_that_needs_no_lse_gets_a_kernel_that_stores_none_and_keeps_the_rest(params):
    """``-p lse=false`` (a call with no gradient): the finish passes a null LSE, which the
    compiler then drops with the store; every other line is the LSE kernel's, which the call's
    forward under autograd runs (call._kernel_key keeps the two apart)."""
    with_lse = emit_attention(compiled(**params))
    without = emit_attention(compiled(**params, lse="false"))
    finish = [ln for ln in with_lse.splitlines() if "pcat::finish<" in ln]
    assert len(finish) == 1 and finish[0].endswith(", LSE, bh, Sq);")
    assert finish[0].replace(", LSE, bh, Sq);", ", nullptr, bh, Sq);") in without.splitlines()
    assert ([ln for ln in with_lse.splitlines() if "pcat::finish<" not in ln]
            == [ln for ln in without.splitlines() if "pcat::finish<" not in ln])


@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
def test_v_s_own_head_dim_runs_on_a_kernel_of_its_own_proven_within_its_budgets(causal, align):
    """DeepSeek's MLA prefill (q and k 192, v 128) is not padded: plan_attention keeps v's head
    dim (the output [B, H, Sq, 128] in q's layout), and the call compiles -p head_dim_v=128 on
    VALUE_TILES' 128 x 128, proven SAFE: K's stages of 192 columns, V's of 128 (the V ring's
    expected bytes), O and the PV wgmma 128 wide, within the CTA's shared memory and the
    consumers' registers.  A pair without a kernel is refused in one line naming v."""
    from pipeline_core_nvidia_h100.kit_api import H100_SXM

    q, k, v = (FakeTensor((2, 4, 100, 192)), FakeTensor((2, 2, 77, 192)),
               FakeTensor((2, 2, 77, 128)))
    plain = {"causal": causal, "scale": None, "deterministic": False, "window": None,
             "softcap": None}
    assert padded_attention(q, k, v, **plain) is None  # the kernel's own: torch untouched
    c = plan_attention(q, k, v, causal=align if causal else False)
    assert (c.head_dim, c.head_dim_v, c.v_dim) == (192, 128, 128)
    assert c.out_strides == (4 * 100 * 128, 100 * 128, 128, 1) and not c.short
    compiled_ = compile_named(NAME, params=call_params(192, causal, align, head_dim_v=128),
                              target_args={"stages": str(call_stages(192, causal,
                                                                     head_dim_v=128))})
    assert compiled_.proof.safe
    g = compiled_.launch.geometry
    assert (g.block_m, g.block_n, g.head_dim, g.v_dim, g.box_cols, g.v_box_cols) == (
        128, 128, 192, 128, 192, 128)
    full = {r.name: r.tx_bytes for r in compiled_.plan.rings}
    assert (full["k_full"], full["v_full"]) == (128 * 192 * 2, 128 * 128 * 2)
    assert g.smem_bytes <= H100_SXM.smem_per_cta_optin
    assert g.consumer_registers_needed <= g.consumer_registers
    with pytest.raises(AttentionArgumentError) as info:
        plan_attention(FakeTensor((2, 4, 100, 128)), FakeTensor((2, 2, 77, 128)),
                       FakeTensor((2, 2, 77, 64)))
    assert str(info.value).startswith("attention: v: head dim 64, q's 128: a kernel takes v's "
                                      "own head dim at 192 / 128")


@pytest.mark.needs_nvcc  # skipped or failed without nvcc: conftest.py
@pytest.mark.parametrize("causal,dtype", [(False, "bf16"), (True, "fp16")])
def test_v_s_own_head_dim_builds_without_spills_and_runs_pv_at_v_s_width(causal, dtype,
                                                                        tmp_path):
    """The 192 / 128 kernel builds for sm_90a with no spill and no serialized wgmma; its SASS
    runs S over 192 columns (12 k steps of 64 x 128) and PV at V's 128 (64 x 128 per k step),
    and it loads and stores V's and O's two boxes, not K's three."""
    c, src = call._source(192, dtype, causal, "bottom_right" if causal else "top_left",
                          head_dim_v=128)
    assert "HD = 192, HDV = 128" in src and "pcat::finish<HDV, pcat::" in src
    assert "c < HDV / 64; ++c) pcat::tma_load_4d(stage_v(" in src
    _sass_of_the_plans_wgmmas(c, src, tmp_path)


class _SymDim(int):
    """A dimension as torch.compile may trace it (a SymInt after a recompile made it dynamic):
    compares and converts like an int, but cannot be hashed."""

    __hash__ = None  # type: ignore[assignment]


def test_traced_head_dims_that_cannot_be_hashed_still_pick_the_kernel():
    """Under torch.compile a head dim that changed between two compiles is a SymInt, which a
    dict lookup cannot hash (found on the H200: attention_traced.py's 192 / 128 after an 80
    compiled at the same line failed with 'unhashable type').  The padding rule and the plan
    read head dims as ints, so v's own head dim is still run by its kernel."""
    shape = lambda *dims: FakeTensor(tuple(_SymDim(d) for d in dims))  # noqa: E731
    q, k, v = shape(2, 4, 100, 192), shape(2, 2, 77, 192), shape(2, 2, 77, 128)
    with pytest.raises(TypeError):
        hash(q.shape[-1])
    plain = {"causal": False, "scale": None, "deterministic": False, "window": None,
             "softcap": None}
    assert padded_attention(q, k, v, **plain) is None
    assert plan_attention(q, k, v).head_dim_v == 128
