"""H100 synchronisation for the mma.sync family: cp.async commit groups, synchronous ldmatrix and
mma.sync, and the aligned / non-aligned CTA barriers (the plugin's README.md, "Sync model").

* ``cp_async`` counts *commit groups* per thread.  ``cp.async`` only joins the thread's open
  group; ``cp.async.commit_group`` closes it (an empty group when none is open);
  ``cp.async.wait_group N`` returns once at most the N newest groups are pending.  Groups retire
  in commit order.  The copied data is visible to the waiting thread only: other warps see it after
  a barrier that follows the wait.
* ``ldmatrix`` and ``mma.sync`` are synchronous for the issuing warp: the hardware scoreboard stalls
  the first use of a destination register, there is no counter and no wait instruction.
* ``bar.sync`` (= ``barrier.sync.aligned``, what ``__syncthreads`` compiles to) needs every
  thread of the CTA at the same instruction; ``barrier.sync`` (non-aligned) lets staggered warp
  groups meet at different barrier instructions of the same id.  Both order the participants'
  earlier shared-memory accesses before their later ones, so a barrier after an ldmatrix also
  frees the stage it read (no write-after-read wait needed).
* Encoding limit: the PTX ISA (section "cp.async.wait_group") says only that "Operand N is an
  integer constant"; the SASS ``DEPBAR.LE SB0, n`` holds 6 bits, and ptxas (CUDA 13.0) turns
  N = 64..255 into 63 and N = 256 into 0 without a message.  ``max_wait`` is therefore 63, and the
  tests check the clamp with nvcc where it is installed.
* AMD's scheduling hints (``s_setprio``, ``sched_barrier``, ``sched_group_barrier``) have no
  NVIDIA equivalent: they are declared as hints that emit nothing.
"""
from __future__ import annotations

from pipeline_core.plugin_api import BarrierKind, Channel, Effect, FrameworkTag, OpRole, SyncModel

from pipeline_core_nvidia_h100.cuda import MAX_WAIT_GROUP

CP_ASYNC = "cp_async"

#: This target's own sync tags (kernel tags are 0-127; 128-133 are the framework's).
WAIT_CP_ASYNC = 150
COMMIT_CP_ASYNC = 151
BARRIER_SYNC_NONALIGNED = 152
#: ``bar.sync`` takes the framework's BARRIER tag, so a schedule's BARRIER entries mean it.
BAR_SYNC_ALIGNED = int(FrameworkTag.BARRIER)

CP_ASYNC_CHANNEL = Channel(
    name=CP_ASYNC, label="cp.async groups", wait_tag=WAIT_CP_ASYNC, wait_name="WAIT_CP_ASYNC",
    unit="group", in_order=True, owner="thread", results_visible_to="issuer",
    max_wait=MAX_WAIT_GROUP, commit_tag=COMMIT_CP_ASYNC)

EFFECTS = (
    Effect(role=OpRole.GLOBAL_LOAD, counter=CP_ASYNC),   # cp.async: ticks at its group's commit
    Effect(role=OpRole.FRAGMENT_LOAD, counter=None),     # ldmatrix: synchronous
    Effect(role=OpRole.SHARED_STORE, counter=None),      # st.shared: synchronous for the issuer
    Effect(role=OpRole.COMPUTE, counter=None),           # mma.sync: synchronous
)

BARRIERS = (
    BarrierKind(tag=BAR_SYNC_ALIGNED, name="bar.sync", participants="cta", aligned=True,
                drains=False, publishes="completed"),
    BarrierKind(tag=BARRIER_SYNC_NONALIGNED, name="barrier.sync", participants="cta",
                aligned=False, drains=False, publishes="completed"),
)

#: AMD scheduling hints: accepted, cost nothing, emit nothing on this target.
HINTS = {int(FrameworkTag.SET_PRIO): "SET_PRIO",
         int(FrameworkTag.SCHEDULE_BARRIER): "SCHEDULE_BARRIER",
         int(FrameworkTag.SCHED_GROUP_BARRIER): "SCHED_GROUP_BARRIER"}

#: PTX each sync tag lowers to; the AMD hints emit nothing and print as ``// NAME``.
ISA_FORMS = {WAIT_CP_ASYNC: "cp.async.wait_group {wait_value}",
             COMMIT_CP_ASYNC: "cp.async.commit_group",
             BAR_SYNC_ALIGNED: "bar.sync 0",
             BARRIER_SYNC_NONALIGNED: "barrier.sync 0",
             int(FrameworkTag.SET_PRIO): "// set_prio {wait_value} (no PTX)",
             int(FrameworkTag.SCHEDULE_BARRIER): "// schedule_barrier (no PTX)",
             int(FrameworkTag.SCHED_GROUP_BARRIER): "// sched_group_barrier (no PTX)"}

H100_SYNC = SyncModel(
    name="nvidia-h100-mma-sync", channels=(CP_ASYNC_CHANNEL,), effects=EFFECTS,
    barriers=BARRIERS, hint_tags=HINTS, priority_tag=None, isa_forms=ISA_FORMS,
    register_interlock=True,        # the scoreboard stalls a use of an ldmatrix / mma.sync result
    shared_in_order=False,          # no ISA promise that shared memory serves requests in order
    global_loads_write_shared=True,  # cp.async writes shared memory directly
    combined_wait="",
    notes=("cp.async groups are per thread: every thread executes every commit (predicate a copy "
           "with src-size 0 instead of branching around a commit)",
           "wait_group publishes to the waiting thread only; other warps need the barrier after it",
           "ldmatrix / mma.sync waits lower to nothing; AMD hints emit nothing"))

TAG_NAMES = {WAIT_CP_ASYNC: "WAIT_CP_ASYNC", COMMIT_CP_ASYNC: "COMMIT_CP_ASYNC",
             BAR_SYNC_ALIGNED: "BAR_SYNC", BARRIER_SYNC_NONALIGNED: "BARRIER_SYNC"}
