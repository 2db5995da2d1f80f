"""``attention()`` differentiable (autograd.py) and the backward's preprocess and postprocess
(bwd_prepost.py) on the CPU: torch, the kernels' builds and the launches are the stand-ins of
test_call_launch.py, and the main backward kernel a stand-in of the contract's
``bwd_call.attention_bwd_main`` (here only), so what is tested is the host logic: the ops
registered with the backward on the forward, what the forward saves (its shapes and dtypes),
what the backward's three launches are handed, and the refusals, one line each."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pipeline_core_nvidia_h100.kit import call as kit_call
from pipeline_core_nvidia_h100.kit.call import Built
from pipeline_core_nvidia_h100.toolchain import GENCODE, nvcc

from pipeline_core_schedules_attention import autograd, bwd_call, bwd_prepost, call
from pipeline_core_schedules_attention.autograd import AttentionBackwardError
from pipeline_core_schedules_attention.call import AttentionArgumentError

_SPEC = importlib.util.spec_from_file_location(
    "attention_call_launch_tests", Path(__file__).with_name("test_call_launch.py"))
assert _SPEC is not None and _SPEC.loader is not None
launch_tests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(launch_tests)
Tensor, qkv = launch_tests.Tensor, launch_tests.qkv
host = launch_tests.host  # the fixture: fake torch, build, tensor maps and launch


class Strided(Tensor):
    """A tensor of other strides (autograd's dO may be expanded or transposed): layout.py's
    rule copies it (tma_copy: a new dense tensor)."""


def test_do_is_copied_only_where_the_kernels_cannot_read_it(torch):
    """dO of other strides, or contiguous at an address off TMA's 16 bytes (a view at an
    offset), is copied once; a contiguous aligned dO is read as it is."""
    shape = (2, 4, 100, 64)
    aligned = Tensor(shape, ptr=1 << 30)
    assert autograd.readable(aligned) is aligned
    for do in (Strided(shape, strides=(1, 1, 1, 1)), Strided(shape, ptr=(1 << 30) + 2)):
        got = autograd.readable(do)
        assert got is not do and got.is_contiguous() and got.data_ptr() % 16 == 0


@pytest.fixture
def torch(host, monkeypatch):
    """test_call_launch's fake torch with what the backward allocates, and the backward's
    kernels built and launched by stand-ins."""
    torch = sys.modules["torch"]
    torch.float32 = "torch.float32"
    torch.contiguous_format = "contiguous_format"
    torch.empty_like = lambda t, memory_format=None: Tensor(t.shape, t.dtype, t.device)
    monkeypatch.setattr(Tensor, "contiguous", lambda self: self, raising=False)
    monkeypatch.setattr(bwd_prepost.PREPOST, "launcher", lambda *a: host.launches.append(a))
    monkeypatch.setattr(bwd_prepost.PREPOST.kernels, "_build",
                        lambda key: Built(kernel=key[0], smem=0, threads=256))
    monkeypatch.setattr(bwd_prepost.PREPOST.kernels, "_built", {})
    for cache in (bwd_prepost.PREPOST.recipes, bwd_prepost.PREPOST.args):
        monkeypatch.setattr(cache, "_items", {})
    monkeypatch.setattr(bwd_prepost, "require_gpu_module", lambda name: __import__(name))
    return torch


def test_the_forward_op_saves_each_rows_lse_as_b_h_sq_fp32(torch, host):
    q, k, v = qkv(sq=100, sk=77, hq=6, hkv=3)
    out, lse = autograd._forward(q, k, v, "bottom_right", None, False)
    assert (out.shape, out.dtype) == (q.shape, q.dtype)
    assert (lse.shape, lse.dtype, lse.device) == ((2, 6, 100), "torch.float32", q.device)
    args = host.launches[-1][5]
    assert (int(args[3]), int(args[4])) == (out.ptr, lse.ptr)  # both packed per call
    # the eager call (no gradient) passes a null LSE, allocates none, and runs a kernel of its
    # own, built with the store compiled out (-p lse=false); the forward's kernel stores it
    call.attention(q, k, v, causal="bottom_right")
    assert int(host.launches[-1][5][4]) == 0
    assert host.lse == [True, False] and host.built[0] == host.built[1]
    assert host.launches[-2][0] == host.launches[-1][0]  # the fake kernel names its tile only


def test_the_forward_saves_what_the_backward_reads_and_marks_lse_non_differentiable(
        torch, host, monkeypatch):
    q, k, v = qkv(d=64)
    o, lse = Tensor(q.shape), Tensor(q.shape[:3], "torch.float32")
    ctx = types.SimpleNamespace(
        save_for_backward=lambda *t: setattr(ctx, "saved_tensors", t),
        mark_non_differentiable=lambda *t: setattr(ctx, "constant", t))
    autograd._setup_context(ctx, (q, k, v, "top_left", None, True), (o, lse))
    assert ctx.saved_tensors == (q, k, v, o, lse) and ctx.constant == (lse,)
    assert (ctx.causal, ctx.scale, ctx.deterministic) == ("top_left", 0.125, True)  # 1/sqrt(64)
    autograd._setup_context(ctx, (q, k, v, "none", 0.5, False), (o, lse))
    assert ctx.scale == 0.5
    # the backward: grad mode is off there, so plain tensors go to the impl itself (no
    # dispatch); where torch.compile traces the formula, through the op
    seen = []
    ops = types.SimpleNamespace(attention_bwd=lambda *a: seen.append(("op", a)) or ("dq", "dk",
                                                                                   "dv"))
    monkeypatch.setattr(call.CALL, "ops", lambda: ops)
    monkeypatch.setattr(autograd, "_backward_impl",
                        lambda *a: seen.append(("impl", a)) or ("dq", "dk", "dv"))
    monkeypatch.setattr(torch, "is_grad_enabled", lambda: False)
    do = Tensor(q.shape)
    grads = autograd._backward(ctx, do, None)
    assert grads == ("dq", "dk", "dv", None, None, None)  # none for causal, scale, det
    host.state.compiling = True
    autograd._backward(ctx, do, None)
    assert seen == [("impl", (q, k, v, o, lse, do, "none", 0.5, False)),
                    ("op", (q, k, v, o, lse, do, "none", 0.5, False))]


def main_stand_in(seen):
    """The contract's attention_bwd_main, recording what it is handed (tests only)."""
    def main(q, k, v, do, lse, delta, dq_accum, *, causal, scale, deterministic=False):
        seen.append(dict(do=do, lse=lse, delta=delta, dq_accum=dq_accum, causal=causal,
                         scale=scale, deterministic=deterministic))
        return Tensor(k.shape, k.dtype), Tensor(v.shape, v.dtype)
    return main


