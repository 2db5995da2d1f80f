"""H100 synchronisation for the wgmma family: TMA copies on mbarrier phases, wgmma groups.

The plugin's README.md ("Sync model, wgmma family") gives the facts with their PTX ISA sections;
in short:

* ``mbarrier`` is a **phase** channel.  A phase completes when the expected arrivals are in and
  every byte announced with ``arrive.expect_tx`` has landed (TMA copies complete their bytes on
  the barrier they name).  ``try_wait.parity p`` returns once the phase of parity ``p`` is
  complete; only the current and the immediately preceding phase can be tested, so a waiter
  may lag its barrier by at most one phase.  Whoever waits sees the results (acquire), not just
  the issuer, so no CTA barrier is needed after it.
* ``wgmma`` is an in-order **counter** of groups per warp group: ``wgmma.commit_group`` closes
  the open group, ``wgmma.wait_group n`` returns when at most ``n`` groups are pending.  A retired
  group has also finished reading its shared-memory operands (``resolves="both"``), which is
  what makes the stage free for the next TMA write; ``wgmma.fence`` orders register accesses
  before the next group.
* TMA writes and wgmma reads of shared memory are both in the async proxy, so the schedule needs
  no ``fence.proxy.async``; the model has no generic write into a stage a wgmma reads.
* **Named barriers** (PTX ISA, "bar, barrier"): 16 per CTA, ids 0..15.  ``bar.sync id, count``
  blocks until ``count`` threads (a multiple of the warp size) arrived on ``id``;
  ``bar.arrive id, count`` arrives without waiting.  Id 0 is ``__syncthreads`` (the kernel's
  ``bar.sync 0`` after the mbarrier initialisation), so it is reserved; the agents lowering
  orders consumer warp groups on the others (docs/guide/agents.md, "Named barriers").
* **Split-K's hand-off** (docs/guide/agents.md, "Cross-CTA reductions"; CUDA C++ Programming
  Guide, "Memory Fence Functions"): a CTA's partial sums go to its workspace slice with
  ``st.global.cg``; ``__threadfence()`` (``fence.sc.gpu``) orders them before the CTA's one
  ``atom.global.add`` on the tile's counter (release); the CTA whose add returns splits - 1 came
  last, and its ``__threadfence()`` after that read orders the slices' loads after every
  earlier arrival (acquire).  The consumers meet on a named barrier (``bar.sync``, the split
  barrier) around the arrive and before the reset, so each is one action of the CTA.
* **The TMA store** (docs/guide/agents.md, "Bulk stores"; PTX ISA 8.x, "Data Movement and
  Conversion Instructions: cp.async.bulk.tensor", "cp.async.bulk.commit_group",
  "cp.async.bulk.wait_group", and "Memory Consistency Model: Proxies", "membar/fence"):
  ``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group`` stores a staging buffer by the async
  proxy, in a *bulk async-group* of the issuing thread, closed by ``cp.async.bulk.commit_group``;
  ``cp.async.bulk.wait_group.read N`` returns when at most N of the thread's most recent groups
  still read their source (the buffer may be written again), ``cp.async.bulk.wait_group 0`` when
  every group completed, writes included.  The groups are the issuing thread's own, so the
  consumer's 128 threads meet the elected issuer on a named barrier after its wait and before
  its store; their ``st.shared`` writes are generic-proxy, so each thread runs
  ``fence.proxy.async.shared::cta`` before the async proxy reads them.
"""
from __future__ import annotations

import attrs

from pipeline_core.plugin_api import (BarrierKind, BulkStoreChannel, Channel, ChannelKind,
                                      ClusterSync, CrossCtaReduction, Effect, FrameworkTag,
                                      NamedBarriers, OpRole, SyncModel)

MBARRIER = "mbarrier"
WGMMA = "wgmma"

