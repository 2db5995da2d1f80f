"""``attention()`` differentiable: the family's two torch custom ops, registered by the kit's
call layer (``HostCall.ops``, ``kit.call.register_op``: the fake, and the backward through
``torch.library.register_autograd``) on the first call that needs them.

* ``pipeline_core::attention(q, k, v, causal, scale, deterministic) -> (o, lse)``: the
  forward kernel (``call._run``) with each row's log-sum-exp saved (the contract's ``lse``:
  [B, H, Sq] fp32, natural log of the scaled scores' sum, +inf for a row that sees no key).
  ``attention()`` returns ``o``; ``lse`` is marked non-differentiable.  ``deterministic`` is
  the backward's, carried here so the saved context holds it.
* ``pipeline_core::attention_bwd(q, k, v, o, lse, dout, causal, scale, deterministic) ->
  (dq, dk, dv)``: three kernels on torch's current stream, FlashAttention-3's cut
  (docs/guide/attention.md, "Backward and training"): the preprocess (``bwd_prepost``: delta =
  rowsum(dO * O), the fp32 dQ accumulator zeroed), the main kernel
  (``bwd_call.attention_bwd_main``: dK, dV, and dQ added into the accumulator), the
  postprocess (the accumulator cast to q's dtype).

Why custom ops with a registered backward: torch.compile (``fullgraph=True``) traces an op
by its fake and its backward by the registered formula, so forward and backward land in one
graph without a break, and CUDA graphs capture the launches as they are (every launch is on
the current stream, every allocation through torch's allocator).  Outside tracing an eager
call runs the same functions through the forward op's eager twin, a plain
``torch.autograd.Function`` (``kit.call.autograd_function``), and the backward calls its
impl directly: through the ops a causal training step at D 128 S 1k cost the calling thread
307 us of CPU against the twin's 167 (the function's docstring), and there the host set the
pace.  The backward op takes dO of any strides and offset
(autograd hands expanded, transposed or sliced gradients), as the forward takes q, k and v:
read in place where the kernels' TMA and 16-byte loads can, else copied once
(``layout.readable``, the one rule for every operand); dq, dk and dv come back in q's, k's and
v's layouts.
"""
from __future__ import annotations

from typing import Any

from pipeline_core_nvidia_h100.kit_api import Op

from pipeline_core_schedules_attention import bwd_prepost, call
from pipeline_core_schedules_attention.bwd_call import attention_bwd_main
from pipeline_core_schedules_attention.layout import (empty_in_order, empty_like_layout,
                                                      order_of, readable)

#: the op's causal (a schema has no bool-or-str) as the calls take it
_CAUSAL = call.OP_CAUSAL


class AttentionBackwardError(ValueError):
    """A backward that cannot run (the message names what is at fault and the fix)."""


def _forward(q: Any, k: Any, v: Any, causal: str, scale: float | None,
             deterministic: bool) -> tuple[Any, Any]:
    out, lse = call._run(q, k, v, _CAUSAL[causal], scale, lse=True)
    return out, lse


def _forward_fake(q: Any, k: Any, v: Any, causal: str, scale: float | None,
                  deterministic: bool) -> tuple[Any, Any]:
    import torch  # type: ignore[import-not-found, unused-ignore]

    # the argument checks, where torch.compile traces the call (attention() skips them)
    call.plan_attention(q, k, v, causal=_CAUSAL[causal], scale=scale)
    # q's layout, as the kernel's output (layout.py), of v's head dim
    return (empty_in_order(torch, (*q.shape[:-1], v.shape[-1]), order_of(q), q),
            q.new_empty(tuple(q.shape[:3]), dtype=torch.float32))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, Any]) -> None:
    q, k, v, causal, scale, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.deterministic = causal, deterministic
    ctx.scale = call.softmax_scale(q.shape[-1], scale)  # the forward's, bit for bit
    ctx.mark_non_differentiable(lse)


def _backward(ctx: Any, do: Any, dlse: Any) -> tuple[Any, ...]:
    q, k, v, o, lse = ctx.saved_tensors
    # the kit's call: in a backward grad mode is off, so plain tensors go straight to the
    # impl (no dispatch: host time, autograd.py's docstring); where torch.compile traces the
    # formula, through the op
    dq, dk, dv = call.CALL.call("attention_bwd", _backward_impl, _check_backward_call,
                                (q, k, v, o, lse, do), ctx.causal, ctx.scale,
                                ctx.deterministic)
    return dq, dk, dv, None, None, None


def _check_backward_call(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any,
                         *rest: Any) -> None:
    check_backward(o, do)


def check_backward(o: Any, do: Any) -> None:
    """dO's refusals, one line each: its shape and dtype are the output's (any strides)."""
    if tuple(do.shape) != tuple(o.shape):
        raise AttentionBackwardError(f"attention backward: dO: shape {tuple(do.shape)} differs "
                                     f"from the output's {tuple(o.shape)}; pass o's gradient")
    if do.dtype != o.dtype:
        raise AttentionBackwardError(f"attention backward: dO: dtype {do.dtype} differs from "
                                     f"the output's {o.dtype}; cast it")


def _backward_impl(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: str,
                   scale: float, deterministic: bool) -> tuple[Any, Any, Any]:
    check_backward(o, do)
    # the one rule (layout.py): o is the forward's (read in place); dO any autograd hands
    o, do = readable(o), readable(do)
    lse_pad, delta, dq_accum = bwd_prepost.preprocess(o, do, lse)
    dk, dv = attention_bwd_main(q, k, v, do, lse_pad, delta, dq_accum, causal=_CAUSAL[causal],
                                scale=scale, deterministic=deterministic)
    return bwd_prepost.postprocess(dq_accum, q), dk, dv


def _backward_fake(q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, causal: str,
                   scale: float, deterministic: bool) -> tuple[Any, Any, Any]:
    check_backward(o, do)
    import torch  # type: ignore[import-not-found, unused-ignore]

    # the kernels' layouts: each gradient its input's (layout.py)
    return empty_like_layout(torch, q), empty_like_layout(torch, k), empty_like_layout(torch, v)


def attention_ops() -> tuple[Op, ...]:
    """The forward op with its backward registered, and the backward op (``call.CALL``
    registers them on first use)."""
    return (Op(name="pipeline_core::attention", impl=_forward, fake=_forward_fake,
               schema="(Tensor q, Tensor k, Tensor v, str causal, float? scale, "
                      "bool deterministic) -> (Tensor, Tensor)",
               backward=_backward, setup_context=_setup_context),
            Op(name="pipeline_core::attention_bwd", impl=_backward_impl, fake=_backward_fake,
               schema="(Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor dout, "
                      "str causal, float scale, bool deterministic) -> (Tensor, Tensor, Tensor)"))
