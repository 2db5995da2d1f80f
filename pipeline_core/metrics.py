"""Schedule metrics: how good is an order, and how good could the loop be?

Within one iteration (the scheduler's cost model, ``scheduling.evaluate``):
makespan, VGPR peak, MMA-unit utilisation and each lower bound on the makespan:

* critical path: the longest same-iteration latency chain (ASAP);
* MMA-serial: earliest MMA start + all MMA latency (one MMA unit); VALU likewise;
* resource (LDS port): with an LDS-contention penalty, every LDS / global op holds
  the port ``penalty`` cycles: (ops - 1) x penalty + the shortest such op;
* partition: EXACT's root bound for partition-isolated orders (heads and tails
  through every unit, partitions in sequence, the globals cap).

A bound can exceed the makespan of an order that violates same-iteration edges
(the coarse LDS-ANTI edges of the reference's IDENTITY orders: 4-wave 292 > 272);
``violated_edges`` counts them and ``bounds_apply`` says whether the bounds hold.

For the loop as a whole (modulo scheduling): ResMII (busiest serial unit's cycles
per iteration), RecMII (the worst recurrence: max over dependency cycles, loop-
carried edges included, of latency / distance, with tau(c) - tau(p) >= lat(p) -
II * d on every edge) and MII = max of the two.  The emitted kernel is also run
on the timing model (``pipeline_core.simulate``), warp groups interleaved on the
shared MMA unit, for its steady-state cycles per iteration and their ratio to the
MMA-bound limit (all MMA cycles of an iteration back to back).
"""
from __future__ import annotations

from typing import Any, Sequence

import attrs

from pipeline_core.edges import DepEdge
from pipeline_core.graph import asap_times, order_violations
from pipeline_core.ops import Op, ResourceKind
from pipeline_core.tiles import TripSample


@attrs.frozen
class Bounds:
    """Makespan lower bounds of one iteration (cycles)."""

    critical_path: int
    mma_serial: int
    valu_serial: int
    resource: int  #: LDS-port bound (0 without a penalty)
    partition: int  #: EXACT's root bound (partition-isolated orders)

    @property
    def best(self) -> int:
        return max(self.critical_path, self.mma_serial, self.valu_serial, self.resource,
                   self.partition)


@attrs.frozen
class Recurrence:
    """The loop's worst dependency cycle: ops in cycle order, latency and distance sums."""

    ops: tuple[int, ...]
    latency: int
    distance: int

    @property
    def ratio(self) -> float:
        return self.latency / self.distance if self.distance else float("inf")


@attrs.frozen
class SteadyState:
    """The emitted kernel on the timing model (``pipeline_core.simulate``)."""

    cycles_per_iteration: float
    mma_bound_cycles: int
    ratio_to_mma_bound: float
    mma_utilisation: float  #: MMA unit busy share inside the steady-state window
    groups: int
    iterations: int
    #: stall cycles by cause (a channel's label such as "vmcnt", "barrier", a busy unit),
    #: summed over the warp groups of the whole run
    stalls: tuple[tuple[str, int], ...] = ()


@attrs.frozen(kw_only=True)
class TripRun:
    """The output tiles of the plan's trip rule's sample problem on the agents timing model,
    each for its own K-tile count, against the same tiles without the rule
    (pipeline_core.agents.timing.each_tile; pipeline_core.tiles.TripSample words the report)."""

    sample: TripSample
    cycles: float
    full_cycles: float

    def to_dict(self) -> dict[str, Any]:
        s = self.sample
        return {**s.numbers, s.names[0]: sum(s.trips), s.names[1]: sum(s.full_trips),
                "cycles": round(self.cycles), "full_cycles": round(self.full_cycles)}

    def line(self) -> str:
        s = self.sample
        return (f"  {s.title} ({s.problem}): {sum(s.trips)} of {sum(s.full_trips)} {s.unit}, "
                f"{self.cycles:.0f} cycles = {self.cycles / self.full_cycles:.2f} of the "
                f"{self.full_cycles:.0f} {s.reference}")


@attrs.frozen(kw_only=True)
class EpilogueRun:
    """One output tile's epilogue steps on the agents timing model: a bulk store's, a cross-CTA
    reduction's finish (pipeline_core.agents.timing.epilogue; docs/guide/agents.md, "Timing
    model"), with what the plan declares of them in words."""

    what: str                           #: the store and the finish, as the plan declares them
    held: tuple[tuple[str, float], ...]  #: per agent, cycles its epilogue steps held it
    async_store: float                  #: the async store's cycles, overlapping the next tile
    credit: float                       #: the direct store's share of the overhead not charged
    splits: int                         #: the splits the finish was modelled for


