"""The wgmma wrappers every family's consumers call: one ``wgmma.mma_async m64nNkK`` with both
operands from shared memory (SS: the GEMM's A.B, attention's Q.K^T) or A from registers (RS:
attention's P.V), as device functions pasted before the kernel.  One home (issue 34): the GEMM
and attention emitters each wrote the SS wrapper.  They are written per N (one output register
per two columns: a template cannot spell an asm operand list of N / 2 registers)."""
from __future__ import annotations

from pipeline_core_nvidia_h100.warpspecialized import DTYPE_WGMMA_K

#: PTX type of each input element type (``-p dtype``)
PTX_TYPES = {"bf16": "bf16", "fp16": "f16", "e4m3": "e4m3"}


def _accumulators(n: int) -> tuple[int, str, str]:
    """The m64nN fp32 accumulator fragment: its registers per thread, their asm operands and
    their bindings (read and written)."""
    regs = n // 2
    return (regs, ", ".join(f"%{i}" for i in range(regs)),
            ", ".join(f'"+f"(d[{i}])' for i in range(regs)))


def wgmma_ss(n: int, dtype: str = "bf16", trans_a: int = 0, trans_b: int = 0,
             scale_d: bool = False, prefix: str = "wgmma") -> str:
    """The device function ``wgmma_m64n{n}k{K}(d, da, db)``: D (+)= A.B, ``dtype`` -> f32, A and
    B from shared memory by descriptor (K 16 for bf16 / fp16, 32 for e4m3: 32 bytes of K either
    way).  A ``trans`` flag of 1 reads that operand MN-major (wgmma's transpose mode), 0
    K-major; e4m3 has no transpose operands (PTX ISA, "wgmma.mma_async": fp8 reads both
    operands K-major).  ``scale_d``: a fourth argument ``int scale_d`` (0: D = A.B, the first k
    step of a tile; else D += A.B); without it D += A.B always.  ``prefix``: the function's name
    before ``_m64n...`` (a kernel that takes two wrappers of one N, K-major and MN-major, names
    one otherwise)."""
    ptx = PTX_TYPES[dtype]
    k = DTYPE_WGMMA_K[dtype]
    regs, outs, bind = _accumulators(n)
    trans = "" if dtype == "e4m3" else f", {trans_a}, {trans_b}"
    return (
        f"__device__ __forceinline__ void {prefix}_m64n{n}k{k}(float (&d)[{regs}], pcwg::u64 da, "
        f"pcwg::u64 db{', int scale_d' if scale_d else ''}) {{\n"
        f'    asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'                 " wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx}.{ptx} "\n'
        f'                 "{{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1{trans};\\n}}\\n"\n'
        f"                 : {bind}\n"
        f'                 : "l"(da), "l"(db), "r"({"scale_d" if scale_d else 1}));\n'
        f"}}\n")


def wgmma_rs(n: int, dtype: str = "bf16") -> str:
    """The device function ``wgmma_rs_m64n{n}k16(d, a0, a1, a2, a3, db)``: D += A.B with A from
    four 32-bit registers per thread (the m64k16 fragment, two 16-bit values each: attention's
    P) and B MN-major from shared memory (trans-b 1: attention's V); bf16 or fp16 (fp8 has no
    transpose operand)."""
    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"wgmma_rs: dtype {dtype!r} has no MN-major B operand; use bf16 or fp16")
    ptx = PTX_TYPES[dtype]
    k = DTYPE_WGMMA_K[dtype]
    regs, outs, bind = _accumulators(n)
    a = ", ".join(f"%{regs + i}" for i in range(4))
    return (f"__device__ __forceinline__ void wgmma_rs_m64n{n}k{k}(float (&d)[{regs}], "
            f"pcwg::u32 a0, pcwg::u32 a1, pcwg::u32 a2, pcwg::u32 a3, pcwg::u64 db) {{\n"
            f'    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ptx}.{ptx} "\n'
            f'                 "{{{outs}}}, {{{a}}}, %{regs + 4}, 1, 1, 1, 1;\\n"\n'
            f"                 : {bind}\n"
            f'                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));\n}}\n')