#: This family's sync tags (the mma.sync family's are 150-152).
MBAR_WAIT = 160
MBAR_ARRIVE = 161
MBAR_EXPECT_TX = 162
WGMMA_FENCE = 163
WGMMA_COMMIT = 164
WGMMA_WAIT = 165
NAMED_SYNC = 166
NAMED_ARRIVE = 167
#: split-K's steps (``CrossCtaReduction.tags``, in their order)
SLICE_STORE, RELEASE_FENCE, COUNT_ARRIVE, COUNT_ACQUIRE, SLICE_READ, COUNT_RESET = range(168, 174)
#: the TMA store's steps (``BulkStoreChannel.tags``)
STORE_WAIT, STAGE_WRITE, PROXY_FENCE, STORE_ISSUE, STORE_COMMIT, STORE_DRAIN = range(174, 180)
#: the cp.async producer's arrival (cp.async.mbarrier.arrive.noinc: the thread's earlier copies
#: landed) and the consumers' proxy fence before they read its copies (:data:`CP_ASYNC_SYNC`)
CP_ASYNC_ARRIVE = 180
#: the producer's acquire of the tensor maps a grouped kernel along K reads (:data:`DEVICE_MAPS_SYNC`)
DESCRIPTOR_ACQUIRE = 181
#: the bulk async-group channel of a buffer reduced into global memory every K tile
#: (:data:`H100_BULK_REDUCE_SYNC`): its read-completion wait and its commit
BULK_WAIT_READ, BULK_COMMIT = 182, 183
#: the turn-ordered adds' steps (:data:`H100_ORDERED_REDUCE_SYNC`)
TURN_WAIT, TURN_DRAIN, TURN_FENCE, TURN_RELEASE = 184, 185, 186, 187
#: ``wgmma.wait_group N``: the PTX ISA gives N as an integer constant; SASS encodes
#: ``WARPGROUP.DEPBAR.LE gsb0, N`` and the schedule never needs more than its ring depth.
MAX_WGMMA_WAIT = 7

MBARRIER_CHANNEL = Channel(
    name=MBARRIER, label="mbarrier phases", wait_tag=MBAR_WAIT, wait_name="MBAR_WAIT",
    kind=ChannelKind.PHASE, unit="bytes", in_order=True, owner="cta",
    results_visible_to="waiters")
WGMMA_CHANNEL = Channel(
    name=WGMMA, label="wgmma groups", wait_tag=WGMMA_WAIT, wait_name="WAIT_WGMMA",
    unit="group", in_order=True, owner="warpgroup", results_visible_to="issuer",
    max_wait=MAX_WGMMA_WAIT, commit_tag=WGMMA_COMMIT)

EFFECTS = (
    Effect(role=OpRole.GLOBAL_LOAD, counter=MBARRIER),           # TMA: bytes on the stage's phase
    Effect(role=OpRole.COMPUTE, counter=WGMMA, resolves="both"),  # wgmma: reads end at retirement
)

#: the CTA's 16 named barriers; id 0 is ``bar.sync 0`` (``__syncthreads``), the kernel's own
NAMED_BARRIERS = NamedBarriers(ids=16, reserved=(0,), sync_tag=NAMED_SYNC, arrive_tag=NAMED_ARRIVE,
                               sync_form="bar.sync {id}, {count}",
                               arrive_form="bar.arrive {id}, {count}", warp_size=32)

#: split-K's hand-off through global memory (the module says why each step is what it is)
SPLIT_K_REDUCTION = CrossCtaReduction(
    tags={"slice_store": SLICE_STORE, "release_fence": RELEASE_FENCE,
          "count_arrive": COUNT_ARRIVE, "count_acquire": COUNT_ACQUIRE, "slice_read": SLICE_READ,
          "count_reset": COUNT_RESET},
    forms={"slice_store": "st.global.cg.f32 (the CTA's workspace slice)",
           "release_fence": "fence.sc.gpu (__threadfence)",
           "count_arrive": "bar.sync; atom.global.add.u32 (one thread); bar.sync",
           "count_acquire": "branch: the last arrival only; fence.sc.gpu (__threadfence)",
           "slice_read": "ld.global.cg.f32 (every slice, in split order)",
           "count_reset": "bar.sync; st.global.u32 0 (one thread)"},
    cta_join="the consumers meet on the split named barrier (bar.sync) before the counter's "
             "atomic add and before its reset",
    next_use="the next launch on the stream (the persistent grid gives each output tile its own "
             "counter and slices within a launch)")

