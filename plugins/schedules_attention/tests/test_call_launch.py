"""The ``attention()`` call's eager launch path (docs/guide/attention.md, "The launch path"),
on the CPU: torch, the kernel build and the launch are stand-ins, so what is tested is the
host logic: the checks run once per argument description, a cached description never skips a
check that would refuse, and torch.compile tracing (or any dispatch mode) goes through the op."""
from __future__ import annotations

import math
from decimal import Decimal
import sys
import types

import attrs
import pytest

from pipeline_core_nvidia_h100 import launch_cache
from pipeline_core_nvidia_h100.kit import call as kit_call

from pipeline_core_schedules_attention import call, tile_order
from pipeline_core_schedules_attention.call import AttentionArgumentError
from pipeline_core_schedules_attention.tile_order import TileOrder
from pipeline_core_schedules_attention.tiles import LoopBounds


@attrs.frozen
class Device:
    type: str
    index: int | None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


CUDA0 = Device("cuda", 0)


def strides_of(shape):
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


class Tensor:
    """What the call reads of a torch tensor; the fake torch's ``Tensor``."""

    _next = [1 << 20]

    def __init__(self, shape, dtype="torch.bfloat16", device=CUDA0, strides=None, ptr=None,
                 requires_grad=False):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        self.strides = strides or strides_of(self.shape)
        self.requires_grad = requires_grad
        if ptr is None:
            ptr = Tensor._next[0]
            Tensor._next[0] += 1 << 20
        self.ptr = ptr

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def stride(self, i=None):
        return self.strides if i is None else self.strides[i]

    def element_size(self):
        return 4 if self.dtype == "torch.float32" else 2

    def is_contiguous(self):
        return self.strides == strides_of(self.shape)

    def data_ptr(self):
        return self.ptr

    def new_empty(self, *shape, dtype=None):
        """A new dense tensor (torch's new_empty takes the sizes or one tuple of them)."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return Tensor(tuple(shape), dtype or self.dtype, self.device)

    def __getitem__(self, index):  # tma_copy's [..., :D] of a D needing no pad: itself
        return self

    def copy_(self, source):
        self.copied_from = source
        return self

    def permute(self, *dims):
        return Tensor(tuple(self.shape[d] for d in dims), self.dtype, self.device,
                      strides=tuple(self.strides[d] for d in dims), ptr=self.ptr)

    def unsqueeze(self, dim):  # dim 0 only: the varlen call's batch of one
        assert dim == 0
        return Tensor((1, *self.shape), self.dtype, self.device,
                      strides=(self.shape[0] * self.strides[0], *self.strides), ptr=self.ptr)

    def transpose(self, a, b):
        dims = list(range(len(self.shape)))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(*dims)


def bshd(b, s, h, d, **kw):
    """A [B, H, S, D] view of a [B, S, H, D] buffer (x.view(B, S, H, D).transpose(1, 2))."""
    return Tensor((b, h, s, d), strides=(s * h * d, d, h * d, 1), **kw)


class Subclass(Tensor):
    """A tensor subclass (as torch.compile's FakeTensor is one)."""


class State:
    compiling = False
    dispatch_modes = 0
    stream = 7


def fake_torch(state: type[State]) -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: state.compiling)
    torch._C = types.SimpleNamespace(_len_torch_dispatch_stack=lambda: state.dispatch_modes)
    torch.cuda = types.SimpleNamespace(
        current_device=lambda: 0,
        current_stream=lambda device: types.SimpleNamespace(cuda_stream=state.stream),
        get_device_properties=lambda device: types.SimpleNamespace(multi_processor_count=132))
    torch.empty_like = lambda t: Tensor(t.shape, t.dtype, t.device)
    torch.empty = lambda shape, dtype=None, device=None: Tensor(tuple(shape), dtype, device)
    torch.is_grad_enabled = lambda: True
    torch.float32 = "torch.float32"
    return torch


