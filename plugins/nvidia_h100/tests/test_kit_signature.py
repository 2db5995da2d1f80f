"""The kit's ``KernelSignature`` (issue 34): one list writes a kernel's C parameter list and packs
its host arguments.  The agreement tests read the parameter list back out of the emitted CUDA
and hold the call's packed arguments to it, one by one: a parameter the emitter writes and the
packer does not (or in another place, or of another width) fails them."""
from __future__ import annotations

import re

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")
np = pytest.importorskip("numpy")

from pipeline_core.plugin_api import compile_named  # noqa: E402

from pipeline_core_nvidia_h100 import matmul_call  # noqa: E402
from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma  # noqa: E402
from pipeline_core_nvidia_h100.gemm_call import TensorInfo, plan_call  # noqa: E402
from pipeline_core_nvidia_h100.gemm_signature import (DEFAULT_SIGNATURE,  # noqa: E402
                                                      KERNEL_NAME, gemm_signature)
from pipeline_core_nvidia_h100.kit.call import Recipe  # noqa: E402
from pipeline_core_nvidia_h100.kit.signature import (KernelParam, KernelSignature,  # noqa: E402
                                                     SignatureError, params)
from pipeline_core_nvidia_h100.warpspecialized import GemmVariant  # noqa: E402

#: a tensor map as the stand-in encoder returns it
MAP = object()


def emitted_params(source: str, kernel: str) -> list[tuple[str, str]]:
    """(C type, name) of each parameter of ``kernel`` as the CUDA ``source`` declares it."""
    found = re.search(rf"\n{kernel}\((.*?)\) \{{\n", source, re.S)
    assert found is not None, f"no {kernel}(...) in the source"
    out = []
    for decl in found.group(1).split(","):
        *c_type, name = decl.split()
        out.append((" ".join(c_type), name))
    return out


def held_to(declared: list[tuple[str, str]], packed: tuple) -> list[str]:
    """Where ``packed`` disagrees with the C parameters ``declared``: the count, or a value
    whose host type is not what its C type reads (a tensor map, a 64-bit address, int,
    long long, float)."""
    if len(packed) != len(declared):
        return [f"{len(packed)} packed for {len(declared)} parameters"]
    wrong = []
    for (c_type, name), value in zip(declared, packed):
        want = (MAP if "TensorMap" in c_type else np.uint64 if "*" in c_type
                else np.int64 if c_type == "long long" else np.int32 if c_type == "int"
                else np.float32 if c_type == "float" else None)
        ok = value is MAP if want is MAP else type(value) is want
        if not ok:
            wrong.append(f"{c_type} {name}: packed {type(value).__name__}")
    return wrong


@attrs.frozen
class Buffer:
    """What the packer reads of a tensor."""

    ptr: int
    size: int = 2

    def data_ptr(self) -> int:
        return self.ptr

    def element_size(self) -> int:
        return self.size


def _plan():
    """The call's plan of a bf16 [300, 200] @ [200, 320] (the TMA-store epilogue)."""
    a = TensorInfo(shape=(300, 200), strides=(200, 1), dtype="bf16", ptr=0)
    b = TensorInfo(shape=(200, 320), strides=(320, 1), dtype="bf16", ptr=0)
    return plan_call(a, b, sms=132, tuning=matmul_call.TUNING)


GEMM_VARIANTS = {
    "direct": GemmVariant(tails=True),
    "tma store": GemmVariant(tails=True, store="tma"),
    "split-K": GemmVariant(b_major="mn", tails=True, split_k=True),
    "e4m3 row-scaled bias": GemmVariant(dtype="e4m3", tails=True, scale="row", bias="bf16"),
    "e4m3 tensor-scaled split-K": GemmVariant(dtype="e4m3", tails=True, scale="tensor",
                                              out_dtype="fp32", split_k=True),
    "batched ab": GemmVariant(tails=True, b_major="mn", batch="ab"),
}


