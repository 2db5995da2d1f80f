"""Which agents hold a plan's results: the one rule the bulk store and the cross-CTA reduction
share (docs/guide/agents.md, "Bulk stores" and "Cross-CTA reductions")."""
from __future__ import annotations

from collections.abc import Sequence

from pipeline_core.errors import ProgramError
from pipeline_core.plan import AgentProgram, Ring


def result_holders(programs: Sequence[AgentProgram], rings: Sequence[Ring],
                   named: Sequence[str], *, owner: str, what: str, verb: str) -> tuple[str, ...]:
    """The agents ``what`` names, or with none named every agent that waits on a full ring: only
    those read a ring, so only they hold results (to ``verb``); any other name is refused."""
    readers = [p.name for p in programs
               if any(p.name in r.waiters for r in rings if r.kind == "full")]
    agents = tuple(named) or tuple(readers)
    bad = [a for a in agents if a not in readers]
    if bad or not agents:
        raise ProgramError(f"{owner}: {what} names agents {bad or '()'}; only agents that read "
                           f"a ring hold results to {verb}: {', '.join(readers)}")
    return agents