@pytest.fixture
def host(monkeypatch):
    """The call with torch, the build, the tensor maps and the launch replaced; counts what
    ran."""
    state = type("S", (State,), {})
    monkeypatch.setitem(sys.modules, "torch", fake_torch(state))
    seen = types.SimpleNamespace(plans=0, builds=0, built=[], lse=[], launches=[], ops=[],
                                 state=state)
    plan = call.plan_attention

    def counted_plan(*a, **kw):
        seen.plans += 1
        return plan(*a, **kw)

    def build(head_dim, dtype, causal, align, short, device, window=None, softcap=False,
              lse=True):
        seen.builds += 1
        seen.built.append((head_dim, causal, align, short))
        seen.lse.append(lse)
        return call.AttentionKernel(kernel=("kernel", head_dim, causal, align, short), smem=1,
                                    threads=384, block_m=128, block_n=128,
                                    bounds=LoopBounds(causal=causal, block_m=128, block_n=128,
                                                      align=align))

    monkeypatch.setattr(call, "plan_attention", counted_plan)
    monkeypatch.setattr(call, "_build", build)
    monkeypatch.setattr(call, "bhsd_map", lambda t, rows, dtype: ("map", t.data_ptr(), rows,
                                                                  t.stride()))
    monkeypatch.setattr(call.CALL, "launcher", lambda *a: seen.launches.append(a))
    monkeypatch.setattr(call.CALL, "ops", lambda: types.SimpleNamespace(
        attention=lambda *a: seen.ops.append(a) or ("out", "lse")))
    for cache in (call.CALL.recipes, call.CALL.args, call.CALL.checked, call._ORDERS):
        monkeypatch.setattr(cache, "_items", {})
    monkeypatch.setattr(call.CALL.kernels, "_built", {})
    return seen


def qkv(sq=100, sk=77, d=64, hq=6, hkv=6):
    return Tensor((2, hq, sq, d)), Tensor((2, hkv, sk, d)), Tensor((2, hkv, sk, d))


def test_a_call_with_no_gradient_runs_the_kernel_without_the_lse_store_where_it_pays(host):
    """No gradient: a null LSE, to the kernel built with the store compiled out (-p lse=false),
    but at the (head dim, causal) pairs of call.LSE_KEPT, where that measured slower: there the
    LSE kernel takes the null LSE.  Each kernel is built once."""
    call.attention(*qkv(d=64))
    call.attention(*qkv(d=128), causal=True)
    call.attention(*qkv(d=128))
    assert (128, True) in call.LSE_KEPT and (64, False) not in call.LSE_KEPT
    assert host.lse == [False, True, False]
    assert all(int(launch[5][4]) == 0 for launch in host.launches)
    keys = list(call.CALL.kernels)
    assert [len(k) for k in keys] == [9, 6, 9] and keys[0][6:] == (call.NO_WINDOW, False, False)


def test_a_repeated_call_checks_plans_and_packs_once(host):
    q, k, v = qkv()
    first = call.attention(q, k, v)
    call.attention(q, k, v)
    assert (host.plans, host.builds, len(host.launches)) == (1, 1, 2)
    (kernel, device, stream, grid, block, args, smem), again = host.launches
    assert (device, stream, grid, block, smem) == (0, 7, (12,), (384,), 1)  # 2*6 tiles of 100
    # Q's map, K's, V's (boxes of block_m and block_n rows, their own strides), the output,
    # the log-sum-exp (null: no gradient is needed, none is stored), B*H, Sq, Sk, the folded
    # scale, the group, the tile order (hg, snake: not causal, the default, which the kernel
    # does not read), the query heads, the output's strides (q's: contiguous)
    assert len(args) == 16
    assert args[:3] == (("map", q.ptr, 128, q.strides), ("map", k.ptr, 128, k.strides),
                        ("map", v.ptr, 128, v.strides))
    assert int(args[3]) == first.ptr and int(args[4]) == 0
    assert [int(a) for a in args[5:8]] == [12, 100, 77]
    assert math.isclose(float(args[8]), call.LOG2E / 8, rel_tol=1e-6) and int(args[9]) == 1
    assert [int(a) for a in args[10:]] == [8, 0, 6, 6 * 100 * 64, 100 * 64, 64]
    # the second call's new output is launched, with the same packed maps (no repacking)
    assert int(again[5][3]) != first.ptr and all(a is b for a, b in zip(args[:3], again[5][:3]))
    # new tensors of the same description: no check, no plan; their own maps
    q2, k2, v2 = qkv()
    call.attention(q2, k2, v2)
    assert host.plans == 1 and [m[1] for m in host.launches[-1][5][:3]] == [q2.ptr, k2.ptr,
                                                                            v2.ptr]
    assert not host.ops  # plain CUDA tensors never went through the op's dispatch