@pytest.mark.parametrize("label", sorted(GEMM_VARIANTS))
def test_the_gemm_calls_packed_arguments_are_the_emitted_kernels_parameters(label,
                                                                            monkeypatch):
    v = GEMM_VARIANTS[label]
    compiled = compile_named("warpspecialized-gemm", target="h100",
                             params=matmul_call.schedule_params(v),
                             target_args={"stages": str(matmul_call.CALL_STAGES)})
    declared = emitted_params(emit_wgmma(compiled), KERNEL_NAME)
    assert declared == [(p.c_type, p.name) for p in gemm_signature(v).params]
    # the call's packer on a plan of this variant (the maps and the workspace stand-ins)
    base = _plan()
    plan = attrs.evolve(base, variant=v, c=base.c if v.store == "tma" else None,
                        c_batch=300 * 200 if v.batch != "none" else 0)
    monkeypatch.setattr(matmul_call, "tensor_map", lambda *a, **kw: MAP)
    monkeypatch.setattr(matmul_call, "sm_count", lambda device: 132)
    r = Recipe(plan=plan, device=0, stream=7, kernels=((v, None, 0),))
    built = matmul_call.GemmKernel(kernel="k", smem=1, threads=384, min_k_tiles=1, tile=1)
    tensors = (Buffer(4096), Buffer(8192), Buffer(12288), Buffer(16384),
               (Buffer(1 << 30), Buffer(1 << 31)) if v.split_k or v.stream_k else None)
    if v.scale != "none":
        tensors += (Buffer(20480), Buffer(24576))
    (launch,) = matmul_call._gemm_arguments(r, (built,), tensors)
    assert held_to(declared, launch.args) == []
    assert launch.grid == (plan.grid, plan.splits, plan.batch) and launch.block == (384,)


def test_the_default_gemm_kernel_declares_its_signature():
    compiled = compile_named("warpspecialized-gemm", target="h100")
    declared = emitted_params(emit_wgmma(compiled), KERNEL_NAME)
    assert declared == [(p.c_type, p.name) for p in DEFAULT_SIGNATURE.params]


def test_a_variant_the_plan_stores_otherwise_than_its_signature_is_refused(monkeypatch):
    """A TMA-store plan whose variant says direct: the packer has a C map the kernel does not
    take, and says so in one line rather than shifting the arguments."""
    plan = _plan()
    assert plan.c is not None
    plan = attrs.evolve(plan, variant=attrs.evolve(plan.variant, store="direct"))
    monkeypatch.setattr(matmul_call, "tensor_map", lambda *a, **kw: MAP)
    r = Recipe(plan=plan, device=0, stream=7, kernels=("k",))
    built = matmul_call.GemmKernel(kernel="k", smem=1, threads=384, min_k_tiles=1, tile=1)
    with pytest.raises(SignatureError, match=r"^kernel pc_ws_gemm: arguments unexpected tmC; "
                                             r"pass exactly its parameters \(tmA, tmB, C,"):
        matmul_call._gemm_arguments(r, (built,), (Buffer(1), Buffer(2), None, Buffer(3),
                                                    None))


@pytest.mark.parametrize("head_dim, causal", [(64, False), (128, "bottom_right")])
def test_the_attention_calls_packed_arguments_are_the_emitted_kernels_parameters(
        head_dim, causal, monkeypatch):
    call = pytest.importorskip("pipeline_core_schedules_attention.call")
    from pipeline_core_schedules_attention.signature import KERNEL_NAME as ATTENTION

    align = call.CAUSAL_ALIGN[causal]
    _, source = call._source(head_dim, "bf16", align is not None, align or "top_left")
    declared = emitted_params(source, ATTENTION)
    plan = call.AttentionCall(bh=12, sq=1000, sk=777, head_dim=head_dim, dtype="bf16",
                              scale_log2=0.18, causal=align is not None,
                              align=align or "top_left", group=2)
    monkeypatch.setattr(call, "bhsd_map", lambda *a, **kw: MAP)  # maps of the own strides
    monkeypatch.setattr(call, "sm_count", lambda device: 132)
    r = Recipe(plan=plan, device=0, stream=7, kernels=("k",))
    built = call.AttentionKernel(kernel="k", smem=1, threads=384, block_m=128, block_n=128)
    (launch,) = call._attention_arguments(r, (built,), (Buffer(1), Buffer(2), Buffer(3)))
    assert launch.late is not None
    # the output's and the log-sum-exp's addresses per call
    packed = (*launch.args, *launch.late(4096, 8192), *launch.tail)
    assert held_to(declared, packed) == []
    names = [n for _, n in declared]
    assert (int(packed[names.index("O")]), int(packed[names.index("LSE")])) == (4096, 8192)


