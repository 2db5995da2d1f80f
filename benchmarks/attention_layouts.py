"""The layouts models hand ``attention()`` (issue 37), for the GPU checks of the forward
(``attention_call.py --phase strides``) and the backward (``attention_bwd.py --phase strides``):
each a [B, H, S, D] tensor of fresh random values, a view of a buffer laid out as models hold
it, and what the call must give back (an output or gradient in its input's layout, as SDPA's).

* ``contiguous``: [B, H, S, D] as it is;
* ``bshd``: ``x.view(B, S, H, D).transpose(1, 2)``, FlashAttention's native layout (read in
  place: TMA maps of the tensor's own strides);
* ``heads``: every other head of a [B, 2H, S, D] tensor (``x[:, ::2]``: not dense, read in
  place; its output dense in the same dimension order);
* ``copy``: rows D + 4 elements apart (``x[..., :D]`` of a [B, H, S, D + 4] tensor: a stride of
  136 or 264 bytes, not a multiple of 16, which TMA cannot take: copied once);
* ``mixed``: q ``bshd``, k ``contiguous``, v ``heads`` (and, in the backward, dO ``copy``).
"""
from __future__ import annotations

from typing import Any

#: the layouts every strided check runs
LAYOUTS = ("contiguous", "bshd", "heads", "copy", "mixed")
#: the layout of q, k, v (and dO) per check
OPERANDS = {"mixed": ("bshd", "contiguous", "heads", "copy")}


def operand_layouts(kind: str) -> tuple[str, str, str, str]:
    """The layouts of q, k, v and dO for check ``kind``."""
    return OPERANDS.get(kind, (kind,) * 4)  # type: ignore[return-value]


def tensor(torch: Any, b: int, h: int, s: int, d: int, dtype: Any, kind: str,
           requires_grad: bool = False) -> Any:
    """A [B, H, S, D] view in layout ``kind`` of fresh N(0, 1) values; with ``requires_grad``
    its buffer is the leaf, so the gradient autograd hands back for the view is the one the
    backward returned (in the view's layout)."""
    shape = {"contiguous": (b, h, s, d), "bshd": (b, s, h, d), "heads": (b, 2 * h, s, d),
             "copy": (b, h, s, d + 4)}[kind]
    base = torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_(requires_grad)
    if kind == "bshd":
        return base.transpose(1, 2)
    if kind == "heads":
        return base[:, ::2]
    if kind == "copy":
        return base[..., :d]
    return base


def strided_cases() -> list[tuple]:
    """(layout, B, Hq, Hkv, Sq, Sk, D, dtype, causal): every layout x head dim x dtype x
    causal mode (off, top-left, bottom-right), the lengths (tails of both block sizes, Sq !=
    Sk in half) and grouped-query heads (in half) rotating through them."""
    seqs = ((77, 77), (1000, 77), (77, 1000), (1000, 1000))
    out: list[tuple] = []
    for kind in LAYOUTS:
        for d in (64, 128):
            for dtype in ("bf16", "fp16"):
                for causal in (False, "top_left", "bottom_right"):
                    i = len(out)
                    out.append((kind, 2, 4, 2 if i % 2 else 4, *seqs[i % len(seqs)], d, dtype,
                                causal))
    return out


def run_all(cases: list[tuple], run: Any, emit: Any, kind: str) -> list[dict]:
    """Each case's record (``run(case)``), or one line naming the error it raised (the run
    goes on), each emitted as it comes."""
    done = []
    for case in cases:
        try:
            rec = run(case)
        except Exception as exc:  # noqa: BLE001 - one line, and the run goes on
            rec = {"kind": kind, "case": list(case), "ok": False,
                   "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        emit(rec)
        done.append(rec)
    return done


def order(t: Any) -> tuple[int, ...]:
    """``t``'s dimensions from the outermost stride in, the last one last (ties: in order)."""
    st = t.stride()
    return (*sorted(range(t.dim() - 1), key=lambda i: (-st[i], i)), t.dim() - 1)


def same_layout(out: Any, like: Any) -> bool:
    """Whether ``out`` is laid out as the call must give it for input ``like``: dense, in
    ``like``'s dimension order (so ``like``'s very strides where ``like`` is dense)."""
    o = order(like)
    return order(out) == o and out.permute(*o).is_contiguous()