def _refused(case):
    """(the arguments of a call that is accepted and cached, the same call with one thing
    the checks read changed so that they refuse it, the start of the refusal)."""
    q, k, v = qkv()
    good = ((q, k, v), {})
    other = {
        "dtype": ((Tensor(q.shape, "torch.float32"), k, v), {}, "attention: q: dtype"),
        "dtype pair": ((q, Tensor(k.shape, "torch.float16"), v), {}, "attention: k: dtype"),
        "device": ((q, k, Tensor(v.shape, device=Device("cuda", 1))), {}, "attention: v: on cuda:1"),
        "on the CPU": ((Tensor(q.shape, device=Device("cpu", None)), k, v), {},
                       "attention: q: a CPU tensor"),
        "head dim": (qkv(d=300), {}, "attention: q: head dim 300"),  # 80 runs padded
        "rank": ((Tensor((12, 100, 64)), k, v), {}, "attention: q: shape (12, 100, 64)"),
        "k and v": ((q, k, Tensor((2, 6, 78, 64))), {}, "attention: v: shape"),
        "gqa group": (qkv(hkv=4), {}, "attention: k: 4 heads for q's 6"),
        "empty query": (qkv(sq=0), {}, "attention: q: sequence length 0"),
        "scale nan": ((q, k, v), {"scale": math.nan}, "attention: scale: nan"),
        "scale zero": ((q, k, v), {"scale": 0.0}, "attention: scale: 0.0"),
        "scale negative": ((q, k, v), {"scale": -0.125}, "attention: scale: -0.125"),
        "scale unhashable": ((q, k, v), {"scale": [0.5]}, "attention: scale: [0.5]"),
        "causal unknown": ((q, k, v), {"causal": "bottom-right"}, "attention: causal: 'bottom-r"),
        "causal unhashable": ((q, k, v), {"causal": ["top_left"]}, "attention: causal: ['top"),
    }
    if case == "causal one":  # 1 == True and hash(1) == hash(True): the key holds the type
        return ((q, k, v), {"causal": True}), ((q, k, v), {"causal": 1}), "attention: causal: 1"
    if case == "scale decimal":  # Decimal("0.5") == 0.5 and hashes alike; the checks refuse it
        return (((q, k, v), {"scale": 0.5}), ((q, k, v), {"scale": Decimal("0.5")}),
                "attention: scale: Decimal('0.5')")
    args, kw, needle = other[case]
    return good, (args, kw), needle


CASES = ["dtype", "dtype pair", "device", "on the CPU", "head dim", "rank",
         "k and v", "gqa group", "empty query", "scale nan", "scale zero", "scale negative",
         "scale unhashable", "causal unknown", "causal unhashable", "causal one", "scale decimal"]


@pytest.mark.parametrize("case", CASES)
def test_a_cached_call_never_skips_a_check_that_refuses(host, case):
    (args, kw), (bad_args, bad_kw), needle = _refused(case)
    call.attention(*args, **kw)
    call.attention(*args, **kw)
    assert host.plans == 1  # cached
    with pytest.raises(AttentionArgumentError) as info:
        call.attention(*bad_args, **bad_kw)
    assert str(info.value).startswith(needle) and "\n" not in str(info.value)
    # and through the op's own implementation (the non-eager path's op runs _run)
    with pytest.raises(AttentionArgumentError, match="^attention: "):
        call._run(*bad_args, bad_kw.get("causal", False), bad_kw.get("scale"))


