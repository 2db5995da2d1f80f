"""A staged bulk store lowered: its steps in each storing agent's ``store`` and ``drain``.

An agent's results can leave through shared memory (docs/guide/agents.md, "Bulk stores"): its
threads write one sub-tile into a staging buffer, one elected thread stores the buffer to global
memory by the async proxy (Hopper's TMA store) and goes on, so the store overlaps what the agent
does next (the next output tile's K loop).  The schedule declares it
(:class:`~pipeline_core.plan.StoreSpec`); the target's sync model says what each step is
(:class:`~pipeline_core.sync.model.BulkStoreChannel`).  Per sub-tile the derived steps are:

1. ``store_wait`` N (the issuer): at most N bulk-store groups still read their buffers, so the
   buffer this sub-tile writes is free: with B buffers and one group per sub-tile, the store B
   sub-tiles back must be done reading, so N = B - 1 (the deepest wait the buffers allow);
2. a named-barrier sync of the agent's threads: the issuer's wait is behind every thread;
3. ``stage_write`` (every thread), then ``proxy_fence``: each thread's generic-proxy writes
   ordered before the async proxy reads the buffer;
4. a second sync: every thread's writes and fence are in before the store is issued;
5. ``store_issue`` and ``store_commit`` (the issuer): the store, in a group of its own.

Once after its last output tile the agent ``store_drain``\\ s (every group complete, writes to
global memory included) before the kernel ends.  :mod:`pipeline_core.agents.prove_store` proves
the steps over every timing.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from pipeline_core.agents.holders import result_holders
from pipeline_core.errors import ProgramError
from pipeline_core.plan import (AgentProgram, AgentRole, AgentSpec, BulkStore, Ordering, Ring,
                                Step, StepKind)
from pipeline_core.sync.model import SyncModel


def store_steps(sync: SyncModel, name: str, buffers: int, barrier: int, count: int
                ) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """One agent's ``store`` steps (per sub-tile, the module's order) and its ``drain``."""
    assert sync.bulk_store is not None and sync.named_barriers is not None
    tags = sync.bulk_store.tags

    def step(kind: str, value: int = 0) -> Step:
        return Step(kind=StepKind(kind), channel=name, tag=tags[kind], value=value)

    meet = Step(kind=StepKind.NAMED_SYNC, channel=name, barrier=barrier, value=count,
                tag=sync.named_barriers.sync_tag)
    return ((step("store_wait", buffers - 1), meet, step("stage_write"), step("proxy_fence"),
             meet, step("store_issue"), step("store_commit")),
            (step("store_drain"),))


def lower_store(spec: AgentSpec, sync: SyncModel, programs: Sequence[AgentProgram],
                rings: Sequence[Ring], orders: Sequence[Ordering], *, owner: str, target: str
                ) -> tuple[list[AgentProgram], BulkStore | None]:
    """``programs`` with the declared bulk store's steps in each storing agent's ``store`` and
    ``drain``, and the lowered :class:`BulkStore` (unchanged and None when none is declared)."""
    st = spec.store
    if st is None:
        return list(programs), None
    where = f"target {target}'s " if target else ""
    if sync.bulk_store is None or sync.named_barriers is None:
        raise ProgramError(f"{owner}: AgentSpec.store {st.name}: {where}sync model {sync.name} "
                           "declares no bulk store with named barriers (SyncModel.bulk_store, "
                           "SyncModel.named_barriers); drop the store or compile for a target "
                           "that declares one")
    if spec.reduction is not None:
        raise ProgramError(f"{owner}: AgentSpec.store {st.name} with AgentSpec.reduction "
                           f"{spec.reduction.name}: a reduced tile is stored by its last CTA "
                           "only, which the bulk store does not model yet; drop one of them")
    if not 1 <= st.buffers <= sync.bulk_store.max_wait + 1:
        raise ProgramError(f"{owner}: AgentSpec.store {st.name}: buffers={st.buffers}; give "
                           f"1..{sync.bulk_store.max_wait + 1} (the deepest store wait is "
                           f"{sync.bulk_store.max_wait})")
    if st.subtiles < 1 or st.subtile_bytes < 0:
        raise ProgramError(f"{owner}: AgentSpec.store {st.name}: subtiles={st.subtiles}, "
                           f"subtile_bytes={st.subtile_bytes}; give subtiles >= 1 (sub-tiles "
                           "per output tile) and subtile_bytes >= 0 (0: not timed)")
    agents = result_holders(programs, rings, st.agents, owner=owner,
                            what=f"AgentSpec.store {st.name}", verb="store")
    nb = sync.named_barriers
    used = {i for o in orders for i in o.barriers}
    free = [i for i in nb.free if i not in used]
    if len(free) < len(agents):
        raise ProgramError(f"{owner}: AgentSpec.store {st.name} needs a named barrier per "
                           f"storing agent ({len(agents)}) and {where or 'the target '}has "
                           f"{len(free)} left after the orderings; store from fewer agents")
    ids = dict(zip(agents, free))
    roles: dict[str, AgentRole] = {p.name: p.role for p in programs}
    out = []
    for p in programs:
        if p.name in ids:
            store, drain = store_steps(sync, st.name, st.buffers, ids[p.name],
                                       roles[p.name].warps * nb.warp_size)
            p = attrs.evolve(p, store=store, drain=drain)
        out.append(p)
    return out, BulkStore(name=st.name, agents=agents, buffers=st.buffers,
                          barriers=tuple(ids[a] for a in agents), subtiles=st.subtiles,
                          subtile_bytes=st.subtile_bytes, optional=st.optional)
