"""A tile split checked: reader agents that take a CTA's output tiles round-robin.

CUTLASS's ping-pong GEMM gives each consumer warp group whole output tiles, alternately, so
one consumer's epilogue overlaps the other's mainloop (docs/guide/agents.md, "Tile splits").
The schedule names the agents (:class:`~pipeline_core.plan.TileSplit`); this module checks them
and says how many arrivals a shared ring's phase needs: a stage of output tile o is read and
released by o's owner only, so the split agents count as one releaser.  The plan records the
split (``Plan.split``), the one home the proof and the emitter read it from.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline_core.errors import ProgramError
from pipeline_core.plan import AgentRole, AgentSpec, TileSplit


def check_split(spec: AgentSpec, roles: Mapping[str, AgentRole], writers: Sequence[str],
                readers: Mapping[str, frozenset[int]], owner: str) -> TileSplit | None:
    """``spec.split`` checked, each problem in one line naming ``AgentSpec.split``: two agents or
    more, each named once, each a reader (no writer), alike (the same warps and the same
    number of ops) and reading the same copies (``readers``: agent -> the copies it reads),
    no lags (a turn's mainloop is its output tile's own K tiles)."""
    split = spec.split
    if split is None:
        return None
    agents = list(split.agents)
    key = "AgentSpec.split"
    if len(agents) < 2 or len(set(agents)) != len(agents):
        raise ProgramError(f"{owner}: {key} names {agents}: it takes two reader agents or more, "
                           "each once (e.g. TileSplit(agents=(\"consumer0\", \"consumer1\")))")
    for name in agents:
        if name not in roles:
            raise ProgramError(f"{owner}: {key} names agent {name!r}; agents: "
                               f"{', '.join(roles)}")
        if name in writers or not readers.get(name):
            raise ProgramError(f"{owner}: {key} names agent {name}, which reads no ring; only "
                               "reader agents take output tiles in turn")
    first = roles[agents[0]]
    for name in agents[1:]:
        r = roles[name]
        if (r.warps, len(r.ops)) != (first.warps, len(first.ops)) \
                or readers[name] != readers[agents[0]]:
            raise ProgramError(f"{owner}: {key}: agents {first.name} and {name} differ (warps "
                               f"{first.warps} / {r.warps}, ops {len(first.ops)} / "
                               f"{len(r.ops)}, copies read {sorted(readers[agents[0]])} / "
                               f"{sorted(readers[name])}); the agents of a split must be alike, "
                               "each running any output tile")
    lagged = sorted(i for i in spec.lags if any(i in roles[a].ops for a in agents))
    if any(spec.lags[i] for i in lagged):
        raise ProgramError(f"{owner}: {key}: ops {lagged} of the split agents have lags "
                           "(AgentSpec.lags); a split agent's output tile runs its K tiles "
                           "without skew")
    return split


def release_arrivals(releasers: Sequence[str], roles: Mapping[str, AgentRole],
                     split: TileSplit | None) -> int:
    """The arrivals one phase of an empty ring needs: each releasing agent's, except that the
    agents of the split release a stage one at a time (the owner of its output tile), so they
    count once (docs/guide/agents.md, "Tile splits")."""
    split_agents = set(split.agents) if split is not None else set()
    mine = [r for r in releasers if r in split_agents]
    if mine and len(mine) != len(split_agents):
        raise ProgramError(f"agents {', '.join(sorted(split_agents - set(mine)))} of "
                           f"AgentSpec.split release no stage that {', '.join(mine)} release; "
                           "the agents of a split must be alike")
    others = sum(roles[r].release_arrivals for r in releasers if r not in split_agents)
    return others + (roles[mine[0]].release_arrivals if mine else 0)
