"""The kit's call layer (``kit.call.HostCall``, issue 34) on the CPU: torch and the launch are
stand-ins, so what is tested is the host logic every family shares: a kernel built once under
the lock, arguments packed once per key, an op of several kernels launched in order, custom ops
registered once with their fake and their backward, one bounded tensor-map cache; and the one
home of the call layer (no family defines its own copy of it)."""
from __future__ import annotations

import ast
import sys
import threading
import types
from pathlib import Path

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core_nvidia_h100.kit import call as kit  # noqa: E402
from pipeline_core_nvidia_h100.kit.call import (Built, HostCall, KernelTable, Launch,  # noqa: E402
                                                Op, Recipe)

PLUGINS = Path(__file__).resolve().parents[2]


class Tensor:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def test_a_kernel_is_built_once_by_threads_asking_for_it_together():
    gate, builds = threading.Event(), []

    def build(key):
        gate.wait()
        builds.append(key)
        return Built(kernel=key, smem=1, threads=128)

    table: KernelTable[Built] = KernelTable(build, threading.Lock())
    got: list[Built] = []
    threads = [threading.Thread(target=lambda: got.append(table.kernel("k"))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert builds == ["k"] and len({id(b) for b in got}) == 1
    mutant = Built(kernel="mutant", smem=1, threads=128)
    table["k"] = mutant  # a benchmark's swap
    assert table.kernel("k") is mutant and dict(table) == {"k": mutant}
    table.clear()
    assert table.kernel("k").kernel == "k" and builds == ["k", "k"]


def three_kernel_call(seen):
    """A family whose op is three kernels (a preprocess, the main kernel, a postprocess), the
    main one reading the output's address per call."""
    def build(key):
        seen.builds.append(key)
        return Built(kernel=f"{key}-kernel", smem=len(key), threads=128)

    def pack(r, kernels, tensors):
        seen.packs += 1
        pre, main, post = kernels
        (x,) = tensors
        return (Launch.of(pre, (1,), (x.data_ptr(),)),
                Launch.of(main, (r.plan,), (x.data_ptr(),), late=lambda p: ("out", p),
                          tail=(r.plan,)),
                Launch.of(post, (2,), ()))

    host = HostCall(schedule="three", plugins=(), build=build, pack=pack)
    host.launcher = lambda *a: seen.launches.append(a)
    return host


def test_an_op_of_three_kernels_launches_them_in_order_packed_once_per_key():
    seen = types.SimpleNamespace(builds=[], packs=0, launches=[])
    host = three_kernel_call(seen)
    r = Recipe(plan=4, device=0, stream=7, kernels=("pre", "main", "post"))
    x = Tensor(4096)
    for out in (Tensor(1), Tensor(2)):
        host.launch(r, (r, x.data_ptr()), (x,), out)
    assert seen.builds == ["pre", "main", "post"] and seen.packs == 1
    assert seen.launches[:3] == [
        ("pre-kernel", 0, 7, (1,), (128,), (4096,), 3),
        ("main-kernel", 0, 7, (4,), (128,), (4096, ("out", 1), 4), 4),
        ("post-kernel", 0, 7, (2,), (128,), (), 4)]
    assert seen.launches[4][5] == (4096, ("out", 2), 4)  # the late value packed per call
    host.launch(r, (r, 8192), (Tensor(8192),), Tensor(3))  # other addresses: packed again
    assert seen.packs == 2 and seen.launches[-2][5][0] == 8192


def test_several_late_values_are_packed_per_call_and_none_is_a_null_pointer():
    """A kernel with two outputs packs both addresses per call (a tuple of late tensors); an
    output the call does not want (None) is the null pointer."""
    seen = types.SimpleNamespace(launches=[])

    def pack(r, kernels, tensors):
        (main,) = kernels
        return (Launch.of(main, (1,), (tensors[0].data_ptr(),),
                          late=lambda o, lse: (("o", o), ("lse", lse)), tail=(9,)),)

    host = HostCall(schedule="two", plugins=(), pack=pack,
                    build=lambda key: Built(kernel=key, smem=0, threads=32))
    host.launcher = lambda *a: seen.launches.append(a)
    r = Recipe(plan=0, device=0, stream=7, kernels=("main",))
    x = Tensor(4096)
    host.launch(r, r, (x,), (Tensor(1), Tensor(2)))
    host.launch(r, r, (x,), (Tensor(3), None))
    assert [a[5] for a in seen.launches] == [(4096, ("o", 1), ("lse", 2), 9),
                                             (4096, ("o", 3), ("lse", 0), 9)]


class FakeLibrary:
    """torch.library's custom_op, recording what is registered."""

    def __init__(self) -> None:
        self.ops: dict[str, types.SimpleNamespace] = {}

    def custom_op(self, name, fn, *, mutates_args, schema):
        op = types.SimpleNamespace(fn=fn, mutates=mutates_args, schema=schema, fake=None,
                                   backward=None, setup_context=None)
        op.register_fake = lambda fake: setattr(op, "fake", fake)

        def register_autograd(backward, *, setup_context=None):
            op.backward, op.setup_context = backward, setup_context
        op.register_autograd = register_autograd
        self.ops[name] = op
        return op


class FakeFunction:
    """torch.autograd.Function as an eager twin uses it: ``apply`` runs the forward on a new
    context, and records both."""

    applied: list = []

    @classmethod
    def apply(cls, *args):
        ctx = types.SimpleNamespace()
        out = cls.forward(ctx, *args)
        FakeFunction.applied.append((cls.__name__, args, ctx))
        return out


class FakeTensor:
    shape, dtype, device = (2, 3), "torch.bfloat16", "cuda:0"

    def __init__(self, requires_grad=False, is_cuda=True):
        self.requires_grad, self.is_cuda = requires_grad, is_cuda

    def stride(self):
        return (3, 1)

    def data_ptr(self):
        return 1 << 20


class Unaddressed(FakeTensor):
    """A fake tensor as a dispatch mode holds it: no address (torch raises on data_ptr)."""

    def data_ptr(self):
        raise RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor)")


@pytest.fixture
def torch(monkeypatch):
    torch = types.ModuleType("torch")
    torch.library = FakeLibrary()
    torch.ops = types.SimpleNamespace(kit_test=types.SimpleNamespace(name="kit_test"),
                                      other=types.SimpleNamespace(name="other"))
    torch.autograd = types.SimpleNamespace(Function=FakeFunction)
    torch.Tensor = FakeTensor
    torch.state = types.SimpleNamespace(compiling=False, grad=True)
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: torch.state.compiling)
    torch._C = types.SimpleNamespace(_len_torch_dispatch_stack=lambda: 0)
    torch.is_grad_enabled = lambda: torch.state.grad
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(kit, "_REGISTERED", {})
    monkeypatch.setattr(FakeFunction, "applied", [])
    return torch


