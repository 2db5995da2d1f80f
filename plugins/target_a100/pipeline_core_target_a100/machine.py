"""A100 SXM machine facts: the figures the a100 targets' clock and mma cost come from.

NVIDIA's A100 datasheet and whitepaper: 108 SMs, a 1.41 GHz boost clock, 312 TFLOPS of dense
bf16 on the tensor cores, 1.55 TB/s (40 GB) to 2.04 TB/s (80 GB) of HBM2e, 164 KB of shared
memory per SM of which a CTA may use 163 KB.  Nothing here is measured by this project.
"""
from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class Machine:
    """What the cost model is derived from."""

    name: str
    sms: int
    clock_ghz: float
    dense_bf16_flops: float       #: flop/s, the tensor cores' dense peak
    hbm_bytes_per_s: float        #: the 80 GB part's
    smem_per_sm: int              #: bytes
    smem_per_cta_optin: int       #: bytes a CTA may use once its dynamic limit is raised

    @property
    def flop_per_cycle_per_sm(self) -> float:
        return self.dense_bf16_flops / (self.sms * self.clock_ghz * 1e9)


A100 = Machine(name="NVIDIA A100 SXM4 80GB", sms=108, clock_ghz=1.41, dense_bf16_flops=312e12,
               hbm_bytes_per_s=2.039e12, smem_per_sm=164 * 1024, smem_per_cta_optin=163 * 1024)

#: the share of the dense peak a pipelined mma.sync GEMM is assumed to reach (A100 bf16 GEMMs of
#: the vendor's library run near 250 of the 312 TFLOPS): an assumption, not a calibration; the
#: H100's is measured (benchmarks/h100/calibrate.py), and an A100's would be measured the same way
MMA_SYNC_GEMM_EFFICIENCY = 0.8
#: one mma.sync m16n8k16 is 2 x 16 x 8 x 16 = 4096 flop: at the dense peak (2049 flop per cycle
#: per SM) the SM issues one every 2.0 cycles, so a pipelined GEMM one every 2.5
MMA_M16N8K16_INTERVAL = round(2 * 16 * 8 * 16 / A100.flop_per_cycle_per_sm
                              / MMA_SYNC_GEMM_EFFICIENCY, 2)