#: the TMA-store epilogue's store from shared memory (the module says why each step is what it is)
TMA_STORE = BulkStoreChannel(
    tags={"store_wait": STORE_WAIT, "stage_write": STAGE_WRITE, "proxy_fence": PROXY_FENCE,
          "store_issue": STORE_ISSUE, "store_commit": STORE_COMMIT, "store_drain": STORE_DRAIN},
    forms={"store_wait": "cp.async.bulk.wait_group.read {wait_value} (the issuer)",
           "stage_write": "st.shared (the fragment, 128-byte swizzled)",
           "proxy_fence": "fence.proxy.async.shared::cta",
           "store_issue": "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group (the issuer)",
           "store_commit": "cp.async.bulk.commit_group (the issuer)",
           "store_drain": "cp.async.bulk.wait_group 0 (the issuer)"},
    max_wait=MAX_WGMMA_WAIT,
    issuer="one elected thread of the consumer (bulk async-groups are per thread)")

#: A 2-CTA cluster (docs/guide/agents.md, "Clusters"; PTX ISA, "mbarrier.arrive", "mapa",
#: "barrier.cluster", "cp.async.bulk.tensor"): a peer CTA's stage is released with ``mapa`` +
#: ``mbarrier.arrive.release.cluster.shared::cluster``; only the cluster-scope release orders
#: the consumers' wgmma reads before the peer producer's next multicast, and only if the
#: producer's wait on that phase acquires at cluster scope too (a ``.cta``-scope arrive or wait
#: is the race of NVIDIA/cutlass#3324).  ptxas puts ``MEMBAR.ALL.GPU`` before each cluster-scope
#: release, so the consumers' releases go through a relay (``relay``: warp 1 of the producer
#: warp group waits on the stage's relay barrier and makes the one cluster-scope arrival), which
#: keeps that fence off the consumers' path.  The barriers' initialisation is published
#: cluster-wide (``fence.mbarrier_init.release.cluster``, then ``barrier.cluster``) before any
#: CTA signals a peer, and every CTA passes ``barrier.cluster`` again before it exits.
CLUSTER = ClusterSync(
    max_ctas=2, release_scopes=("cluster",), relay=True,
    forms={"remote_arrive": "mapa.shared::cluster.u32; "
                            "mbarrier.arrive.release.cluster.shared::cluster.b64",
           "peer_wait": "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 (loop)",
           "multicast": "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx"
                        "::bytes.multicast::cluster (cta mask 0b11)",
           "start": "fence.mbarrier_init.release.cluster; barrier.cluster.arrive.release; "
                    "barrier.cluster.wait.acquire",
           "end": "barrier.cluster.arrive.release; barrier.cluster.wait.acquire"})

#: ``bar.sync 0`` publishes the barriers' initialisation before any agent uses them.
BARRIERS = (BarrierKind(tag=int(FrameworkTag.BARRIER), name="bar.sync", participants="cta",
                        aligned=True, drains=False, publishes="completed"),)

ISA_FORMS = {
    MBAR_WAIT: "mbarrier.try_wait.parity.shared::cta.b64 (loop)",
    MBAR_ARRIVE: "mbarrier.arrive.shared::cta.b64",
    MBAR_EXPECT_TX: "mbarrier.arrive.expect_tx.shared::cta.b64 {wait_value}",
    WGMMA_FENCE: "wgmma.fence.sync.aligned",
    WGMMA_COMMIT: "wgmma.commit_group.sync.aligned",
    WGMMA_WAIT: "wgmma.wait_group.sync.aligned {wait_value}",
    **{tag: SPLIT_K_REDUCTION.forms[step] for step, tag in SPLIT_K_REDUCTION.tags.items()},
    **{tag: TMA_STORE.forms[step] for step, tag in TMA_STORE.tags.items()},
}