def _op(name="kit_test::square", **kw):
    return Op(name=name, schema="(Tensor x) -> Tensor", impl=lambda x: x, fake=lambda x: x, **kw)


def test_ops_are_registered_once_with_their_fake_and_their_backward(torch):
    def backward(ctx, grad):
        return grad

    def setup_context(ctx, inputs, output):
        ctx.saved = inputs

    square = _op(backward=backward, setup_context=setup_context)
    plain = _op("kit_test::plain_out", mutates=("out",))
    host = HostCall(schedule="s", plugins=(), build=lambda key: None, pack=lambda *a: (),
                    ops=lambda: (square, plain))
    assert host.ops().name == "kit_test" and host.ops() is host.ops()
    reg = torch.library.ops
    assert reg["kit_test::square"].fake is square.fake
    assert (reg["kit_test::square"].backward, reg["kit_test::square"].setup_context) == (
        backward, setup_context)
    assert reg["kit_test::plain_out"].backward is None
    assert reg["kit_test::plain_out"].mutates == ("out",)
    # a second family's call with the same op is one registration; another op of the name, no
    again = HostCall(schedule="s", plugins=(), build=lambda key: None, pack=lambda *a: (),
                     ops=lambda: (square,))
    assert again.ops().name == "kit_test" and len(reg) == 2
    with pytest.raises(ValueError, match="^custom op kit_test::square: registered already"):
        kit.register_op(_op())


