"""attention_bwd_main's checks (no GPU: tensors stood in by their shape, dtype, device and
layout): the contract's shapes plan, each bad argument is one line naming it, deterministic
plans the ordered kernel; the prebuild list covers every variant, deterministic ones too."""
from __future__ import annotations

import math

import attrs
import pytest

from pipeline_core_nvidia_h100.kit_api import declared_geometry
from pipeline_core_schedules_attention import bwd_call
from pipeline_core_schedules_attention.bwd_call import DQ_ROWS, plan_bwd
from pipeline_core_schedules_attention.bwd_schedule import KERNEL_FAMILY, BackwardGeometry
from pipeline_core_schedules_attention.call import AttentionArgumentError


@attrs.frozen
class T:
    """What the checks read of a tensor."""

    shape: tuple[int, ...]
    dtype: str = "torch.bfloat16"
    is_cuda: bool = True
    device: str = "cuda:0"
    contiguous: bool = True
    ptr: int = 1 << 20
    strides: tuple[int, ...] | None = None

    def is_contiguous(self) -> bool:
        return self.contiguous

    def stride(self, i: int) -> int:
        if self.strides is not None:
            return self.strides[i]
        return math.prod(self.shape[i + 1:]) if self.contiguous else 3

    def element_size(self) -> int:
        return 4 if self.dtype == "torch.float32" else 2

    def data_ptr(self) -> int:
        return self.ptr


def args(b=2, hq=4, hkv=2, sq=100, sk=300, d=128, **edit):
    sqp = -(-sq // DQ_ROWS) * DQ_ROWS
    out = dict(q=T((b, hq, sq, d)), k=T((b, hkv, sk, d)), v=T((b, hkv, sk, d)),
               do=T((b, hq, sq, d)), lse=T((b, hq, sqp), "torch.float32"),
               delta=T((b, hq, sqp), "torch.float32"),
               dq_accum=T((b, hq, sqp, d), "torch.float32"))
    out.update(edit)
    return out


def plan(causal=False, scale=0.125, deterministic=False, **edit):
    a = args(**edit)
    return plan_bwd(a["q"], a["k"], a["v"], a["do"], a["lse"], a["delta"], a["dq_accum"],
                    causal=causal, scale=scale, deterministic=deterministic)


def test_the_contracts_shapes_plan_with_the_group_and_padded_rows():
    c = plan(causal="bottom_right")
    assert (c.bhk, c.group, c.sq, c.sk, c.sqp, c.head_dim) == (4, 2, 100, 300, 128, 128)
    assert c.causal and c.align == "bottom_right" and c.dtype == "bf16"
    assert not plan().causal and plan(causal=True).align == "top_left"
    assert (c.kv_heads, c.copied, c.dk_order, c.dv_order) == (2, (), (0, 1, 2, 3), (0, 1, 2, 3))


def bshd(b, s, h, d):
    """A [B, H, S, D] view of a [B, S, H, D] buffer."""
    return T((b, h, s, d), strides=(s * h * d, d, h * d, 1))


def test_any_strides_plan_in_place_or_copied_once_and_the_gradients_take_their_layouts():
    """q, k, v and dO of any strides: a [B, S, H, D] view read in place (dK, dV in its
    layout), a stride TMA cannot take copied once (layout.py's rule, dO's too)."""
    c = plan(q=bshd(2, 100, 4, 128), k=bshd(2, 300, 2, 128), do=bshd(2, 100, 4, 128))
    assert (c.copied, c.dk_order, c.dv_order) == ((), (0, 2, 1, 3), (0, 1, 2, 3))
    assert c.grad_strides(c.dk_order) == (300 * 2 * 128, 128, 2 * 128, 1)
    odd = T((2, 2, 300, 128), strides=(2 * 300 * 130, 300 * 130, 130, 1))
    c = plan(v=odd, do=T((2, 4, 100, 128), ptr=(1 << 20) + 2))
    assert c.copied == ("v", "do") and c.dv_order == (0, 1, 2, 3)


def test_deterministic_plans_the_ordered_kernel_the_default_does_not():
    assert plan(deterministic=True).deterministic and not plan().deterministic
    assert bwd_call.call_params(128, True, "bottom_right", True) == {
        "head_dim": "128", "causal": "true", "align": "bottom_right", "deterministic": "true",
        "dq_cut": "columns", "dk_rs": "true"}


@pytest.mark.parametrize("edit, text", [
    (dict(deterministic=1), "deterministic: 1; pass True or False"),
    (dict(scale=0.0), "scale: 0.0"),
    (dict(causal="diagonal"), "causal: 'diagonal'"),
    (dict(q=T((2, 4, 100, 80))), "q: head dim 80; supported: 64, 96, 128, 192, 256"),
    # a head dim the forward takes and the backward does not: the way round named
    (dict(q=T((2, 4, 100, 96)), k=T((2, 2, 300, 96)), v=T((2, 2, 300, 96))),
     "q: head dim 96 has no backward yet \\(built for 64, 128\\); run the forward under "
     "torch.no_grad\\(\\), or for gradients pad q, k and v to D=128"),
    (dict(q=T((2, 4, 100, 256)), k=T((2, 2, 300, 256)), v=T((2, 2, 300, 256))),
     "q: head dim 256 has no backward yet .*scaled_dot_product_attention$"),
    (dict(k=T((2, 3, 300, 128)), v=T((2, 3, 300, 128))), "k: 3 heads for q's 4"),
    (dict(do=T((2, 4, 101, 128))), "do: torch.bfloat16 \\(2, 4, 101, 128\\) differs"),
    (dict(v=T((2, 2, 300, 128), "torch.float16")), "v: dtype torch.float16 differs"),
    (dict(lse=T((2, 4, 100), "torch.bfloat16")), "lse: torch.bfloat16"),
    (dict(dq_accum=T((2, 4, 100, 128), "torch.float32")), "dq_accum: .*bwd_call.DQ_ROWS"),
    # LSE and delta padded per head like the accumulator (the kernel's TMA boxes start on 16
    # bytes, which an unpadded head's rows at Sq = 100 do not)
    (dict(lse=T((2, 4, 100), "torch.float32")), "lse: .*\\(2, 4, 128\\) .*bwd_call.DQ_ROWS"),
    (dict(delta=T((2, 4, 128), "torch.float32", contiguous=False)), "delta: not a contiguous"),
    (dict(q=T((2, 4, 100, 128), is_cuda=False)), "q: a CPU tensor"),
])
def test_a_bad_argument_is_one_line_naming_it(edit, text):
    with pytest.raises(AttentionArgumentError, match=f"attention_bwd_main: {text}"):
        plan(**edit)


def test_the_prebuild_covers_every_variant_the_call_builds():
    assert len(bwd_call.VARIANTS) == 12
    assert {(v[0], v[2], v[3]) for v in bwd_call.VARIANTS} == {
        (d, c, a) for d in (64, 128)
        for c, a in ((False, "top_left"), (True, "top_left"), (True, "bottom_right"))}
    assert bwd_call.call_params(64, True) == {"head_dim": "64", "causal": "true",
                                              "align": "top_left", "dq_cut": "rows",
                                              "block_m": "128", "dk_rs": "true"}
    assert bwd_call.DETERMINISTIC_VARIANTS == tuple((*v, True) for v in bwd_call.VARIANTS)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])