SIG = KernelSignature(kernel="k", params=params(
    (("const __grid_constant__ pcwg::TensorMap", "tmA", "tensor_map"),
     ("float* __restrict__", "out", "pointer")),
    (("int", "n", "int32"), ("long long", "ld", "int64"), ("float", "scale", "float32"))))


def test_the_signature_renders_the_emitters_layout_and_packs_in_its_order():
    assert SIG.render() == ("const __grid_constant__ pcwg::TensorMap tmA, "
                            "float* __restrict__ out,\n       int n, long long ld, float scale")
    more = SIG + params((("unsigned* __restrict__", "counters", "pointer"),), new_line=True)
    assert more.render().endswith("float scale,\n       unsigned* __restrict__ counters")
    packed = SIG.pack({"scale": 0.5, "ld": 7, "n": 3, "out": 64, "tmA": MAP}, np)
    assert packed[0] is MAP and [type(x) for x in packed[1:]] == [np.uint64, np.int32,
                                                                  np.int64, np.float32]
    head, late, tail = SIG.pack_around("out", {"scale": 0.5, "ld": 7, "n": 3, "tmA": MAP}, np)
    assert head == (MAP,) and late is np.uint64 and [int(x) for x in tail[:2]] == [3, 7]


@pytest.mark.parametrize("values, said", [
    ({"tmA": MAP, "out": 1, "n": 1, "ld": 1}, "missing scale"),
    ({"tmA": MAP, "out": 1, "n": 1, "ld": 1, "scale": 1.0, "group": 2}, "unexpected group"),
    ({"tmA": MAP, "out": 1, "n": 1, "ld": 1, "sacle": 1.0}, "missing scale; unexpected sacle"),
])
def test_the_packer_refuses_a_missing_or_unexpected_value_in_one_line(values, said):
    with pytest.raises(SignatureError) as info:
        SIG.pack(values, np)
    assert str(info.value) == (f"kernel k: arguments {said}; pass exactly its parameters "
                               "(tmA, out, n, ld, scale)")


def test_several_late_parameters_pack_per_call_in_their_order():
    """A kernel with two outputs (attention's O and LSE) packs both per call: the packer
    takes one value each and gives them packed, in the list's order; late parameters that are
    not neighbours in the list are refused in one line."""
    head, late, tail = SIG.pack_around(("out", "n"), {"scale": 0.5, "ld": 7, "tmA": MAP}, np)
    assert head == (MAP,) and len(tail) == 2 and (int(tail[0]), float(tail[1])) == (7, 0.5)
    out, n = late(64, 3)
    assert (type(out), int(out), type(n), int(n)) == (np.uint64, 64, np.int32, 3)
    with pytest.raises(SignatureError, match="^kernel k: late parameters out, ld are not "
                                             "consecutive in its list; name consecutive ones$"):
        SIG.pack_around(("out", "ld"), {"scale": 0.5, "n": 3, "tmA": MAP}, np)
    with pytest.raises(SignatureError, match="^kernel k: no parameter O; its parameters: "):
        SIG.pack_around(("out", "O"), {}, np)


def test_a_late_parameter_the_kernel_lacks_and_an_unknown_packer_are_refused():
    with pytest.raises(SignatureError, match="^kernel k: no parameter O; its parameters: tmA, "):
        SIG.pack_around("O", {}, np)
    with pytest.raises(SignatureError, match="^kernel parameter x: packer 'int16'; pass one of "):
        KernelParam(name="x", c_type="short", pack="int16")