def test_a_call_needing_a_gradient_runs_the_ops_own_functions_through_its_eager_twin(torch):
    """A differentiable op's eager twin is a Function of the op's impl, setup_context and
    backward (one body, no custom-op dispatch: autograd_function says why).  A call of plain
    tensors needing no gradient runs the family's function; needing one (grad mode on), the
    twin; under tracing, and for an op with no backward, the op.  The checks run before all
    but the first (and, tracing, the op's fake runs them)."""
    seen = []

    def backward(ctx, grad):
        return grad

    def setup_context(ctx, inputs, output):
        ctx.saved = (inputs, output)

    square = _op(backward=backward, setup_context=setup_context)
    square = attrs.evolve(square, impl=lambda x, p: seen.append(("impl", p)) or "twin out")
    plain = _op("kit_test::plain")
    host = HostCall(schedule="s", plugins=(), build=lambda key: None, pack=lambda *a: (),
                    ops=lambda: (square, plain))
    torch.ops.kit_test.square = lambda x, p: seen.append(("op", p)) or "op out"
    torch.ops.kit_test.plain = lambda x, p: seen.append(("plain op", p)) or "op out"

    def call(op, x, p=1):
        return host.call(op, lambda x, p: seen.append(("run", p)) or "run out",
                         lambda x, p: seen.append(("check", p)), (x,), p,
                         op_args=lambda: (p * 10,))

    assert call("square", FakeTensor()) == "run out"
    assert call("square", FakeTensor(requires_grad=True), 2) == "twin out"
    ((name, args, ctx),) = FakeFunction.applied
    assert name == "kit_test_square" and args[1] == 20 and ctx.saved[1] == "twin out"
    # the same description again: checked once (what the checks read is the description)
    assert call("square", FakeTensor(requires_grad=True), 2) == "twin out"
    assert len(FakeFunction.applied) == 2
    torch.state.grad = False  # torch.no_grad(), or inside a backward
    assert call("square", FakeTensor(requires_grad=True), 3) == "run out"
    torch.state.grad = True
    assert call("plain", FakeTensor(requires_grad=True), 4) == "op out"
    assert call("square", FakeTensor(is_cuda=False), 5) == "op out"
    torch.state.compiling = True
    assert call("square", FakeTensor(requires_grad=True), 6) == "op out"
    torch.state.compiling = False  # a dispatch mode (AOTAutograd tracing an op's backward)
    torch._C._len_torch_dispatch_stack = lambda: 1
    assert call("square", Unaddressed(requires_grad=True), 7) == "op out"
    torch._C._len_torch_dispatch_stack = lambda: 0
    assert seen == [("run", 1), ("check", 2), ("impl", 20), ("impl", 20), ("run", 3),
                    ("check", 4), ("plain op", 40), ("check", 5), ("op", 50), ("op", 60),
                    ("op", 70)]
    assert len(FakeFunction.applied) == 2
    # a refusal is not remembered: the same bad call is refused again
    torch.state.compiling = False

    def refuse(x, p):
        raise ValueError("square: p: bad")
    for _ in range(2):
        with pytest.raises(ValueError, match="^square: p: bad$"):
            host.call("square", lambda x, p: None, refuse, (FakeTensor(requires_grad=True),), 7)


def test_a_familys_ops_share_one_namespace(torch):
    host = HostCall(schedule="s", plugins=(), build=lambda key: None, pack=lambda *a: (),
                    ops=lambda: (_op(), _op("other::cube")))
    with pytest.raises(ValueError, match=r"one namespace; these name \['kit_test', 'other'\]"):
        host.ops()


def test_one_bounded_tensor_map_cache_encodes_each_map_once(monkeypatch):
    from pipeline_core_nvidia_h100 import tma

    encoded = []
    monkeypatch.setattr(tma, "encode_tiled_2d", lambda *a, **kw: encoded.append(a) or len(encoded))
    monkeypatch.setattr(kit, "_MAPS", kit.Bounded(2))
    first = kit.tensor_map(4096, 128, 64, 64, 64, "bf16")
    assert kit.tensor_map(4096, 128, 64, 64, 64, "bf16") == first and len(encoded) == 1
    kit.tensor_map(4096, 128, 64, 64, 64, "fp16")
    kit.tensor_map(8192, 128, 64, 64, 64, "bf16")  # a third: the oldest goes
    kit.tensor_map(4096, 128, 64, 64, 64, "bf16")
    assert len(encoded) == 4


class _View:
    """What tma_readable reads of a torch tensor: sizes, strides (elements), element size,
    address."""

    def __init__(self, shape, strides, ptr=1 << 20, elem=2):
        self.shape, self._strides, self.ptr, self.elem = shape, strides, ptr, elem

    def stride(self, i):
        return self._strides[i]

    def element_size(self):
        return self.elem

    def data_ptr(self):
        return self.ptr


B, H, S, D = 2, 8, 77, 64


