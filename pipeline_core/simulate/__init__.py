"""A deterministic timing model of an emitted schedule (prologue, N kernel iterations, epilogue).

Why: the compiler optimises one iteration's makespan, but what a kernel engineer (and the
``analyze`` metrics) needs is how the *emitted* entries behave when the warp groups run them
together: where the waits stall, who holds the MMA unit, how long one steady-state iteration
takes. This module executes the entries under the target's cost model and returns a
:class:`Timeline`; the exporters (trace, picture) only render it.

Model (every choice is a field of :class:`MachineModel`):

The synchronisation facts come from the target's sync model (``pipeline_core.sync``): which
channel each op ticks and by how much, which tags wait on which channel, the barrier's tag
and name, and which tags are scheduling hints.

* Each warp group issues its stream in order. A real instruction costs ``issue_cycles`` of the
  group's time; the target's hint tags are markers (zero cost; its priority hint breaks ties
  when two groups are ready in the same cycle).
* Ops with an effect on a sync channel are asynchronous: they are in flight for their
  latency, counted on that channel of their group. Global and LDS ops hold a port shared by
  all groups for ``global_issue_cycles`` / ``lds_issue_cycles`` (0 = fully pipelined, as the
  reference's cost model with ``lds_contention_penalty`` 0).
* MMAs (and VALU ops) serialise on ONE unit shared by all groups, first come first served.
* A wait on a channel stalls until at most n of the group's ticks on it are outstanding. An
  op ticks its channel's ``op_cost_field`` when set (prologue entries), else its effect's
  ticks, bound from the compiled configs.
* The barrier is a rendezvous of all running groups, matched by ordinal (the n-th barrier
  of each group meet). Ping-pong
  (docs/guide/reference-behaviours.md, "Warp stagger"): when ``warp_stagger_index <=
  len(prologue)`` two groups run; group 1 runs an extra barrier after
  ``prologue[:warp_stagger_index]``, both run a barrier after the prologue, and group 0
  runs an extra one after the epilogue. Otherwise one group runs the phases back to back.

Times are integer cycles. Everything is O(instructions x groups).

Every reader runs a compiled schedule through :func:`~pipeline_core.simulate.run.model_run`, the
one place that picks this model or the agents model (pipeline_core/agents/timing.py).

The package is split by job: :mod:`~pipeline_core.simulate.inputs` (the machine model and
the emitted entries), :mod:`~pipeline_core.simulate.engine` (instruction streams and the
simulation), :mod:`~pipeline_core.simulate.timeline` (the result records) and
:mod:`~pipeline_core.simulate.labels` (what the exporters print).
"""
from __future__ import annotations

from pipeline_core.simulate.engine import simulate, streams
from pipeline_core.simulate.inputs import (MachineModel, SimInput, SimulationError, as_input,
                                           input_from_compiled, input_from_document,
                                           op_from_document)
from pipeline_core.simulate.labels import (format_summary, outstanding_series, step_args,
                                           step_label, timeline_label)
from pipeline_core.simulate.run import model_run
from pipeline_core.simulate.timeline import (BarrierRelease, Busy, GroupTimeline, Instr, OpTiming,
                                             Span, Stall, Step, Summary, Timeline)

__all__ = ["MachineModel", "SimInput", "SimulationError", "Stall", "Instr",
           "OpTiming", "Step", "Span",
           "GroupTimeline", "Busy", "BarrierRelease", "Summary", "Timeline", "simulate",
           "as_input", "input_from_compiled", "input_from_document", "streams",
           "step_label", "step_args", "outstanding_series", "format_summary", "op_from_document",
           "model_run", "timeline_label"]