@attrs.frozen
class ScheduleMetrics:
    """Everything ``pipeline-core analyze`` reports for one compiled schedule."""

    ops: int
    order: tuple[int, ...]
    penalty: int
    makespan: int
    vgpr_peak: int
    bounds: Bounds
    violated_edges: int
    mma_cycles: int
    mma_utilisation: float  #: MMA cycles / makespan
    res_mii: int
    rec_mii: int
    recurrence: Recurrence | None
    steady: SteadyState | None
    optimal: Any = None  #: an ExactResult when asked for (``--optimal``)
    #: the recurrence's ops in the shared notation (pipeline_core.export.notation)
    recurrence_names: tuple[str, ...] = ()
    #: the target's declared register budget per wave (None: none declared)
    register_budget: int | None = None
    #: a plan whose trip rule samples a problem: its output tiles each run for their own count
    trips: TripRun | None = None
    #: a plan with a bulk store or a cross-CTA reduction, on a machine that costs their steps
    epilogue: EpilogueRun | None = None

    @property
    def over_register_budget(self) -> bool:
        return self.register_budget is not None and self.vgpr_peak > self.register_budget

    @property
    def mii(self) -> int:
        return max(self.res_mii, self.rec_mii)

    @property
    def bounds_apply(self) -> bool:
        """The bounds are valid for this order (it respects every same-iteration edge)."""
        return self.violated_edges == 0

    @property
    def gap(self) -> int:
        """Makespan above the best bound (negative only when the order violates edges)."""
        return self.makespan - self.bounds.best

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "ops": self.ops, "order": list(self.order), "lds_contention_penalty": self.penalty,
            "makespan": self.makespan, "vgpr_peak": self.vgpr_peak,
            "lower_bounds": attrs.asdict(self.bounds) | {"best": self.bounds.best},
            "gap_to_bound": self.gap, "violated_edges": self.violated_edges,
            "bounds_apply": self.bounds_apply, "mma_cycles": self.mma_cycles,
            "mma_utilisation": round(self.mma_utilisation, 4),
            "res_mii": self.res_mii, "rec_mii": self.rec_mii, "mii": self.mii,
            "recurrence": None if self.recurrence is None else {
                "ops": list(self.recurrence.ops), "names": list(self.recurrence_names),
                "latency": self.recurrence.latency, "distance": self.recurrence.distance},
            "register_budget": {"budget": self.register_budget, "peak": self.vgpr_peak,
                                "over": self.over_register_budget},
            "steady_state": None if self.steady is None else {
                "cycles_per_iteration": round(self.steady.cycles_per_iteration, 2),
                "mma_bound_cycles": self.steady.mma_bound_cycles,
                "ratio_to_mma_bound": round(self.steady.ratio_to_mma_bound, 4),
                "mma_utilisation": round(self.steady.mma_utilisation, 4),
                "groups": self.steady.groups, "iterations": self.steady.iterations,
                "stall_cycles_by_cause": dict(self.steady.stalls)},
        }
        if self.trips is not None:  # only a plan whose trip rule samples a problem: its key
            d[self.trips.sample.key] = self.trips.to_dict()
        if self.epilogue is not None:  # only a plan with a store or a finish carries the key
            e = self.epilogue
            d["epilogue"] = {"what": e.what, "held": {a: round(c) for a, c in e.held},
                             "async_store": round(e.async_store), "credit": round(e.credit),
                             "splits": e.splits}
        if self.optimal is not None:
            r = self.optimal
            d["optimal"] = {"makespan": r.makespan, "lower_bound": r.lower_bound,
                            "proven_optimal": r.proven_optimal, "gap": r.gap, "nodes": r.nodes,
                            "seconds": round(r.time, 3), "order": list(r.order),
                            "order_gap": self.makespan - r.lower_bound}
        return d


# --- one iteration ------------------------------------------------------------------