@pytest.mark.parametrize("shape, strides, ptr, readable", [
    ((B, H, S, D), (H * S * D, S * D, D, 1), 1 << 20, True),  # contiguous
    ((B, H, S, D), (S * H * D, D, H * D, 1), 1 << 20, True),  # [B, S, H, D] seen as [B, H, S, D]
    ((B, H // 2, S, D), (H * S * D, 2 * S * D, D, 1), 1 << 20, True),  # every other head
    ((1, H, S, D), (7, S * D, D, 1), 1 << 20, False),  # a stride off 16 bytes, one index's too
    ((B, H, S, D), (H * S * (D + 1), S * (D + 1), D + 1, 1), 1 << 20, False),  # rows of 130 B
    ((B, H, S, D), (H * S * D * 2, S * D * 2, D * 2, 2), 1 << 20, False),  # last stride 2
    ((B, H, S, D), (H * S * D, S * D, D, 1), (1 << 20) + 2, False),  # base off 16 bytes
    ((B, H, S, D), (S * D, 0, D, 1), 1 << 20, False),  # a broadcast head (expand)
    ((B, H, S, D), (H * S * D, S * D, 8, 1), 1 << 20, False),  # rows overlapping
    ((128, 64), (64, 1), 1 << 20, True),  # 2-D: the GEMM's operands, as before
    ((128, 64), (32, 1), 1 << 20, False),
    ((1, 64), (72, 1), 1 << 20, True),
])
def test_tma_readable_takes_any_rank_and_any_order_of_strides(shape, strides, ptr, readable):
    """TMA reads a tensor in place when its last dimension is unit-strided, its other strides
    are multiples of 16 bytes, no two indices share an address and its base is 16-byte
    aligned; the strides need not increase (a transposed view)."""
    assert kit.tma_readable(_View(shape, strides, ptr)) is readable


def test_a_strided_map_is_the_tensors_own_dims_and_byte_strides_innermost_first(monkeypatch):
    """strided_tensor_map hands the driver torch's sizes and strides reversed (innermost
    first), the strides in bytes without the innermost one, the box reversed; a dimension of
    one index takes the dense stride (the driver reads only its index 0); encoded once."""
    from pipeline_core_nvidia_h100 import tma

    encoded = []
    monkeypatch.setattr(tma, "encode_tiled", lambda *a, **kw: encoded.append((a, kw))
                        or len(encoded))
    monkeypatch.setattr(kit, "_MAPS", kit.Bounded(8))
    shape, strides = (B, H, S, D), (S * H * D, D, H * D, 1)
    first = kit.strided_tensor_map(4096, shape, strides, (1, 1, 128, 64), "bf16")
    assert kit.strided_tensor_map(4096, shape, strides, (1, 1, 128, 64), "bf16") == first
    (args, kw), = encoded
    assert args == (4096, (D, S, H, B), (H * D * 2, D * 2, S * H * D * 2), (64, 128, 1, 1))
    assert kw == {"dtype": tma.DTYPE_BFLOAT16, "swizzle": tma.SWIZZLE_128B}
    kit.strided_tensor_map(4096, (1, H, S, D), (3, S * D, D, 1), (1, 1, 128, 64), "fp16")
    assert encoded[1][0][2] == (D * 2, S * D * 2, H * S * D * 2)


def test_the_sm_count_is_asked_of_torch_once_per_device(monkeypatch):
    asked = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(get_device_properties=lambda d: asked.append(d) or
                                       types.SimpleNamespace(multi_processor_count=132 - d))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(kit, "_SMS", {})
    assert [kit.sm_count(d) for d in (0, 1, 0, 1)] == [132, 131, 132, 131] and asked == [0, 1]


#: the call layer's names: each family defined its own copy of these before issue 34
CALL_LAYER = ("_host", "_Built", "Built", "_Kernels", "_KERNELS", "KernelTable", "_Recipe",
              "Recipe", "_key", "_RECIPES", "_ARGS", "_call", "_launch", "_pack", "_SMS",
              "sm_count", "_ops", "_REGISTERED", "_MAPS", "_map", "tensor_map", "HostCall",
              "Launch", "Op", "register_op", "load_kernel", "RECIPE_CACHE_SIZE",
              "ARGS_CACHE_SIZE", "MAP_CACHE_SIZE", "BUILD_OPTIONS")
KIT_CALL = "nvidia_h100/pipeline_core_nvidia_h100/kit/call.py"
#: what each family's call module defines of the kit's hooks: its HostCall, the build of one
#: kernel, its op's body, its ring depth
FAMILY_HOOKS = {"CALL", "_build", "_run", "CALL_STAGES"}


def top_level_definitions() -> dict[str, set[str]]:
    """{name: the plugin modules (paths under plugins/) that define it at top level}."""
    found: dict[str, set[str]] = {}
    for path in sorted(PLUGINS.glob("*/pipeline_core_*/**/*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in names:
                found.setdefault(name, set()).add(path.relative_to(PLUGINS).as_posix())
    return found


def test_the_call_layer_has_one_home():
    """The plugin host, build cache, recipe and argument caches, launch, SM count, tensor-map
    cache and custom-op registration are defined in the kit's call.py and nowhere else; the
    two families' call modules share no other name than the kit's hooks."""
    defs = top_level_definitions()
    elsewhere = {name: sorted(defs[name] - {KIT_CALL}) for name in CALL_LAYER
                 if defs.get(name, set()) - {KIT_CALL}}
    assert elsewhere == {}
    assert {n for n in CALL_LAYER if KIT_CALL in defs.get(n, ())} >= {
        "HostCall", "KernelTable", "Built", "Recipe", "_REGISTERED", "_SMS", "_MAPS"}
    families = [{n for n, paths in defs.items() if paths & modules}
                for modules in ({"nvidia_h100/pipeline_core_nvidia_h100/matmul_call.py",
                                 "nvidia_h100/pipeline_core_nvidia_h100/gemm_call.py"},
                                {"schedules_attention/pipeline_core_schedules_attention/call.py"})]
    assert families[0] & families[1] == FAMILY_HOOKS


class _FakeTorch:
    """torch as split_workspace sees it: whether the current stream is being captured, and
    allocations that are each a new object (what the test follows)."""

    def __init__(self) -> None:
        self.capturing = False
        self.made = 0
        outer = self

        class _Cuda:
            @staticmethod
            def is_current_stream_capturing() -> bool:
                return outer.capturing
        self.cuda = _Cuda()
        self.float32, self.int32 = "float32", "int32"

    def device(self, kind: str, index: int) -> tuple[str, int]:
        return kind, index

    def empty(self, n: int, **kw: object) -> tuple[str, int, int]:
        self.made += 1
        return "empty", n, self.made

    def zeros(self, n: int, **kw: object) -> tuple[str, int, int]:
        self.made += 1
        return "zeros", n, self.made


def test_a_capture_on_a_stream_without_a_workspace_gets_its_own_and_nothing_is_kept(
        monkeypatch):
    """The split workspace: kept per (device, stream) and reused by eager calls; a CUDA graph
    captured on a stream that has none (torch.cuda.graph's own capture stream) gets one of its
    own from the graph's pool, which the capture's later calls share (one zeroing a replay) and
    another capture does not; none is kept for the stream (the next eager call on it makes the
    stream's); a capture on a stream that has one uses it; a capture the driver gives no id
    gets one a call."""
    from pipeline_core_nvidia_h100.kit import call

    fake = _FakeTorch()
    ids = {22: 7}
    monkeypatch.setattr(call, "_require", lambda name: fake)
    monkeypatch.setattr(call, "capture_id", lambda stream: ids.get(stream))
    monkeypatch.setattr(call, "_STREAM_MEMORY", {})
    monkeypatch.setattr(call, "_CAPTURED", {})
    kept = call.split_workspace(0, 11, 4, 64)
    assert call.split_workspace(0, 11, 4, 64) is kept
    assert kept[0][:2] == ("empty", 256) and kept[1][:2] == ("zeros", 4)
    fake.capturing = True
    first = call.split_workspace(0, 22, 4, 64)
    assert call.split_workspace(0, 22, 4, 64) is first and first[1][0] == "zeros"
    ids[22] = 8  # another capture on the same stream
    second = call.split_workspace(0, 22, 4, 64)
    assert second != first and call.split_workspace(0, 22, 4, 64) is second
    assert call.split_workspace(0, 11, 4, 64) is kept  # the stream's own, where it has one
    unnamed = call.split_workspace(0, 33, 4, 64), call.split_workspace(0, 33, 4, 64)
    assert unnamed[0] != unnamed[1]  # no id: nothing to share by
    fake.capturing = False
    eager = call.split_workspace(0, 22, 4, 64)
    assert eager not in (first, second) and call.split_workspace(0, 22, 4, 64) is eager