@pytest.mark.parametrize("sq, rows", [(100, 128), (128, 128), (1, 64), (129, 192)])
def test_the_backward_launches_preprocess_main_postprocess_on_the_accumulator(
        torch, host, monkeypatch, sq, rows):
    """The accumulator, LSE and delta are padded per head to bwd_call.DQ_ROWS (one home:
    bwd_call.padded_rows); the preprocess fills delta, copies LSE into its padded rows
    and zeroes the accumulator, the main kernel gets dO contiguous, the padded LSE and the
    call's causal, the postprocess casts Sq rows of it into a new dq like q."""
    block = 64 if rows in (64, 192) else 128
    monkeypatch.setattr(bwd_call, "DQ_ROWS", block)
    seen: list[dict] = []
    monkeypatch.setattr(autograd, "attention_bwd_main", main_stand_in(seen))
    q, k, v = qkv(sq=sq, sk=77, d=128, hq=4, hkv=2)
    o, lse = Tensor(q.shape), Tensor(q.shape[:3], "torch.float32")
    do = Strided(q.shape, strides=(1, 1, 1, 1))
    dq, dk, dv = autograd._backward_impl(q, k, v, o, lse, do, "top_left", 0.25, True)
    (got,) = seen
    assert got["do"] is not do and got["do"].is_contiguous()
    assert (got["causal"], got["scale"], got["deterministic"]) == (True, 0.25, True)
    delta, acc, lse_pad = got["delta"], got["dq_accum"], got["lse"]
    assert lse_pad is not lse  # the main kernel's TMA boxes start on 16 bytes: padded rows
    assert (delta.shape, delta.dtype) == ((2, 4, rows), "torch.float32")
    assert (lse_pad.shape, lse_pad.dtype) == ((2, 4, rows), "torch.float32")
    assert (acc.shape, acc.dtype) == ((2, 4, rows, 128), "torch.float32")
    assert (dq.shape, dq.dtype, dk.shape, dv.shape) == (q.shape, q.dtype, k.shape, v.shape)
    pre, post = host.launches[-2:]
    assert (pre[0], post[0]) == (bwd_prepost.PRE_NAME, bwd_prepost.POST_NAME)
    lanes = 2 * 4 * sq * 16  # 16 lanes of 8 elements per row of 128
    floats = 2 * 4 * rows * 16  # the postprocess: 8 floats of the padded accumulator each
    assert pre[3] == (-(-lanes // 256),) and post[3] == (-(-floats // 256),)
    assert pre[4] == post[4] == (256,)
    dense = [4 * sq * 128, sq * 128, 128]  # O's, dO's (its copy) and dq's strides (q's)
    assert [int(a) for a in pre[5]] == [o.ptr, got["do"].ptr, lse.ptr, lse_pad.ptr, delta.ptr,
                                        acc.ptr, 2 * 4 * sq, sq, rows, 2 * 4 * rows * 128 // 4,
                                        4, *dense, *dense]
    assert [int(a) for a in post[5]] == [acc.ptr, dq.ptr, 2 * 4 * sq, sq, rows, 4, *dense]


def test_strided_gradients_are_read_in_place_and_dq_takes_qs_layout(torch, host, monkeypatch):
    """A [B, S, H, D] view of dO is read where it lies (the preprocess at its strides, the
    main kernel through its maps); dq comes back in q's layout, written at its strides."""
    seen: list[dict] = []
    monkeypatch.setattr(autograd, "attention_bwd_main", main_stand_in(seen))
    b, h, sq, d = 2, 4, 100, 128
    q = launch_tests.bshd(b, sq, h, d)
    k, v = Tensor((b, 2, 77, d)), Tensor((b, 2, 77, d))
    o, lse = launch_tests.bshd(b, sq, h, d), Tensor((b, h, sq), "torch.float32")
    do = launch_tests.bshd(b, sq, h, d)
    dq, _, _ = autograd._backward_impl(q, k, v, o, lse, do, "none", 0.25, False)
    assert seen[0]["do"] is do
    bshd = [sq * h * d, d, h * d]
    pre, post = host.launches[-2:]
    assert [int(a) for a in pre[5][10:]] == [h, *bshd, *bshd]
    assert dq.strides == q.strides and [int(a) for a in post[5][5:]] == [h, *bshd]


def test_a_new_do_each_step_reuses_the_packed_arguments(torch, host, monkeypatch):
    monkeypatch.setattr(autograd, "attention_bwd_main", main_stand_in([]))
    q, k, v = qkv()
    for _ in range(3):
        autograd._backward_impl(q, k, v, Tensor(q.shape), Tensor(q.shape[:3]),
                                Tensor(q.shape), "none", 0.125, False)
    assert len(bwd_prepost.PREPOST.args) == 2 and len(bwd_prepost.PREPOST.kernels) == 2
    assert len({int(launch[5][1]) for launch in host.launches[::2]}) == 3  # each dO's address


def test_the_backward_refuses_in_one_line(torch, monkeypatch):
    q, k, v = qkv()
    o = Tensor(q.shape)
    for do, needle in ((Tensor((2, 6, 99, 64)), "attention backward: dO: shape (2, 6, 99, 64) "
                                               "differs from the output's (2, 6, 100, 64)"),
                       (Tensor(q.shape, "torch.float16"), "attention backward: dO: dtype "
                                                          "torch.float16 differs")):
        with pytest.raises(AttentionBackwardError) as info:
            autograd._backward_fake(q, k, v, o, o, do, "none", 0.125, False)
        assert str(info.value).startswith(needle) and "\n" not in str(info.value)
    with pytest.raises(AttentionArgumentError, match="^attention: deterministic: 1; pass True "
                                                     "or False$"):
        call.attention(q, k, v, deterministic=1)


def test_the_fakes_give_the_ops_shapes_and_run_the_forwards_checks(torch):
    q, k, v = qkv(hq=6, hkv=2)
    o, lse = autograd._forward_fake(q, k, v, "top_left", None, False)
    assert (o.shape, lse.shape, lse.dtype) == (q.shape, q.shape[:3], "torch.float32")
    dq, dk, dv = autograd._backward_fake(q, k, v, o, lse, Strided(q.shape), "none", 0.1, True)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    with pytest.raises(AttentionArgumentError, match="^attention: k: 4 heads for q's 6"):
        autograd._forward_fake(q, *qkv(hkv=4)[1:], "none", None, False)


def test_the_ops_are_registered_with_the_backward_on_the_forward(monkeypatch):
    library = types.SimpleNamespace(ops={})

    def custom_op(name, fn, *, mutates_args, schema):
        op = types.SimpleNamespace(fn=fn, schema=schema, backward=None, setup=None)
        op.register_fake = lambda fake: setattr(op, "fake", fake)
        op.register_autograd = lambda bw, *, setup_context=None: (
            setattr(op, "backward", bw), setattr(op, "setup", setup_context))
        library.ops[name] = op
        return op

    fake = types.ModuleType("torch")
    fake.library = types.SimpleNamespace(custom_op=custom_op)
    fake.ops = types.SimpleNamespace(pipeline_core="namespace")
    fake.autograd = types.SimpleNamespace(Function=object)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(kit_call, "_REGISTERED", {})
    monkeypatch.setattr(call.CALL, "_namespace", None)
    monkeypatch.setattr(call.CALL, "_functions", {})
    assert call.CALL.ops() == "namespace"
    # the forward's eager twin runs the same three functions; the backward op has none
    (name, twin), = call.CALL._functions.items()
    assert name == "attention" and twin.backward is autograd._backward
    assert twin.forward.__code__.co_freevars == ("impl", "setup")
    assert [c.cell_contents for c in twin.forward.__closure__] == [autograd._forward,
                                                                   autograd._setup_context]
    fwd, bwd = library.ops["pipeline_core::attention"], library.ops["pipeline_core::attention_bwd"]
    assert (fwd.fn, fwd.fake, fwd.backward, fwd.setup) == (
        autograd._forward, autograd._forward_fake, autograd._backward, autograd._setup_context)
    assert fwd.schema.endswith("bool deterministic) -> (Tensor, Tensor)")
    assert (bwd.fn, bwd.fake, bwd.backward) == (autograd._backward_impl, autograd._backward_fake,
                                                None)
    assert bwd.schema.endswith("float scale, bool deterministic) -> (Tensor, Tensor, Tensor)")


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_prepost_kernels_build_with_nvcc_without_spills(head_dim, dtype, tmp_path):
    src = bwd_prepost.source(head_dim, dtype)
    for sig in (bwd_prepost.PRE_SIGNATURE, bwd_prepost.POST_SIGNATURE):
        assert f"{sig.kernel}({sig.render()}) {{" in src
    if nvcc() is None:
        pytest.skip("needs nvcc")
    cu = tmp_path / "prepost.cu"
    cu.write_text(src)
    proc = subprocess.run([nvcc() or "nvcc", "-cubin", GENCODE, "-std=c++17", "-Xptxas", "-v",
                           "-o", str(tmp_path / "prepost.cubin"), str(cu)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("0 bytes spill stores, 0 bytes spill loads") == 2, proc.stderr


def test_the_backward_benchmarks_plan_covers_the_issues_cases():
    """benchmarks/attention_bwd.py --dry-run (no torch): at least 60 correctness cases over
    every S, causal mode, head dim and dtype, grouped-query and Sq != Sk among them, and the
    12 timed configurations (D 64 / 128, S 1k / 4k / 16k, causal or not, 16k tokens)."""
    import json

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "attention_bwd.py"
    proc = subprocess.run([sys.executable, str(script), "--dry-run"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    cases = [r["case"] for r in lines if r.get("phase") == "correct"]
    assert len(cases) >= 60
    assert {s for c in cases for s in c[3:5]} == {1, 17, 128, 1000, 4096}
    assert {str(c[7]) for c in cases} == {"False", "top_left", "bottom_right"}
    assert {c[5] for c in cases} == {64, 128} and {c[6] for c in cases} == {"bf16", "fp16"}
    assert any(c[1] != c[2] for c in cases) and any(c[3] != c[4] for c in cases)
    timed = {(r["D"], r["S"], r["causal"]) for r in lines if r.get("phase") == "time"}
    assert timed == {(d, s, c) for d in (64, 128) for s in (1024, 4096, 16384)
                     for c in (False, True)}
    assert all(r["B"] * r["S"] == 16384 and r["H"] * r["D"] == 2048
               for r in lines if r.get("phase") == "time")