def test_the_key_tells_apart_every_field_the_checks_and_the_launch_read():
    q, k, v = qkv()

    def key(q=q, k=k, v=v, causal=False, scale=None, stream=7):
        return call._attention_key(q, k, v, causal, scale, stream)

    # another address, as aligned: the same description
    assert key(q=Tensor(q.shape, ptr=q.ptr + 4096)) == key()
    others = [key(q=Tensor(q.shape, ptr=q.ptr + 8)),  # TMA's 16-byte alignment
              key(q=Tensor((2, 6, 101, 64))), key(k=Tensor((2, 3, 77, 64))),
              key(v=Tensor(v.shape, strides=(6 * 77 * 64, 64, 1, 77))),
              key(k=Tensor(k.shape, "torch.float16")), key(v=Tensor(v.shape, device=Device("cuda", 1))),
              key(causal=True), key(causal=1), key(causal="bottom_right"), key(scale=0.5),
              key(scale=1), key(scale=1.0), key(stream=8)]
    assert len({key(), *others}) == 1 + len(others)


def test_accepted_variants_get_their_own_plan(host):
    q, k, v = qkv()
    for kw in ({}, {"causal": True}, {"causal": "bottom_right"}, {"scale": 0.5}):
        call.attention(q, k, v, **kw)
    assert host.plans == 4 and host.builds == 3  # the scale is an argument, not a kernel
    kernels = [launch[0] for launch in host.launches]
    # (77 keys: the short-sequence tile)
    assert kernels[1][2:] == (True, "top_left", True) and kernels[2][2:] == (True, "bottom_right",
                                                                             True)
    assert math.isclose(float(host.launches[3][5][8]), 0.5 * call.LOG2E, rel_tol=1e-6)
    host.state.stream = 8  # another stream: its own recipe, launched there
    call.attention(q, k, v)
    assert host.plans == 5 and host.launches[-1][2] == 8


@pytest.mark.parametrize("why", ["compiling", "dispatch mode", "subclass", "requires grad"])
def test_the_fast_path_is_not_taken_under_tracing_or_dispatch(host, monkeypatch, why):
    q, k, v = qkv()
    if why == "compiling":
        host.state.compiling = True
    elif why == "dispatch mode":
        host.state.dispatch_modes = 1
    elif why == "subclass":
        q = Subclass(q.shape)
    else:
        k = Tensor(k.shape, requires_grad=True)
    monkeypatch.setattr(call, "_run", lambda *a: pytest.fail("took the eager path"))
    call.attention(q, k, v, causal=True, scale=0.5)
    assert len(host.ops) == 1 and host.ops[0][3:] == ("top_left", 0.5, False)
    # outside tracing and dispatch modes the checks still run before the op (one line each);
    # traced, or under a mode (AOTAutograd traces a backward under its fake mode, whose tensors
    # have no address for the checks' description), the op's fake or impl runs them
    assert host.plans == (0 if why in ("compiling", "dispatch mode") else 1)


def test_a_tensor_needing_a_gradient_takes_the_eager_path_where_grad_mode_is_off(host,
                                                                                 monkeypatch):
    """Under torch.no_grad() (or inside a backward) nothing needs a gradient: a k that
    requires grad is launched straight away, as plain tensors are, with no op dispatch."""
    q, k, v = qkv()
    k = Tensor(k.shape, requires_grad=True)
    monkeypatch.setattr(sys.modules["torch"], "is_grad_enabled", lambda: False)
    call.attention(q, k, v, causal=True)
    assert not host.ops and len(host.launches) == 1


def test_a_swapped_kernel_is_launched_by_a_cached_recipe(host):
    """The benchmarks swap ``CALL.kernels``'s entries (ablations, mutants): a cached recipe
    launches what is there now."""
    q, k, v = qkv()
    call.attention(q, k, v)
    (key,) = call.CALL.kernels
    other = call.AttentionKernel(kernel="mutant", smem=2, threads=256, block_m=64, block_n=64)
    call.CALL.kernels[key] = other
    call.attention(q, k, v)
    kernel, _, _, grid, block, args, smem = host.launches[-1]
    assert (kernel, grid, block, smem, host.plans) == ("mutant", (24,), (256,), 2, 1)
    call.CALL.kernels.clear()  # cleared: built again
    call.attention(q, k, v)
    assert host.builds == 2


