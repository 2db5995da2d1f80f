"""The tensor maps' L2 promotion (tma.l2_promotion; docs/guide/matmul.md, "Layouts TMA cannot
read"): 256 bytes where every row starts on a 128-byte line, 128 where rows lie off it."""
from __future__ import annotations

import pytest

pytest.importorskip("pipeline_core_nvidia_h100")


def test_rows_off_the_l2_line_are_promoted_by_the_line_not_two():
    """A contiguous [2000, 3000] bf16 operand (6000-byte rows) and its [3000, 5000] partner
    (10000-byte rows) lie off the 128-byte line: 128-byte promotion; the same rows padded to
    3072 and 5056 elements, at a line-aligned address, keep 256; an aligned stride at an
    address off the line is off it too."""
    from pipeline_core_nvidia_h100.tma import (L2_PROMOTION_128B, L2_PROMOTION_256B,
                                               l2_promotion)

    assert l2_promotion(1 << 20, (6000,)) == L2_PROMOTION_128B
    assert l2_promotion(1 << 20, (10000,)) == L2_PROMOTION_128B
    assert l2_promotion(1 << 20, (6144,)) == L2_PROMOTION_256B
    assert l2_promotion(1 << 20, (10112,)) == L2_PROMOTION_256B
    assert l2_promotion((1 << 20) + 64, (6144,)) == L2_PROMOTION_128B
    assert l2_promotion(1 << 20, (6144, 6144 * 2000 + 16)) == L2_PROMOTION_128B  # a batch's