H100_WGMMA_SYNC = SyncModel(
    name="nvidia-h100-wgmma", channels=(MBARRIER_CHANNEL, WGMMA_CHANNEL), effects=EFFECTS,
    barriers=BARRIERS, isa_forms=ISA_FORMS, register_interlock=False,
    shared_in_order=False, global_loads_write_shared=True,
    agent_tags={"arrive": MBAR_ARRIVE, "expect_tx": MBAR_EXPECT_TX, "fence": WGMMA_FENCE},
    named_barriers=NAMED_BARRIERS, reduction=SPLIT_K_REDUCTION, bulk_store=TMA_STORE,
    cluster=CLUSTER,
    notes=("a waiter may lag an mbarrier by at most one phase (try_wait.parity tests only the "
           "current and the preceding phase)",
           "a wgmma group's shared-memory reads end when wait_group retires it",
           "TMA writes and wgmma reads are both async-proxy: no proxy fence is needed"))

TAG_NAMES = {MBAR_WAIT: "MBAR_WAIT", MBAR_ARRIVE: "MBAR_ARRIVE", MBAR_EXPECT_TX: "MBAR_EXPECT_TX",
             WGMMA_FENCE: "WGMMA_FENCE", WGMMA_COMMIT: "WGMMA_COMMIT", WGMMA_WAIT: "WAIT_WGMMA",
             NAMED_SYNC: "NAMED_SYNC", NAMED_ARRIVE: "NAMED_ARRIVE",
             **{tag: step.upper() for step, tag in SPLIT_K_REDUCTION.tags.items()},
             **{tag: step.upper() for step, tag in TMA_STORE.tags.items()}}

#: The producer loading by cp.async instead of TMA (``GemmVariant.load = "cp_async"``; PTX ISA,
#: "cp.async", "cp.async.mbarrier.arrive", "Proxies", "wgmma: Async Proxy"): each of the
#: producer's 128 threads issues 16-byte ``cp.async.cg.shared.global`` copies into the stage and
#: then ``cp.async.mbarrier.arrive.noinc``, an arrival the hardware makes once every cp.async that
#: thread issued before it completed; ``.noinc`` leaves the pending count alone, so the full
#: barrier is initialised with the 128 arrivals and no bytes are announced.  The copies write by
#: the generic proxy and wgmma reads by the async proxy, so each consumer thread runs
#: ``fence.proxy.async.shared::cta`` after its wait on the stage and before its wgmma group.
#: The rest is :data:`H100_WGMMA_SYNC`'s.
CP_ASYNC_EFFECTS = (
    Effect(role=OpRole.GLOBAL_LOAD, counter=MBARRIER, completes="arrival", proxy="generic"),
    Effect(role=OpRole.COMPUTE, counter=WGMMA, resolves="both", proxy="async"),
)
CP_ASYNC_SYNC = attrs.evolve(
    H100_WGMMA_SYNC, name="nvidia-h100-wgmma-cp-async", effects=CP_ASYNC_EFFECTS,
    isa_forms={**ISA_FORMS, CP_ASYNC_ARRIVE: "cp.async.mbarrier.arrive.noinc.shared::cta.b64"},
    agent_tags={**H100_WGMMA_SYNC.agent_tags, "async_arrive": CP_ASYNC_ARRIVE,
                "proxy_fence": PROXY_FENCE},
    notes=("a waiter may lag an mbarrier by at most one phase (try_wait.parity tests only the "
           "current and the preceding phase)",
           "a wgmma group's shared-memory reads end when wait_group retires it",
           "a cp.async arrival (.noinc) completes one of the stage's 128 arrivals once the "
           "arriving thread's earlier copies landed; the full barrier counts no bytes",
           "cp.async writes by the generic proxy, wgmma reads by the async proxy: each reader "
           "fences (fence.proxy.async.shared::cta) after its wait"))
