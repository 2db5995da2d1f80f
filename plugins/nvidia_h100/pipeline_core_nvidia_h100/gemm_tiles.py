"""The GEMM's trip rule: a persistent raster of ``ceil(M / BM) x ceil(N / BN)`` output tiles,
each visiting every one of the ``ceil(K / BK)`` K tiles (``pipeline_core.plugin_api.TripRule``,
problem ``(M, N, K)``).

Uniform, so the core's proof of the warp-specialized GEMM runs no output tiles of different
counts back to back (its proofs stay as they were); with ``-p tails=true`` the loads are
zero-filled past the matrix (TMA), so no K tile is masked.  A split-K CTA runs a share of an
output tile's K tiles: the rule counts the tile's.
"""
from __future__ import annotations

import attrs

from pipeline_core.plugin_api import UniformTrips


@attrs.frozen(kw_only=True)
class RasterTrips(UniformTrips):
    """Output tiles of ``block_m x block_n`` (in the emitter's grouped raster order, which
    uniform counts make immaterial here), each visiting every K tile of ``block_k``."""

    block_m: int
    block_n: int
    block_k: int

    def trip_counts(self, problem: tuple[int, int, int]) -> tuple[int, ...]:
        m, n, k = problem
        return (-(-k // self.block_k),) * (-(-m // self.block_m) * -(-n // self.block_n))
