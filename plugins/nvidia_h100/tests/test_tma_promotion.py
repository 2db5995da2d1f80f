"""The tensor maps' L2 promotion (tma.L2_PROMOTION; docs/guide/matmul.md, "Layouts TMA cannot
read"): every map the driver encodes takes 128-byte promotion, rows on the 128-byte line or
off it (256, CUTLASS's default, cost a decode step's stream 9% and gained nothing anywhere)."""
from __future__ import annotations


import pytest

pytest.importorskip("pipeline_core_nvidia_h100")
pytest.importorskip("numpy")


class _Driver:
    """libcuda's cuTensorMapEncodeTiled as the test sees it: the arguments of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        outer = self

        class _Fn:
            restype = None

            def __call__(self, *args):
                outer.calls.append(args)
                return 0
        self.cuTensorMapEncodeTiled = _Fn()


@pytest.mark.parametrize("stride", [6000, 6144, 10112])
def test_every_map_takes_the_line_as_its_l2_promotion(monkeypatch, stride):
    """A [2000, K] bf16 operand whose rows are 6000 bytes (off the line) or 6144 / 10112
    (on it), and a 4-D decode cache map whose strides are all on the line: the driver is asked
    for 128-byte promotion each time (cuTensorMapEncodeTiled's eleventh argument)."""
    from pipeline_core_nvidia_h100 import tma

    driver = _Driver()
    monkeypatch.setattr(tma, "_libcuda", lambda: driver)
    tma.encode_tiled_2d(1 << 20, 2000, stride // 2, 128, 64)
    tma.encode_tiled(1 << 20, (128, 8, 8192, 64), (256, 2048, 2048 * 8192), (64, 1, 128, 1))
    assert len(driver.calls) == 2
    for args in driver.calls:
        assert args[10] == tma.L2_PROMOTION_128B
        assert args[3].value == 1 << 20  # the address, so the call is the one the map makes