CP_ASYNC_TAG_NAMES = {**TAG_NAMES, CP_ASYNC_ARRIVE: "ASYNC_ARRIVE"}


#: The grouped GEMM along K (``-p batch=grouped_k``; docs/guide/matmul.md, "Groups along K"; PTX
#: ISA, "tensormap.replace", "fence.proxy.tensormap", "Proxies"): a pre-pass kernel writes one
#: tensor map per group and operand into global memory (a copy of the host-encoded map, its
#: global address and K extent replaced by ``tensormap.replace``, then ``fence.proxy.tensormap::
#: generic.release.gpu``), so each group's last K tile is zero-filled by TMA at the group's end.
#: The producer's copies read those maps through the tensormap proxy, which may still hold a map
#: the same address had at an earlier launch: it runs ``fence.proxy.tensormap::generic.acquire.
#: gpu`` on the tile's maps before its copies (the ``descriptor_acquire`` step the agents
#: lowering places and the proof requires).  The rest is :data:`H100_WGMMA_SYNC`'s.
DEVICE_MAPS_EFFECTS = (
    Effect(role=OpRole.GLOBAL_LOAD, counter=MBARRIER, descriptor="device"),
    Effect(role=OpRole.COMPUTE, counter=WGMMA, resolves="both"),
)
DEVICE_MAPS_SYNC = attrs.evolve(
    H100_WGMMA_SYNC, name="nvidia-h100-wgmma-device-maps", effects=DEVICE_MAPS_EFFECTS,
    isa_forms={**ISA_FORMS, DESCRIPTOR_ACQUIRE: "fence.proxy.tensormap::generic.acquire.gpu "
                                                "[map], 128 (each of the tile's maps)"},
    agent_tags={**H100_WGMMA_SYNC.agent_tags, "descriptor_acquire": DESCRIPTOR_ACQUIRE},
    notes=(*H100_WGMMA_SYNC.notes,
           "the copies read tensor maps a pre-pass kernel wrote (release); the producer "
           "acquires them (fence.proxy.tensormap::generic.acquire.gpu) before its copies"))
DEVICE_MAPS_TAG_NAMES = {**TAG_NAMES, DESCRIPTOR_ACQUIRE: "DESCRIPTOR_ACQUIRE"}


#: A buffer a consumer hands, every K tile, to an agent that reduces it into global memory
#: (docs/guide/agents.md, "Hand-overs between turns"; PTX ISA, "cp.reduce.async.bulk",
#: "cp.async.bulk.commit_group", "cp.async.bulk.wait_group", "Proxies"): the attention
#: backward's dQ block.  The consumer's threads write it with ``st.shared`` (generic proxy, an
#: op on operand channel :data:`STAGE_OPERAND`), run ``fence.proxy.async.shared::cta`` and
#: arrive on a named barrier; the writer's elected thread issues
#: ``cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`` (async proxy, an op on
#: operand channel :data:`BULK_REDUCE_OPERAND`) in a bulk async-group of its own, closes it with
#: ``cp.async.bulk.commit_group``, and ``cp.async.bulk.wait_group.read N`` returns once at most N
#: of its groups still read their buffers (``resolves="both"``: the read's end frees the
#: buffer), after which it hands the buffer back on the ordering's next barrier.  The groups
#: touch no registers, so no ``wgmma.fence`` opens them (``Channel.registers``).
STAGE_OPERAND, BULK_REDUCE_OPERAND = 8, 9
BULK = "bulk"
BULK_CHANNEL = Channel(
    name=BULK, label="bulk async-groups", wait_tag=BULK_WAIT_READ, wait_name="WAIT_BULK_READ",
    unit="group", in_order=True, owner="thread", results_visible_to="issuer",
    max_wait=MAX_WGMMA_WAIT, commit_tag=BULK_COMMIT, registers=False)
