"""H100 SXM (80GB HBM3) machine facts: clock, SMs, warps, registers, shared memory.

Measured values come from ``benchmarks/results/h100_microbench.json`` (the repository's
benchmarks/h100/README.md explains each); the limits are compute capability 9.0's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from pipeline_core.plugin_api import AgentMachine


@attrs.frozen(kw_only=True)
class Machine:
    """What a kernel's launch shape and occupancy are checked against."""

    name: str
    sms: int
    clock_ghz: float          #: the clock that converts a schedule's cycles to time
    max_clock_ghz: float
    warps_per_sm: int
    threads_per_cta: int
    registers_per_sm: int
    registers_per_thread: int
    smem_per_sm: int          #: bytes
    smem_per_cta_optin: int   #: bytes a CTA may use once its dynamic limit is raised
    smem_static_limit: int    #: bytes before the dynamic limit must be raised
    l2_bytes: int
    barriers_per_cta: int

    def ctas_per_sm(self, threads: int, registers: int, smem: int) -> int:
        """How many CTAs of this shape fit on one SM (registers allocated per warp, 256 at a time)."""
        warps = -(-threads // 32)
        regs_per_warp = -(-registers * 32 // 256) * 256
        by_regs = self.registers_per_sm // (regs_per_warp * warps) if registers else 1 << 30
        by_warps = self.warps_per_sm // warps
        by_smem = self.smem_per_sm // smem if smem else 1 << 30
        return max(0, min(by_regs, by_warps, by_smem))


#: The clock a long mma.sync-bound kernel runs at: 1.71 GHz, measured after 3 s of full mma.sync
#: load on all 132 SMs (``mma_throughput_sustained``: 1709.6 MHz, at the power limit).  Short
#: kernels see 1.77 GHz and light load 1.98 GHz (``clocks.full_mma_load_mhz``, ``max_sm_clock_mhz``);
#: a pipelined GEMM is mma-bound and long, so its cycles convert at the sustained clock.
SUSTAINED_MMA_CLOCK_GHZ = 1.71
MAX_CLOCK_GHZ = 1.98

H100_SXM = Machine(
    name="NVIDIA H100 80GB HBM3", sms=132, clock_ghz=SUSTAINED_MMA_CLOCK_GHZ,
    max_clock_ghz=MAX_CLOCK_GHZ, warps_per_sm=64, threads_per_cta=1024,
    registers_per_sm=65536, registers_per_thread=255,
    smem_per_sm=233472,            # 228 KB per SM
    smem_per_cta_optin=232448,     # 227 KB (``device.smem_per_block_optin`` in the JSON)
    smem_static_limit=49152, l2_bytes=52428800, barriers_per_cta=16)


def launch_registers(threads: int) -> int:
    """The registers each of ``threads`` threads starts with under ``__launch_bounds__(threads,
    1)``: the SM's file shared out, 8 at a time (ptxas allocates the code before and outside a
    role's ``setmaxnreg.inc`` within it; a consumer's code after it, up to the raised count)."""
    return min(H100_SXM.registers_per_thread + 1,
               H100_SXM.registers_per_sm // threads // 8 * 8)


def register_split_refusal(producer_registers: int, consumers: int,
                           consumer_registers: int) -> tuple[str, str] | None:
    """Why a warp-specialized kernel's ``setmaxnreg`` split cannot run on the H100, as (the
    ``-p`` parameter at fault, why), or None: each role's count a multiple of 8 in 24..256
    (PTX ISA, "setmaxnreg"), and one producer warp group's and ``consumers`` consumer warp
    groups' registers within the CTA's pool: what its launch allocated (:func:`launch_registers`
    per thread), not the SM's whole file.  A split over the pool is no error ptxas reports: the
    consumers' ``setmaxnreg.inc`` waits for registers nobody frees (measured on the H200: 128 x
    (32 + 2 x 240) = 65,536 of a 384-thread launch's 64,512 hung the attention backward).  One
    statement for every family (the GEMM, attention's forward and backward)."""
    for param, regs in (("producer_registers", producer_registers),
                        ("consumer_registers", consumer_registers)):
        if regs % 8 or not 24 <= regs <= 256:
            return param, f"setmaxnreg takes a multiple of 8 in 24..256, got {regs}"
    threads = 128 * (1 + consumers)
    pool = threads * launch_registers(threads)
    total = 128 * (producer_registers + consumers * consumer_registers)
    if total > pool:
        return "consumer_registers", (f"128 x (producer_registers {producer_registers} + "
                                      f"consumers {consumers} x {consumer_registers}) = {total} "
                                      f"registers exceed the {pool} a {threads}-thread launch "
                                      f"allocates ({launch_registers(threads)} each); lower "
                                      f"-p consumer_registers or -p producer_registers")
    return None


def _agent_machine() -> "AgentMachine":
    from pipeline_core.plugin_api import AgentMachine, EpilogueCosts

    from pipeline_core_nvidia_h100.costs import CP_ASYNC_L2_LATENCY_ONE_WARP, ISSUE_RATES

    l2 = ISSUE_RATES.cp_async_l2_bytes_per_cycle_per_sm
    # The epilogue's steps (docs/guide/agents.md, "Timing model"), from the microbenchmarks
    # (costs.py cites each): the global side at the sustained L2 rate per SM with every SM busy
    # (cp_async_model), shared memory at 128 B/clk
    # (ldmatrix_throughput x4: 512 bytes per 4 cycles), a named-barrier
    # sync of 128 threads (bar_sync), a global fence or atomic one L2 round trip
    # (cp_async_latency, one warp).  Not measured: the proxy fence (one sync step).
    # direct_store_cycles: the fit's variants all stored directly; that store is 64 KB of bf16
    # per 128x256 tile from registers at the L2 rate: 65536 / 30.9 = 2121 cycles of the 4000.
    epilogue = EpilogueCosts(
        direct_store_cycles=round(128 * 256 * 2 / l2),
        stage_bytes_per_cycle=32 * 16 / ISSUE_RATES.ldmatrix_x4_per_sm,  # 512 B per x4
        bulk_store_bytes_per_cycle=l2, sync_cycles=ISSUE_RATES.bar_sync_128, fence_cycles=2,
        slice_bytes_per_cycle=l2, release_cycles=CP_ASYNC_L2_LATENCY_ONE_WARP,
        atomic_cycles=CP_ASYNC_L2_LATENCY_ONE_WARP)
    # fitted on the issue 19 run (benchmarks/results/gemm_h100_issue19.jsonl, 8192^3): mean
    # |error| 5.4% over 8 warp-specialized variants, Spearman 0.913 (0.930 with the 4 mma.sync)
    return AgentMachine(copy_latency=1500, copy_bytes_per_cycle=64, mma_efficiency=0.8,
                        step_cycles=2, wake_cycles=0, cta_overhead_cycles=4000,
                        epilogue=epilogue)


#: One H100 SM for the agents timing model (pipeline_core.agents.timing): TMA latency and
#: bandwidth, the wgmma rate against the datasheet peak, sync costs.  Fitted by
#: benchmarks/h100/calibrate.py on the measured GEMMs (benchmarks/h100/GEMM_NOTES.md).
H100_AGENT_MACHINE = _agent_machine()