def test_short_and_long_keys_get_kernels_of_their_own(host):
    """The call takes the short-sequence tile up to SHORT_KEYS keys and the long one past it
    (call.SHORT_TILES): each is a kernel of its own, built once and launched for every call
    on its side of the line; the line is the key length, not the query length."""
    edge = call.SHORT_KEYS
    call.attention(*qkv(sq=100, sk=edge))
    call.attention(*qkv(sq=100, sk=edge + 1))
    call.attention(*qkv(sq=4096, sk=77))  # many queries, few keys: short
    call.attention(*qkv(sq=100, sk=4 * edge))
    assert host.built == [(64, False, "top_left", True), (64, False, "top_left", False)]
    short, long = ("kernel", 64, False, "top_left", True), ("kernel", 64, False, "top_left", False)
    assert [launch[0] for launch in host.launches] == [short, long, short, long]
    assert len(call.CALL.kernels) == 2 and {key[4] for key in call.CALL.kernels} == {True, False}
    call.attention(*qkv(sk=edge + 1), causal="bottom_right")
    assert host.built[-1] == (64, True, "bottom_right", False)


def test_a_head_dim_without_a_short_tile_shares_one_kernel_across_lengths(host, monkeypatch):
    """A (head dim, causal) with no entry in call.SHORT_TILES runs the same tile at every key
    length, so a short and a long call share one kernel rather than building it twice; with
    an entry, the two lengths get a kernel each."""
    monkeypatch.delitem(call.SHORT_TILES, (128, False))
    assert (128, True) in call.SHORT_TILES
    call.attention(*qkv(sk=77, d=128))
    call.attention(*qkv(sk=4 * call.SHORT_KEYS, d=128))
    assert host.built == [(128, False, "top_left", False)]
    assert len(host.launches) == 2 and len(call.CALL.kernels) == 1
    call.attention(*qkv(sk=77, d=128), causal=True)
    call.attention(*qkv(sk=4 * call.SHORT_KEYS, d=128), causal=True)
    assert host.built[1:] == [(128, True, "top_left", True), (128, True, "top_left", False)]
    assert len(call.CALL.kernels) == 3


def _sizes(launch):
    """The sizes a launch packed after the output's and the log-sum-exp's addresses, as ints
    (the scale dropped): B*H, Sq, Sk, the group, hg, snake (not the heads and the output's
    strides after them)."""
    args = launch[5]
    return tuple(int(a) for i, a in enumerate(args[5:12], 5) if i != 8)