def iteration_bounds(body: Sequence[Op], edges: Sequence[DepEdge], penalty: int = 0, *,
                     num_partitions: int = 1, max_globals: int = 0) -> Bounds:
    """The lower bounds listed in the module docstring."""
    from pipeline_core.scheduling.bounds import Problem, root_bound

    lat = [o.latency for o in body]
    asap = asap_times(lat, edges)
    cp = max((asap[i] + lat[i] for i in range(len(body))), default=0)

    def serial(resource: ResourceKind) -> int:
        idx = [i for i, o in enumerate(body) if o.resource == resource]
        total = sum(lat[i] for i in idx)
        return min(asap[i] for i in idx) + total if total > 0 else 0

    port = [i for i, o in enumerate(body)
            if o.resource in (ResourceKind.LDS, ResourceKind.GLOBAL_MEM)]
    resource = 0
    if penalty > 0 and port:
        resource = min(asap[i] for i in port) + penalty * (len(port) - 1) + min(lat[i] for i in port)
    partition = root_bound(Problem(body, edges, penalty=penalty, num_partitions=num_partitions),
                           max_globals) if body else 0
    return Bounds(cp, serial(ResourceKind.MMA_UNIT), serial(ResourceKind.VALU), resource, partition)


# --- the loop: ResMII, RecMII ------------------------------------------------------------

def res_mii(body: Sequence[Op], penalty: int = 0) -> int:
    """Cycles per iteration of the busiest serial unit (MMA, VALU, LDS port)."""
    mma = sum(o.latency for o in body if o.resource == ResourceKind.MMA_UNIT)
    valu = sum(o.latency for o in body if o.resource == ResourceKind.VALU)
    port = penalty * sum(1 for o in body if o.resource in (ResourceKind.LDS, ResourceKind.GLOBAL_MEM))
    return max(mma, valu, port)


def _positive_cycle(n: int, arcs: list[tuple[int, int, int, int]], ii: int) -> list[int] | None:
    """A cycle with sum(lat - ii * d) > 0 (Bellman-Ford, longest paths), or None."""
    dist = [0] * n
    pred = [-1] * n
    last = -1
    for _ in range(n):
        last = -1
        for p, c, lat, d in arcs:
            v = dist[p] + lat - ii * d
            if v > dist[c]:
                dist[c] = v
                pred[c] = p
                last = c
        if last < 0:
            return None
    # ``last`` was relaxed in the n-th pass: walking predecessors n times lands on a cycle
    v = last
    for _ in range(n):
        v = pred[v]
    cycle = [v]
    u = pred[v]
    while u != v:
        cycle.append(u)
        u = pred[u]
    cycle.reverse()
    return cycle


def rec_mii(body: Sequence[Op], edges: Sequence[DepEdge]) -> tuple[int, Recurrence | None]:
    """(RecMII, its cycle): the smallest II with no cycle of sum(lat(p) - II * d) > 0."""
    n = len(body)
    arcs = [(e.producer, e.consumer, body[e.producer].latency, max(e.distance, 0)) for e in edges
            if 0 <= e.producer < n and 0 <= e.consumer < n]
    if not any(d > 0 for *_x, d in arcs):
        return 0, None
    hi = sum(o.latency for o in body) + 1
    if _positive_cycle(n, arcs, 0) is None:
        return 0, None
    lo = 0  # invariant: a positive cycle exists at lo, none at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _positive_cycle(n, arcs, mid) is None:
            hi = mid
        else:
            lo = mid
    cycle = _positive_cycle(n, arcs, lo)
    recurrence = None
    if cycle:
        lat = dist = 0
        for k, p in enumerate(cycle):
            c = cycle[(k + 1) % len(cycle)]
            best = max(((l - lo * d, l, d) for pp, cc, l, d in arcs if pp == p and cc == c))
            lat += best[1]
            dist += best[2]
        recurrence = Recurrence(tuple(cycle), lat, dist)
    return hi, recurrence


# --- putting it together ----------------------------------------------------------------

def steady_state(compiled, iterations: int = 12) -> SteadyState | None:
    """The emitted kernel on the timing model (pipeline_core.simulate.model_run), or None when
    it cannot be simulated."""
    from pipeline_core.simulate import SimulationError, model_run

    try:
        tl = model_run(compiled, iterations)
        s = tl.summary()
    except (SimulationError, ValueError):
        return None
    stalls: dict[str, int] = {}
    for g in tl.groups:
        for reason, cycles in g.stalls_by_reason().items():
            stalls[reason] = stalls.get(reason, 0) + cycles
    return SteadyState(s.steady_state_cycles, s.mma_bound_cycles, s.ratio_to_mma_bound,
                       s.steady_mma_utilisation, s.groups, s.iterations,
                       tuple(sorted(stalls.items(), key=lambda kv: (-kv[1], kv[0]))))


