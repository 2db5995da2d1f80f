"""The GEMM's trip rule (``RasterTrips``, gemm_tiles.py): every output tile of the raster visits
every K tile, a uniform ``TripRule``; on the warp-specialized GEMM's plan it leaves every proof
as it was without a rule (the same runs, no trip sequences beyond a split's), so the GEMM pays
nothing for the protocol (issue 34)."""
from __future__ import annotations

import attrs
import pytest

pytest.importorskip("pipeline_core_nvidia_h100")

from pipeline_core.agents.prove import prove_plan, trip_sequences  # noqa: E402
from pipeline_core.api import compile_named  # noqa: E402
from pipeline_core.check.mutate import agent_mutations  # noqa: E402

from pipeline_core_nvidia_h100.kit_api import RasterTrips  # noqa: E402


def test_every_output_tile_of_the_raster_visits_every_k_tile():
    rule = RasterTrips(block_m=128, block_n=256, block_k=64)
    assert rule.uniform and rule.sample(8) is None
    assert rule.trip_counts((256, 512, 4096)) == (64,) * 4
    # tails: tile counts rounded up, the loads zero-filled, no K tile masked
    assert rule.trip_counts((257, 513, 100)) == (2,) * 9 == rule.masked_trips((257, 513, 100))


@pytest.mark.parametrize("params", [{}, {"pingpong": "true", "BN": "128"}, {"split_k": "true"},
                                    {"store": "tma"}, {"cluster": "2"}],
                         ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()) or "default")
def test_the_warpspecialized_plans_proof_is_the_one_without_a_rule(params):
    c = compile_named("warpspecialized-gemm", target="h100", params=params)
    g = c.plan.launch.geometry
    assert c.plan.trip_rule == RasterTrips(block_m=g.bm, block_n=g.bn, block_k=g.bk)
    bare = attrs.evolve(c.plan, trip_rule=None)
    assert trip_sequences(c.plan) == trip_sequences(bare)
    assert not list(agent_mutations(c.plan, ("clamp_trips", "skew_trips")))
    verdict = prove_plan(c.plan, c.body, c.edges, c.plan.sync, names=c.tag_names)
    assert verdict.safe
    assert verdict.model == prove_plan(bare, c.body, c.edges, c.plan.sync,
                                       names=c.tag_names).model