def _expected_order(bh, sq, sk, align="top_left", sms=132, block_m=128, block_n=128):
    """tile_order.choose for a call's shape, over the plan's trips (the fake build's tile)."""
    b = LoopBounds(causal=True, block_m=block_m, block_n=block_n, align=align)
    mt = -(-sq // block_m)
    trips = [b.trips(i, sq, sk) for i in range(mt)]
    return tile_order.choose(trips, bh=bh, grid=min(bh * mt, sms), np=__import__("numpy"))


@pytest.mark.parametrize("sq,sk,hq,causal", [
    (4096, 4096, 32, True),  # 64 heads of 32 query blocks on 132 CTAs: groups of 8 do not pay
    (1000, 3000, 12, "bottom_right"),
    (3000, 1000, 6, "bottom_right"),  # query blocks that see no key
    (100, 77, 6, True),  # fewer tiles than SMs
])
def test_a_causal_call_packs_the_tile_order_chosen_for_its_shape(host, sq, sk, hq, causal):
    """The causal call's last two arguments are tile_order.choose's (hg, snake) over its plan's
    trips and grid; a call not causal packs the default (8, 0); the grid is min(tiles, SMs)."""
    q, k, v = qkv(sq=sq, sk=sk, d=128, hq=hq, hkv=hq)
    call.attention(q, k, v, causal=causal)
    bh, mt = 2 * hq, -(-sq // 128)
    want = _expected_order(bh, sq, sk, "bottom_right" if causal == "bottom_right" else "top_left")
    launch = host.launches[-1]
    assert launch[3] == (min(bh * mt, 132),)
    assert _sizes(launch) == (bh, sq, sk, 1, want.hg, int(want.snake))
    if (sq, sk) == (4096, 4096):
        assert want != TileOrder()  # the choice is not the default here: the call packed it
    call.attention(q, k, v)
    assert _sizes(host.launches[-1])[-2:] == (8, 0)


def test_the_packed_order_is_chosen_for_the_devices_sm_count(host, monkeypatch):
    """On a device of 114 SMs (the H100 PCIe) the grid is 114 CTAs and the order the one
    chosen for it, which is not the one for 132."""
    monkeypatch.setitem(kit_call._SMS, 0, 114)
    q, k, v = qkv(sq=4096, sk=4096, d=128, hq=32, hkv=32)
    call.attention(q, k, v, causal=True)
    want = _expected_order(64, 4096, 4096, sms=114)
    assert want != _expected_order(64, 4096, 4096, sms=132)
    assert host.launches[-1][3] == (114,)
    assert _sizes(host.launches[-1])[-2:] == (want.hg, int(want.snake))


def test_the_order_is_chosen_once_per_recipe_and_kernel_not_per_address(host, monkeypatch):
    """New tensors of one argument description pack new arguments but keep the order chosen
    for the description and its kernel (tile_order.choose runs once for them)."""
    chosen = []
    real = call.choose
    monkeypatch.setattr(call, "choose", lambda *a, **kw: chosen.append(1) or real(*a, **kw))
    for _ in range(3):
        call.attention(*qkv(sq=4096, sk=4096, d=128, hq=32, hkv=32), causal=True)
    orders = {_sizes(launch)[-2:] for launch in host.launches}
    assert len(chosen) == 1 and len(host.launches) == 3 and len(orders) == 1
    call.attention(*qkv(sq=1024, sk=1024, d=128, hq=32, hkv=32), causal=True)
    assert len(chosen) == 2  # another description: chosen for it


def test_the_packed_order_follows_the_call_order_override(host, monkeypatch):
    """call.ORDER (a benchmark's ablation) wins over the call's choice, causal or not, once
    the packed arguments cached for the tensors' addresses are dropped; set back to None, the
    call's own choice returns."""
    q, k, v = qkv(sq=4096, sk=4096, d=128, hq=32, hkv=32)
    chosen = _expected_order(64, 4096, 4096)
    forced = TileOrder(hg=16, snake=True)
    assert chosen != forced
    call.attention(q, k, v, causal=True)
    assert _sizes(host.launches[-1])[-2:] == (chosen.hg, int(chosen.snake))
    monkeypatch.setattr(call, "ORDER", forced)
    call.attention(q, k, v, causal=True)  # the arguments packed for these addresses are kept
    assert _sizes(host.launches[-1])[-2:] == (chosen.hg, int(chosen.snake))
    call.CALL.args.clear()
    call.attention(q, k, v, causal=True)
    call.attention(q, k, v)
    assert [_sizes(launch)[-2:] for launch in host.launches[-2:]] == [(16, 1), (16, 1)]
    monkeypatch.setattr(call, "ORDER", None)
    call.CALL.args.clear()
    call.attention(q, k, v, causal=True)
    assert _sizes(host.launches[-1])[-2:] == (chosen.hg, int(chosen.snake))


def test_a_kernel_without_the_plans_bounds_packs_the_default_order(host):
    """A kernel without the plan's bounds (as a benchmark may put in CALL.kernels) runs causal
    in the default order (groups of 8, no snake) rather than failing."""
    q, k, v = qkv(sq=4096, sk=4096, d=128, hq=32, hkv=32)
    call.attention(q, k, v, causal=True)
    (key,) = call.CALL.kernels
    call.CALL.kernels[key] = call.AttentionKernel(kernel="bare", smem=1, threads=384,
                                                  block_m=128, block_n=128)
    call.attention(q, k, v, causal=True)
    assert host.launches[-1][0] == "bare" and _sizes(host.launches[-1])[-2:] == (8, 0)


def test_the_bounded_cache_drops_the_oldest():
    cache: launch_cache.Bounded[int] = launch_cache.Bounded(2)
    for i in range(3):
        cache.put(i, i)
    assert (cache.get(0), cache.get(1), cache.get(2), len(cache)) == (None, 1, 2, 2)
    cache.put(1, 10)  # an existing key is replaced, nothing dropped
    assert (cache.get(1), cache.get(2)) == (10, 2)


def test_the_varlen_call_packs_its_sequences_once_and_never_reads_them(host, monkeypatch):
    """attention_varlen's host path: checked and planned once per description, the lengths'
    tensors passed by address only (the kernel reads them: no sync), the maps over [1, H, total,
    D] views of the packed tensors' own strides, the grid bounded by max_seqlen_q; the LSE
    [H, total_q] stored only when asked (``return_lse``: its own recipe and a kernel built with
    the store, -p lse=true; otherwise a null LSE to a kernel with the store compiled out); plain
    CUDA tensors never go through the op's dispatch; a gradient refused in one line even on a
    cached description."""
    from pipeline_core_schedules_attention import varlen_call

    plans, builds = [], []
    plan = varlen_call.plan_varlen
    monkeypatch.setattr(varlen_call, "plan_varlen",
                        lambda *a, **kw: plans.append(1) or plan(*a, **kw))
    monkeypatch.setattr(varlen_call, "_build", lambda *key: builds.append(key) or
                        call.AttentionKernel(kernel=("varlen", *key), smem=1, threads=384,
                                             block_m=128, block_n=128))
    monkeypatch.setattr(varlen_call, "bhsd_map", lambda t, rows, dtype: ("map", t.data_ptr(), rows,
                                                                         t.shape, t.stride()))
    monkeypatch.setattr(varlen_call.VARLEN, "launcher", lambda *a: host.launches.append(a))
    monkeypatch.setattr(varlen_call.VARLEN, "ops", lambda: types.SimpleNamespace(
        attention_varlen=lambda *a: host.ops.append(a) or ("out", "lse")))
    for cache in (varlen_call.VARLEN.recipes, varlen_call.VARLEN.args, varlen_call.VARLEN.checked):
        monkeypatch.setattr(cache, "_items", {})
    monkeypatch.setattr(varlen_call.VARLEN.kernels, "_built", {})
    q, k, v = Tensor((300, 4, 64)), Tensor((400, 2, 64)), Tensor((400, 2, 64))
    cq, ck = Tensor((4,), "torch.int32"), Tensor((4,), "torch.int32")
    out = varlen_call.attention_varlen(q, k, v, cq, ck, 200, 250, causal="bottom_right")
    again, lse = varlen_call.attention_varlen(q, k, v, cq, ck, 200, 250, causal="bottom_right",
                                              return_lse=True)
    varlen_call.attention_varlen(q, k, v, cq, ck, 200, 250, causal="bottom_right")
    assert len(plans) == 2 and builds == [(64, "bf16", True, "bottom_right", True, False, 0),
                                          (64, "bf16", True, "bottom_right", True, True, 0)]
    (kernel, device, stream, grid, block, args, smem), second, third = host.launches
    assert grid == (3 * 4 * 2,) and kernel == ("varlen", *builds[0])  # B x H x ceil(200 / 128)
    assert second[0] == ("varlen", *builds[1]) and third[0] == kernel
    assert args[0] == ("map", q.ptr, 128, (1, 4, 300, 64), (300 * 256, 64, 256, 1))
    assert int(args[3]) == out.ptr and int(args[4]) == 0 and int(second[5][4]) == lse.ptr
    assert not host.ops
    assert lse.shape == (4, 300) and out.shape == q.shape
    assert [int(a) for a in args[5:10]] == [cq.ptr, ck.ptr, 3, 300, 400]  # B, TQ, TK
    assert math.isclose(float(args[10]), call.LOG2E / 8, rel_tol=1e-6)
    # group, the causal order's head groups and snake (the kernel has no bounds here: the
    # default), H, O's head and row strides
    assert [int(a) for a in args[11:]] == [2, 8, 0, 4, 64, 256]
    with pytest.raises(AttentionArgumentError) as info:
        varlen_call.attention_varlen(Tensor((300, 4, 64), requires_grad=True), k, v, cq, ck,
                                     200, 250)
    assert str(info.value).startswith("attention_varlen: q: needs a gradient")