def trip_run(compiled, iterations: int) -> TripRun | None:
    """A plan whose trip rule samples a problem (:meth:`~pipeline_core.tiles.TripRule.sample`)
    with a longest output tile of ``iterations`` K tiles: its tiles with the rule and without
    (None for any other plan, or when it cannot be modelled)."""
    rule = compiled.plan.trip_rule
    machine = getattr(getattr(compiled, "target_profile", None), "agent_machine", None)
    if rule is None or machine is None:
        return None
    sample = rule.sample(iterations)
    if sample is None:
        return None
    from pipeline_core.agents.timing import each_tile

    try:
        ruled = each_tile(compiled.plan, compiled.body, machine, sample.trips)
        full = each_tile(compiled.plan, compiled.body, machine, sample.full_trips)
    except ValueError:  # a deadlocked plan: the steady state says so
        return None
    return TripRun(sample=sample, cycles=ruled.cycles, full_cycles=full.cycles)


def epilogue_run(compiled, iterations: int) -> EpilogueRun | None:
    """A plan with a bulk store or a cross-CTA reduction: what their steps cost one output tile
    of ``iterations`` K tiles (None for any other plan, a machine without
    ``AgentMachine.epilogue``, or a plan that cannot be modelled)."""
    plan = compiled.plan
    machine = getattr(getattr(compiled, "target_profile", None), "agent_machine", None)
    if machine is None or machine.epilogue is None or (plan.store is None
                                                        and plan.reduction is None):
        return None
    from pipeline_core.agents.timing import simulate

    try:
        e = simulate(plan, compiled.body, machine, max(iterations, plan.min_tiles)).epilogue
    except ValueError:  # a deadlocked plan: the steady state says so
        return None
    if e is None:
        return None
    parts = []
    if plan.reduction is not None:
        r = plan.reduction
        parts.append(f"{r.name}: the finish as the last of {e.splits} splits, a "
                     f"{r.slice_bytes}-byte slice per agent")
    if plan.store is not None:
        st = plan.store
        parts.append(f"{st.name}: a bulk store of {st.subtiles} sub-tiles of "
                     f"{st.subtile_bytes} bytes per agent through {st.buffers} buffers")
    return EpilogueRun(what="; ".join(parts), held=e.held, async_store=e.async_store,
                       credit=e.credit, splits=e.splits)


def analyze_order(body: Sequence[Op], edges: Sequence[DepEdge], order: Sequence[int], *,
                  penalty: int = 0, num_partitions: int = 1, max_globals: int = 0) -> ScheduleMetrics:
    """Metrics of one order of a body (no emitted kernel, so no steady state)."""
    from pipeline_core.scheduling.evaluate import evaluate_schedule

    order = tuple(order)
    makespan, peak = evaluate_schedule(body, edges, order, penalty) if body else (0, 0)
    mma = sum(o.latency for o in body if o.resource == ResourceKind.MMA_UNIT)
    rec, cycle = rec_mii(body, edges)
    return ScheduleMetrics(
        ops=len(body), order=order, penalty=penalty, makespan=makespan, vgpr_peak=peak,
        bounds=iteration_bounds(body, edges, penalty, num_partitions=num_partitions,
                                max_globals=max_globals),
        violated_edges=len(order_violations(edges, order)), mma_cycles=mma,
        mma_utilisation=mma / makespan if makespan else 0.0, res_mii=res_mii(body, penalty),
        rec_mii=rec, recurrence=cycle, steady=None)


def analyze_compiled(compiled, *, iterations: int = 12, simulate: bool = True,
                     optimal_time: float | None = None) -> ScheduleMetrics:
    """Metrics of a CompiledSchedule; ``optimal_time`` also runs EXACT for the true optimum."""
    sched = compiled.schedule_config
    penalty = int(getattr(sched, "lds_contention_penalty", 0) or 0)
    plan = compiled.plan
    m = analyze_order(compiled.body, compiled.edges, compiled.order, penalty=penalty,
                      num_partitions=plan.partitions, max_globals=plan.max_globals)
    changes: dict[str, Any] = {}
    if m.recurrence is not None:
        from pipeline_core.export.notation import op_text
        changes["recurrence_names"] = tuple(op_text(compiled.body[i], compiled.tag_names)
                                            for i in m.recurrence.ops)
    budget = getattr(getattr(compiled, "target_profile", None), "register_budget", None)
    if budget is not None:
        changes["register_budget"] = budget
    if simulate:
        changes["steady"] = steady_state(compiled, iterations)
        changes["trips"] = trip_run(compiled, iterations)
        changes["epilogue"] = epilogue_run(compiled, iterations)
    if optimal_time is not None and compiled.body:
        from pipeline_core.scheduling.exact import exact_schedule

        changes["optimal"] = exact_schedule(
            compiled.body, compiled.edges, max_globals_per_block=plan.max_globals,
            lds_contention_penalty=penalty, max_vgpr=sched.max_vgpr,
            num_partitions=plan.partitions,
            blocks_per_partition=plan.blocks_per_partition or max(
                1, sum(1 for o in compiled.body if o.role.name == "COMPUTE")),
            time_limit=optimal_time, strict=plan.blocks_per_partition > 0)
    return attrs.evolve(m, **changes) if changes else m


