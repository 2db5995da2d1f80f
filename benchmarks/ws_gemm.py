"""The compiled warp-specialized GEMM in the H100 harness (issue 19): build, mutate, launch.

``gemm_h100.py`` imports :data:`WS_COMPILED` and :func:`ws_runner` so the schedule
``warpspecialized-gemm`` is checked and timed in the same process as cuBLAS, Triton and the
mma.sync kernels.  Run alone (CuPy + NumPy only, for compute-sanitizer or a mutated schedule):

  python3 benchmarks/ws_gemm.py --size 1024 [--config ws-s4] [--mutate loosen-wgmma-wait]

A mutation (:data:`MUTATIONS`, made with ``pipeline_core.check.mutate``) is applied to the
compiled plan, judged by the agents checker, then emitted with ``--allow-unsafe`` semantics and run: the output shows whether
the GPU agrees that it races (wrong results) or deadlocks (the watchdog traps).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "plugins" / "nvidia_h100"):
    if str(extra) not in sys.path:  # a checkout on PYTHONPATH without installed plugins
        sys.path.insert(0, str(extra))

TOL_ABS = 1e-2
SCHEDULE = "warpspecialized-gemm"

#: (label, -p params, -T stages) of the compiled warp-specialized schedule
WS_COMPILED = (
    ("ws-s4", {}, 4),
    ("ws-s3", {}, 3),
    ("ws-s2", {}, 2),
    ("ws-bn128-s4", {"BN": "128"}, 4),
    ("ws-bn128-s5", {"BN": "128"}, 5),
    ("ws-1c-s4", {"BM": "64", "consumers": "1"}, 4),
    ("ws-lag0-s4", {"release_lag": "0"}, 4),
    ("ws-lag2-s4", {"release_lag": "2"}, 4),
)
#: configurations the harness also launches persistent (one CTA per SM, looping over tiles)
WS_PERSISTENT = ("ws-s4", "ws-s3")


def h100_host():
    """The installed plugins, or, from a checkout on PYTHONPATH (no entry points, as on the GPU
    machine), the H100 and ping-pong plugins loaded by module: every harness compile uses it."""
    from pipeline_core.plugins import default_host

    host = default_host()
    if SCHEDULE in host.schedules and "h100-pingpong" in host.targets:
        return host
    from pipeline_core.plugins import PluginHost
    return PluginHost(extra_modules=["pipeline_core_nvidia_h100.plugin",
                                     "pipeline_core_schedules_pingpong.plugin"])


#: what each named mutation edits: (category of pipeline_core.check.mutate, agents, delta).
#: The emitter writes one consumer program, so a consumer edit goes to every consumer.
MUTATIONS = {
    "drop-release": ("drop_arrive", "consumers", 1),
    "loosen-wgmma-wait": ("loosen_counter_wait", "consumers", 1),
    "early-parity": ("flip_phase_offset", "consumers", -1),
    "drop-acquire": ("drop_acquire", "producer", 1),
}


def mutate_plan(plan, name: str):
    """``plan`` with the named mutation made in the kernel loop of the agents it names."""
    from pipeline_core.check.mutate import agent_mutations

    category, who, delta = MUTATIONS[name]
    consumers = {p.name for p in plan.programs if p.role.issuers > 1}
    picked = [m for m in agent_mutations(plan, (category,))
              if m.section == "kernel" and m.delta == delta
              and (m.agent in consumers) == (who == "consumers")]
    for m in picked:
        plan = m.apply(plan)
    return plan


def ws_compile(params: dict, stages: int, mutation: str | None = None,
               allow_unsafe: bool = False):
    """Compile the schedule; with ``mutation``, the mutated plan and the checker's finding on it.

    Returns (compiled, finding): finding is "" for the unmutated schedule, else the refusal text
    (or "SAFE" when the checker accepts the mutation, which would be a checker bug).
    """
    import attrs
    from pipeline_core.api import compile_named
    from pipeline_core.proof import prove, refusal

    host = h100_host()
    c = compile_named(SCHEDULE, target="h100", params=params,
                      target_args={"stages": str(stages)}, host=host, allow_unsafe=allow_unsafe,
                      reference=False)
    if mutation is None:
        return c, ""
    mutated = attrs.evolve(c, plan=mutate_plan(c.plan, mutation), proof=None)
    proof = prove(mutated, host)
    finding = "SAFE" if proof.safe else str(refusal(mutated, proof))
    return attrs.evolve(mutated, proof=proof), finding


def ws_source(params: dict, stages: int, mutation: str | None = None, watchdog: int = 0,
              allow_unsafe: bool = False):
    from pipeline_core_nvidia_h100.emit_wgmma import emit_wgmma

    c, finding = ws_compile(params, stages, mutation, allow_unsafe)
    return emit_wgmma(c, watchdog=watchdog), c.launch.geometry, finding  # declared once


def ws_runner(builder, params: dict, stages: int, mutation: str | None = None, watchdog: int = 0,
              allow_unsafe: bool = False, persistent: bool = False, ctas: int = 0):
    """A ``run(a, b, c)`` for the harness, and the geometry; ``persistent``: a grid of ``ctas``
    CTAs (0: one per SM) looping over the output tiles, else one CTA per output tile."""
    from pipeline_core_nvidia_h100.emit_wgmma import KERNEL_NAME
    from pipeline_core_nvidia_h100.tma import WsLauncher

    src, g, _ = ws_source(params, stages, mutation, watchdog, allow_unsafe)
    if persistent and not ctas:
        import cupy as cp
        ctas = cp.cuda.Device().attributes["MultiProcessorCount"]
    launch = WsLauncher(builder, builder.compile(src, KERNEL_NAME), g, ctas)

    def run(a, b, c):
        M, K = a.shape
        launch(a, b, c, M, b.shape[0], K)
    return run, g


def standalone(size: int, label: str, mutation: str | None, watchdog: int, repeats: int,
               allow_unsafe: bool, ctas: int = 0) -> int:
    """One compiled kernel at SIZE^3 with CuPy + NumPy only; exit 0 when every run is correct."""
    import cupy as cp
    import numpy as np
    from pipeline_core_nvidia_h100.runtime import KernelBuilder

    params, stages = next((p, s) for lab, p, s in WS_COMPILED if lab == label)
    if mutation is not None:
        _, _, finding = ws_source(params, stages, mutation, allow_unsafe=allow_unsafe)
        print(f"checker on {label} with {mutation}: {finding}", flush=True)
    builder = KernelBuilder()
    run, g = ws_runner(builder, params, stages, mutation, watchdog, allow_unsafe,
                       persistent=ctas > 0, ctas=ctas)
    rng = np.random.default_rng(19)
    a32 = rng.standard_normal((size, size), dtype=np.float32)
    b32 = rng.standard_normal((size, size), dtype=np.float32)
    a16 = (a32.view(np.uint32) >> 16).astype(np.uint16)
    b16 = (b32.view(np.uint32) >> 16).astype(np.uint16)
    af = (a16.astype(np.uint32) << 16).view(np.float32)
    bf = (b16.astype(np.uint32) << 16).view(np.float32)
    ref = af @ bf.T
    da, db = cp.asarray(a16), cp.asarray(b16)
    errs = []
    for _ in range(repeats):
        dc = cp.full((size, size), 0x7FC0, dtype=cp.uint16)  # bf16 NaN
        run(da, db, dc)
        cp.cuda.Device().synchronize()
        out = (cp.asnumpy(dc).astype(np.uint32) << 16).view(np.float32)
        errs.append(float(np.linalg.norm(np.nan_to_num(out, nan=1e6) - ref) / np.linalg.norm(ref)))
    print(f"ws {label} ctas={ctas or 'per-tile'} mutation={mutation} {size}^3: rel_err max {max(errs):.3e} over "
          f"{repeats} runs, wrong runs {sum(e > TOL_ABS for e in errs)}", flush=True)
    return 0 if max(errs) <= TOL_ABS else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--config", default="ws-s4", choices=[c[0] for c in WS_COMPILED])
    ap.add_argument("--mutate", default=None, choices=sorted(MUTATIONS))
    ap.add_argument("--watchdog", type=int, default=0, help="mbarrier polls before a trap")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ctas", type=int, default=0,
                    help="a persistent grid of this many CTAs (default: one CTA per output tile)")
    ap.add_argument("--emit", action="store_true", help="print the kernel source and exit")
    ap.add_argument("--allow-unsafe", action="store_true",
                    help="emit a schedule the checker does not prove safe (a mutation always is)")
    args = ap.parse_args(argv)
    if args.emit:
        params, stages = next((p, s) for lab, p, s in WS_COMPILED if lab == args.config)
        print(ws_source(params, stages, args.mutate, args.watchdog, args.allow_unsafe)[0])
        return 0
    return standalone(args.size, args.config, args.mutate, args.watchdog, args.repeats,
                      args.allow_unsafe, args.ctas)


if __name__ == "__main__":
    sys.exit(main())
