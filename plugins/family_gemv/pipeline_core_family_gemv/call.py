"""``gemv(a, x)``: ``y = a @ x`` on torch tensors.  The family brings its checks, tile choice,
build and packing (by the emitter's ``SIGNATURE``); the kit's ``HostCall`` the caches, launch,
custom op, fake and backward.  What TMA cannot read is copied (``tma_copy``), not refused."""
from __future__ import annotations

from typing import Any

import attrs

from pipeline_core_nvidia_h100.kit_api import (PLUGIN_MODULE, Built, HostCall, Launch, Op, Recipe,
                                               describe, require_gpu_module, sm_count,
                                               tensor_map, tma_copy, tma_readable)

from pipeline_core_family_gemv.emit import KERNEL_NAME, SIGNATURE, emit_gemv
from pipeline_core_family_gemv.schedule import BLOCK_K, NAME, GemvTrips

DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}
#: the ring depth per tile height: the target's deepest (5), or as many as fit (128 rows)
STAGES = {32: 5, 64: 5, 128: 3}


class GemvArgumentError(ValueError):
    """An argument ``gemv`` cannot run on (the message names it and the fix)."""


@attrs.frozen(kw_only=True)
class GemvCall:
    """One call's plan; ``copy_a``, ``copy_x``: the operands TMA cannot read where they lie."""

    m: int
    k: int
    dtype: str
    block_m: int
    copy_a: bool = False
    copy_x: bool = False


def plan_gemv(a: Any, x: Any, sms: int = 132) -> GemvCall:
    """The call's plan, or one :class:`GemvArgumentError` naming the argument at fault."""
    for name, t, dims in (("a", a, 2), ("x", x, 1)):
        if t.dim() != dims:
            raise GemvArgumentError(f"gemv: {name}: shape {tuple(t.shape)}; pass a {dims}-D "
                                    "tensor (a [M, K], x [K])")
        if str(t.dtype) not in DTYPES or t.dtype != a.dtype:
            raise GemvArgumentError(f"gemv: {name}: dtype {t.dtype}; pass torch.bfloat16 or "
                                    "torch.float16, the same for a and x")
        if not t.is_cuda or t.device != a.device:
            raise GemvArgumentError(f"gemv: {name}: on {t.device}; put a and x on one GPU")
    m, k = a.shape
    if x.shape[0] != k:
        raise GemvArgumentError(f"gemv: x: {x.shape[0]} elements for a's {k} columns; pass "
                                f"x of shape [{k}]")
    # the tallest tile that still gives every SM an output tile
    block_m = next(b for b in (128, 64, 32) if -(-m // b) >= sms or b == 32)
    return GemvCall(m=m, k=k, dtype=DTYPES[str(a.dtype)], block_m=block_m)


def _copies(c: GemvCall, a: Any, x: Any) -> GemvCall:
    return attrs.evolve(c, copy_a=not tma_readable(a),  # x: one row, its map's stride ours
                        copy_x=x.stride(0) != 1 or x.data_ptr() % 16 != 0)


def _build(key: tuple[int, str, int]) -> Built:
    block_m, dtype, device = key
    compiled = CALL.compile({"block_m": str(block_m)}, STAGES[block_m])
    return CALL.load(compiled, emit_gemv(compiled, dtype=dtype), KERNEL_NAME, device)


def _gemv_arguments(r: Recipe[GemvCall], kernels: tuple[Built, ...],
          tensors: tuple[Any, ...]) -> tuple[Launch, ...]:
    """The persistent grid (the trip rule's output tiles, at most one CTA per SM) and the
    arguments but y's address (packed per call)."""
    (built,), (a, x), c = kernels, tensors, r.plan
    tiles = len(GemvTrips(block_m=c.block_m, block_k=BLOCK_K).trip_counts((c.m, c.k)))
    values = {"tmA": tensor_map(a.data_ptr(), c.m, c.k, c.block_m, 64, c.dtype,
                                stride=a.stride(0)),
              # one row: its stride is never stepped, but TMA wants it 16-byte aligned
              "tmX": tensor_map(x.data_ptr(), 1, c.k, 1, BLOCK_K, c.dtype,
                                stride=-(-c.k // 8) * 8, swizzle=False),
              "M": c.m, "K": c.k}
    args = SIGNATURE.pack_around("Y", values, require_gpu_module("numpy"))
    return (Launch.of(built, (min(tiles, sm_count(r.device)),), *args),)


def _run(a: Any, x: Any) -> Any:
    r = CALL.recipe(a, (describe(a), describe(x)),
                    lambda device: _copies(plan_gemv(a, x, sm_count(device)), a, x),
                    lambda c, device: ((c.block_m, c.dtype, device),))
    c = r.plan
    y = a.new_empty(c.m)
    if c.k == 0 or c.m == 0:
        return y.zero_()
    a = tma_copy(a) if c.copy_a else a
    x = tma_copy(x[None])[0] if c.copy_x else x
    CALL.launch(r, (r, a.data_ptr(), x.data_ptr()), (a, x), y)
    return y


def _gemv_ops() -> tuple[Op, ...]:
    """``pipeline_core::gemv``: its fake runs the checks where torch.compile traces; its
    backward is dA = dy x^T, dx = A^T dy."""
    def fake(a: Any, x: Any) -> Any:
        plan_gemv(a, x)
        return a.new_empty(a.shape[0])

    def backward(ctx: Any, dy: Any) -> tuple[Any, Any]:
        a, x = ctx.saved_tensors
        return dy[:, None] * x[None, :], a.t().mv(dy)

    return (Op(name="pipeline_core::gemv", schema="(Tensor a, Tensor x) -> Tensor", impl=_run,
               fake=fake, backward=backward,
               setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs)),)


CALL: HostCall[GemvCall, Built] = HostCall(
    schedule=NAME, plugins=(PLUGIN_MODULE, "pipeline_core_family_gemv"), build=_build,
    pack=_gemv_arguments, ops=_gemv_ops)


def gemv(a: Any, x: Any) -> Any:
    """``a @ x`` for a [M, K] and x [K] (bf16 or fp16, any strides), fp32 accumulation, y [M]
    in their dtype; on torch's current stream, differentiable, traceable by torch.compile."""
    return CALL.call("gemv", _run, plan_gemv, (a, x))


# the ops registered now where torch is imported already (HostCall.register_if_torch_imported)
CALL.register_if_torch_imported()