def format_metrics(m: ScheduleMetrics, title: str = "") -> str:
    """The human-readable report."""
    b = m.bounds
    lines = [f"{title}: {m.ops} ops" if title else f"{m.ops} ops"]
    pen = f" (LDS-contention penalty {m.penalty})" if m.penalty else ""
    lines.append(f"  one iteration{pen}: makespan {m.makespan} cycles, VGPR peak {m.vgpr_peak}, "
                 f"MMA unit busy {m.mma_cycles} cycles = {100 * m.mma_utilisation:.1f}% of the makespan")
    lines.append(f"  lower bounds: critical path {b.critical_path}, MMA-serial {b.mma_serial}"
                 + (f", VALU-serial {b.valu_serial}" if b.valu_serial else "")
                 + (f", LDS port {b.resource}" if m.penalty else "")
                 + f", partition {b.partition}; best {b.best} (gap {m.gap})")
    if not m.bounds_apply:
        lines.append(f"  note: the order violates {m.violated_edges} same-iteration edge(s) (coarse "
                     f"LDS-ANTI edges), so the bounds need not hold for it"
                     + (f" (here best bound {b.best} > makespan {m.makespan})" if m.gap < 0 else ""))
    rec = ""
    if m.recurrence is not None:
        r = m.recurrence
        names = m.recurrence_names or tuple(map(str, r.ops))
        steps = [f"{n} (#{i})" for n, i in zip(names, r.ops)] if m.recurrence_names else list(names)
        rec = f" (cycle {' -> '.join(steps)}: {r.latency} cycles over distance {r.distance})"
    if m.register_budget is not None:
        verdict = (f"PROBLEM: over the target's budget of {m.register_budget} by "
                   f"{m.vgpr_peak - m.register_budget}" if m.over_register_budget
                   else f"within the target's budget of {m.register_budget}")
        lines.append(f"  registers: VGPR peak {m.vgpr_peak}, {verdict}")
    lines.append(f"  loop: ResMII {m.res_mii}, RecMII {m.rec_mii}{rec}, MII {m.mii}")
    if m.steady is not None:
        s = m.steady
        lines.append(f"  emitted kernel ({s.groups} warp group(s), {s.iterations} iterations on the "
                     f"timing model): {s.cycles_per_iteration:.1f} cycles/iteration, MMA-bound "
                     f"limit {s.mma_bound_cycles} (ratio {s.ratio_to_mma_bound:.2f}), MMA busy "
                     f"{100 * s.mma_utilisation:.1f}% in the steady state")
        total = sum(c for _, c in s.stalls)
        causes = ", ".join(f"{reason} {cycles} ({100 * cycles / total:.0f}%)"
                           for reason, cycles in s.stalls) if total else "none"
        lines.append(f"  stall cycles by cause (all groups, whole run): {causes}")
    if m.trips is not None:
        lines.append(m.trips.line())
    if m.epilogue is not None:
        e = m.epilogue
        held = ", ".join(f"{a} {c:.0f}" for a, c in e.held)
        store = (f"; the async store's {e.async_store:.0f} cycles overlap the next output tile, "
                 f"and the direct store's {e.credit:.0f} cycles of the CTA overhead are not "
                 "charged" if e.credit else "")
        lines.append(f"  epilogue (one output tile on the timing model): {e.what}; holds "
                     f"{held} cycles{store}")
    if m.optimal is not None:
        r = m.optimal
        state = "proven optimal" if r.proven_optimal else f"best found, gap {r.gap}"
        lines.append(f"  EXACT (block-program orders): makespan {r.makespan} ({state}; lower bound "
                     f"{r.lower_bound}, {r.nodes} nodes, {r.time:.2f}s); this order is "
                     f"{m.makespan - r.lower_bound} cycles above the proven bound")
    return "\n".join(lines)
