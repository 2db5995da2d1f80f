"""Attention on tensors of any strides (layout.py, docs/guide/attention.md "Strides"), on the
CPU with test_call_launch.py's stand-ins: which operands the plan reads in place and which it
copies once, the output's layout (q's, as SDPA's), and what the launch packs for each."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeline_core_schedules_attention import call, layout

_SPEC = importlib.util.spec_from_file_location(
    "attention_call_launch_tests_layout", Path(__file__).with_name("test_call_launch.py"))
assert _SPEC is not None and _SPEC.loader is not None
launch_tests = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(launch_tests)
Tensor, bshd, strides_of = launch_tests.Tensor, launch_tests.bshd, launch_tests.strides_of
host = launch_tests.host

B, HQ, HKV, SQ, SK, D = 2, 8, 4, 77, 1000, 64


def dense(h, s):
    return Tensor((B, h, s, D))


def heads_sliced(h, s):
    """Every other head of a [B, 2h, S, D] tensor (q[:, ::2])."""
    return Tensor((B, h, s, D), strides=(2 * h * s * D, 2 * s * D, D, 1))


def odd_rows(h, s):
    """Rows D + 1 elements apart (130 bytes: not a multiple of 16)."""
    return Tensor((B, h, s, D), strides=(h * s * (D + 1), s * (D + 1), D + 1, 1))


def unit_last_not(h, s):
    """Every other element of the head dim (a stepped D: last stride 2)."""
    return Tensor((B, h, s, D), strides=(h * s * 2 * D, s * 2 * D, 2 * D, 2))


def misaligned(h, s):
    return Tensor((B, h, s, D), ptr=(1 << 40) + 2)


#: (q, k, v, the operands copied, the output's dimension order)
LAYOUTS = {
    "contiguous": (dense(HQ, SQ), dense(HKV, SK), dense(HKV, SK), (), (0, 1, 2, 3)),
    "bshd": (bshd(B, SQ, HQ, D), bshd(B, SK, HKV, D), bshd(B, SK, HKV, D), (), (0, 2, 1, 3)),
    "heads sliced": (heads_sliced(HQ, SQ), heads_sliced(HKV, SK), dense(HKV, SK), (),
                     (0, 1, 2, 3)),
    "odd row stride": (odd_rows(HQ, SQ), dense(HKV, SK), dense(HKV, SK), ("q",),
                       (0, 1, 2, 3)),
    "stepped head dim": (dense(HQ, SQ), unit_last_not(HKV, SK), dense(HKV, SK), ("k",),
                         (0, 1, 2, 3)),
    "misaligned": (dense(HQ, SQ), dense(HKV, SK), misaligned(HKV, SK), ("v",), (0, 1, 2, 3)),
    "mixed": (bshd(B, SQ, HQ, D), dense(HKV, SK), odd_rows(HKV, SK), ("v",), (0, 2, 1, 3)),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_plan_reads_in_place_what_tma_can_and_copies_the_rest(name):
    q, k, v, copied, order = LAYOUTS[name]
    c = call.plan_attention(q, k, v)
    assert (c.copied, c.out_order, c.heads, c.group) == (copied, order, HQ, HQ // HKV)
    assert c.out_strides == {(0, 1, 2, 3): strides_of((B, HQ, SQ, D)),
                             (0, 2, 1, 3): (SQ * HQ * D, D, HQ * D, 1)}[order]


@pytest.mark.parametrize("name", LAYOUTS)
def test_the_launch_maps_each_operand_where_it_is_read_and_writes_o_in_qs_layout(host, name):
    q, k, v, copied, order = LAYOUTS[name]
    out = call.attention(q, k, v, causal=True)
    (_, _, _, _, _, args, _), = host.launches
    for i, (n, t) in enumerate((("q", q), ("k", k), ("v", v))):
        _, ptr, rows, strides = args[i]
        if n in copied:  # its copy's map: a new dense tensor
            assert ptr != t.ptr and strides == strides_of(t.shape)
        else:  # its own: the tensor's address and strides
            assert (ptr, strides) == (t.ptr, t.strides)
        assert rows == 128
    # the output: q's layout, its strides packed for the kernel's stores
    assert out.shape == q.shape and layout.order_of(out) == order
    assert [int(a) for a in args[12:]] == [HQ, *out.strides[:3]]
    assert int(args[3]) == out.ptr


def test_a_bshd_output_is_dense_in_bshd():
    """torch.empty of the permuted shape, permuted back: q's strides exactly."""
    q = bshd(B, SQ, HQ, D)
    assert call.plan_attention(q, q, q).out_strides == q.strides


def test_the_stride_order_ties_keep_the_dimensions_order():
    """A dimension of one index ties with the next (a stride equal to it): dimension order."""
    assert layout.order_of(Tensor((1, 1, SQ, D))) == (0, 1, 2, 3)
    assert layout.dense_strides((B, HQ, SQ, D), (0, 2, 1, 3)) == (SQ * HQ * D, D, HQ * D, 1)


def test_every_copied_operand_is_read_dense_and_aligned():
    for make in (odd_rows, unit_last_not, misaligned):
        t = make(HKV, SK)
        got = layout.readable(t)
        assert got is not t and layout.in_place(got) and got.copied_from is t
    t = bshd(B, SK, HKV, D)
    assert layout.readable(t) is t


class Fake(Tensor):
    """torch.compile's FakeTensor: no storage, its address raises."""

    def data_ptr(self):
        raise RuntimeError("Cannot access data pointer of Tensor (e.g. FakeTensor)")


def test_a_tensor_without_storage_is_planned_as_the_ops_fake_plans_it():
    """The op's fake runs plan_attention under tracing: the plan is made, nothing raised."""
    q = Fake((B, HQ, SQ, D))
    c = call.plan_attention(q, dense(HKV, SK), dense(HKV, SK))
    assert c.copied == ("q",) and c.out_order == (0, 1, 2, 3)