def test_the_calls_kernels_hand_dq_over_through_joins_and_are_proven(head_dim, causal,
                                                                    deterministic):
    """Every call kernel cuts dQ by columns (D 128) or rows (D 64): one writer, its consumers
    and writer meeting in joins, dK's wgmma after dQ's with dS from registers; each compiles
    SAFE."""
    params = bwd_call.call_params(head_dim, causal, deterministic=deterministic)
    c = bwd_call.CALL.compile(params, bwd_call.CALL_STAGES)
    writers = [p.name for p in c.plan.programs if p.name.startswith("dq_writer")]
    assert writers == ["dq_writer0"]
    assert {o.name: o.scope for o in c.plan.orders} == {"dq0": "join", "ds": "join"}
    g = declared_geometry(c, KERNEL_FAMILY, BackwardGeometry, "test")
    assert g.dk_rs and g.dq_cut == ("rows" if head_dim == 64 else "columns")
    assert c.proof.verdict.safe


def test_the_causal_backward_orders_its_tiles_with_the_fewest_heads_among_ties(monkeypatch):
    """D 128 S 1k causal (256 heads of 8 KV blocks on 132 CTAs): the backward takes one head at
    a time with the snake where the forward's rule would keep the default (groups of 8): the
    tie-break bwd_call._order documents; each recipe's order is chosen once."""
    np = pytest.importorskip("numpy")
    from types import SimpleNamespace

    from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips
    from pipeline_core_schedules_attention.tile_order import TileOrder

    monkeypatch.setattr(bwd_call._ORDERS, "_items", {})
    plan = SimpleNamespace(deterministic=False, causal="top_left", sq=1024, sk=1024, group=1,
                           bhk=256)
    # a recipe and a kernel as the order's cache keys them: hashable by identity
    built = type("Built", (), {"bounds": BackwardTrips(causal=True, block_m=64, block_n=128)})()
    r = type("Recipe", (), {"plan": plan})()
    assert bwd_call._order(r, built, 132, np) == TileOrder(hg=1, snake=True)
    assert bwd_call._order(r, built, 132, np) is bwd_call._ORDERS.get((r, built))