BULK_REDUCE_EFFECTS = (
    EFFECTS[0],
    # wgmma reads shared memory by the async proxy: a consumer's st.shared write another
    # consumer's wgmma reads (the backward's dS with its dQ cut by columns) is fenced first
    Effect(role=OpRole.COMPUTE, counter=WGMMA, resolves="both", proxy="async"),
    Effect(role=OpRole.VALU_COMPUTE, counter=None, channel=STAGE_OPERAND, proxy="generic"),
    Effect(role=OpRole.COMPUTE, counter=BULK, channel=BULK_REDUCE_OPERAND, resolves="both",
           proxy="async"),
)
H100_BULK_REDUCE_SYNC = attrs.evolve(
    H100_WGMMA_SYNC, name="nvidia-h100-wgmma-bulk-reduce",
    channels=(MBARRIER_CHANNEL, WGMMA_CHANNEL, BULK_CHANNEL), effects=BULK_REDUCE_EFFECTS,
    isa_forms={**ISA_FORMS,
               BULK_WAIT_READ: "cp.async.bulk.wait_group.read {wait_value} (the issuer)",
               BULK_COMMIT: "cp.async.bulk.commit_group (the issuer)"},
    agent_tags={**H100_WGMMA_SYNC.agent_tags, "proxy_fence": PROXY_FENCE},
    notes=(*H100_WGMMA_SYNC.notes,
           "a staged buffer's st.shared writes are fenced (fence.proxy.async) by the threads "
           "that wrote them before the named barrier that hands them to the bulk reduce",
           "a bulk reduce's group frees its buffer once cp.async.bulk.wait_group.read retires "
           "it"))
BULK_TAG_NAMES = {**TAG_NAMES, BULK_WAIT_READ: "WAIT_BULK_READ", BULK_COMMIT: "BULK_COMMIT"}

#: :data:`H100_BULK_REDUCE_SYNC` with its reduces ordered across CTAs (docs/guide/agents.md,
#: "Turn-ordered adds"; PTX ISA, "Memory Consistency Model", "cp.async.bulk.wait_group",
#: "membar/fence"): the writer's elected thread spins on ``ld.acquire.gpu`` of the part's
#: counter until it equals the add's turn and fences the async proxy after it (its reduce reads
#: the earlier turns' sums); after the reduce, ``cp.async.bulk.wait_group 0`` (the group
#: complete, its writes performed: the ``.read`` form only says the source was read),
#: ``fence.proxy.async.global`` (the async proxy's writes ordered before the generic release)
#: and ``red.release.gpu.global.add.s32`` hands the turn on.
H100_ORDERED_REDUCE_SYNC = attrs.evolve(
    H100_BULK_REDUCE_SYNC, name="nvidia-h100-wgmma-ordered-reduce",
    isa_forms={**H100_BULK_REDUCE_SYNC.isa_forms,
               TURN_WAIT: "ld.acquire.gpu.global.s32 (spin until the turn); "
                          "fence.proxy.async.global (the issuer)",
               TURN_DRAIN: "cp.async.bulk.wait_group {wait_value} (the issuer)",
               TURN_FENCE: "fence.proxy.async.global (the issuer)",
               TURN_RELEASE: "red.release.gpu.global.add.s32 1 (the issuer)"},
    agent_tags={**H100_BULK_REDUCE_SYNC.agent_tags, "turn_wait": TURN_WAIT,
                "turn_drain": TURN_DRAIN, "turn_fence": TURN_FENCE,
                "turn_release": TURN_RELEASE},
    notes=(*H100_BULK_REDUCE_SYNC.notes,
           "ordered reduces: each waits (acquire) for its turn on its part's counter and hands "
           "the next on (release) once cp.async.bulk.wait_group 0 completed it"))
