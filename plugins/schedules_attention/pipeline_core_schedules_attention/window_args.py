"""``attention()``'s ``window=`` and ``softcap=`` arguments: their checks, each one line, and
what the kernel compiles for them (docs/guide/attention.md, "Sliding windows and softcap").

FlashAttention's semantics: ``window=(left, right)`` lets query row ``r`` see keys ``r + offset
- left .. r + offset + right`` (-1: unbounded on that side; ``offset`` the diagonal's, 0
top-left and ``Sk - Sq`` bottom-right), and with the causal mask the right reach is 0.  Without
``causal`` a window aligns bottom-right, as FlashAttention's does (the two agree when the
lengths are equal).  ``softcap`` caps the scaled scores, ``softcap * tanh(S * scale /
softcap)``, before the softmax.  The backward of either is not built: a call that needs a
gradient is refused in one line.
"""
from __future__ import annotations

import math
from typing import Any

import attrs

#: no window: both reaches unbounded
NO_WINDOW = (-1, -1)
#: the widest reach a kernel compiles (2^28 keys: the kernel's int arithmetic on a row, its
#: offset and both reaches stays below 2^31); -1 is unbounded
MAX_REACH = 1 << 28


def kernel_window(window: object, align: str | None, fail: Any) -> tuple[tuple[int, int], str]:
    """The (left, right) reaches the kernel compiles (``-p window_left``, ``window_right``:
    right -1 under the causal mask, which is a right reach of 0; (-1, -1) for no window) and
    the alignment (``align``, the causal one, or bottom-right for a window without the mask),
    or one ``fail(name, why)`` error naming what is wrong with ``window``."""
    if window is None:
        return NO_WINDOW, align or "top_left"
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in window)):
        raise fail("window", f"{window!r}; pass (left, right), two ints (-1: unbounded), "
                             "or None")
    left, right = (int(x) for x in window)
    if left < -1 or right < -1:
        raise fail("window", f"{tuple(window)!r}: a reach below -1; pass reaches >= 0, or -1 "
                             "for unbounded on that side")
    if max(left, right) > MAX_REACH:
        raise fail("window", f"{tuple(window)!r}: a reach over {MAX_REACH}; pass -1 for "
                             "unbounded on that side")
    if align is not None:  # the causal mask: a right reach of 0
        return (left, -1), align
    return ((left, right), "bottom_right") if (left, right) != NO_WINDOW else (NO_WINDOW,
                                                                               "top_left")


def check_softcap(softcap: object, fail: Any) -> float:
    """The cap (0.0: none), or one error line."""
    if softcap is None:
        return 0.0
    if (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
            or not math.isfinite(softcap) or softcap <= 0):
        raise fail("softcap", f"{softcap!r}; pass a positive finite float, or None for no cap")
    return float(softcap)


@attrs.frozen(kw_only=True)
class Masking:
    """Which keys each row sees and how its scores are capped, as a call's plan carries it
    (``attention()``'s AttentionCall and ``attention_varlen``'s VarlenCall alike, made by
    :func:`plan_masking`): the causal mask and where its diagonal sits, the reaches the kernel
    compiles (:func:`kernel_window`), the cap (0.0: none) and, with one, the kernel's
    ``softcap_scale``, the scores' scale over the cap."""

    causal: bool
    align: str = "top_left"
    window: tuple[int, int] = NO_WINDOW
    softcap: float = 0.0
    softcap_scale: float = 0.0

    @property
    def windowed(self) -> bool:
        return self.window != NO_WINDOW

    @property
    def tiles_vary(self) -> bool:
        """Whether the query tiles' KV blocks differ (causal or windowed): the tile order is
        chosen and the causal tiles taken."""
        return self.causal or self.windowed

    def exponent_scale(self, scale: float) -> float:
        """What the softmax's exponent scales the (capped) scores by: the cap, whose tanh is
        of the scores already scaled (``softcap_scale``), or else the softmax's ``scale``."""
        return self.softcap or scale


def plan_masking(mask: str | None, window: object, softcap: object, scale: float,
                 fail: Any) -> Masking:
    """A call's :class:`Masking` from the causal mask's alignment (``mask``, None without it),
    ``window=``, ``softcap=`` and the softmax's scale, or one ``fail(name, why)`` error."""
    reach, align = kernel_window(window, mask, fail)
    cap = check_softcap(softcap, fail)
    return Masking(causal=mask is not None, align=align, window=reach, softcap=cap,
                   softcap_scale=scale / cap if cap else 0.0)


def refuse_gradient(torch: Any, tensors: tuple[Any, ...], window: object,
                    softcap: object, fail: Any) -> None:
    """One error line where a call with a window or a softcap needs what is not built: its
    backward (a gradient is needed), or torch.compile's op."""
    what = " and ".join(n for n, x in (("window", window), ("softcap", softcap))
                        if x is not None)
    if torch.compiler.is_compiling():
        raise fail(what, "not built under torch.compile yet; call attention() eagerly, or "
                         "use SDPA with an explicit mask")
    if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors):
        raise fail(what, "the backward is not built yet; run the forward under "
                         "torch.no_grad(), or train with SDPA and an explicit boolean mask")
