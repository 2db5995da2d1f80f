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

from pipeline_core.plugin_api import TripSample, UniformTrips


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


@attrs.frozen(kw_only=True)
class GroupKTrips:
    """grouped_mm's 2-D x 2-D (``-p batch=grouped_k``; the groups split K): problem
    ``(M, N, ks)``, ``ks`` each group's K extent; every group has the same ``block_m x block_n``
    output tiles, group by group, and each of group g's visits ``ceil(ks[g] / block_k)`` K tiles
    (0 for an empty group: its tiles store zeros).  Not uniform, so the proof also runs output
    tiles of different counts back to back (empty, short, longer than the ring).  No K tile is
    masked: a group's tail is zero-filled by TMA through the group's own tensor map."""

    block_m: int
    block_n: int
    block_k: int

    @property
    def uniform(self) -> bool:
        return False

    def trip_counts(self, problem: tuple[int, int, tuple[int, ...]]) -> tuple[int, ...]:
        m, n, ks = problem
        per_group = -(-m // self.block_m) * -(-n // self.block_n)
        return tuple(-(-k // self.block_k) for k in ks for _ in range(per_group))

    def masked_trips(self, problem: tuple[int, int, tuple[int, ...]]) -> tuple[int, ...]:
        return self.trip_counts(problem)

    def sample(self, k_tiles: int) -> TripSample | None:
        """Four groups of one output tile each: ``k_tiles`` K tiles, half of them, none, one."""
        ks = tuple(t * self.block_k for t in (k_tiles, k_tiles // 2, 0, 1))
        return TripSample(trips=self.trip_counts((self.block_m, self.block_n, ks)),
                          full=k_tiles, key="group_k", title="groups along K",
                          problem=f"4 groups of {', '.join(map(str, ks))} K",
                          reference="with every group visiting every K tile")

    def document(self) -> dict[str, object]:
        return {"block_m": self.block_m, "block_n": self.block_n, "block_k": self.block_k,
                "groups": "along K (offs, on the device)"}
