"""Autotuning the ``matmul()`` call: the timing model ranks the variants, the best few are timed.

Why: no one tile, ring depth and split suits every shape (issue 26).  Timing every variant on
the GPU costs a build and a launch each; the agents timing model (pipeline_core/agents/timing.py,
docs/guide/agents.md "Timing model") with the H100's fitted machine ranks them without running
anything, so only the model's best few (:data:`TOP_K`) are timed, by a timer the caller gives
(CUDA events in production, a fake in tests).  The winner is kept in a JSON file under the kernel
cache's folder (``PIPELINE_CORE_CACHE_DIR``, :mod:`kernel_cache`), keyed by device, element type,
layout, shape bucket, toolkit and a hash of the kernel's generating source, so a later process
reuses it and a changed toolkit or emitter tunes again.  No GPU package is imported here.
docs/guide/matmul.md, "Autotuning".
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from pipeline_core_nvidia_h100.gemm_call import split_count
from pipeline_core_nvidia_h100.kernel_cache import cache_dir, ensure_folder
from pipeline_core_nvidia_h100.warpspecialized import (SCHEDULE_NAME, GemmVariant, WsGeometry,
                                                       k_tile)

if TYPE_CHECKING:
    from pipeline_core.plugin_api import AgentMachine, CompiledSchedule

#: Variants timed on a cold tuning: the model's best few (its ranking is good, not exact:
#: Spearman 0.91 on the calibration run, pipeline_core_nvidia_h100/machine.py).
TOP_K = 3
#: The environment switch for calls that do not pass ``autotune=`` (off until timed on a GPU).
ENV = "PIPELINE_CORE_AUTOTUNE"
#: The tuning cache's file name inside :func:`kernel_cache.cache_dir`.
CACHE_FILE = "autotune.json"
#: The cache file's format; a file of another version is ignored (and rewritten).
FORMAT = 1
#: The plugin modules whose text decides the kernel a candidate builds (:func:`source_hash`).
SOURCES = ("autotune.py", "emit_wgmma.py", "gemm_call.py", "gemm_signature.py", "kit/signature.py",
           "skeleton.py", "warpspecialized.py")
#: K tiles the model runs exactly; longer K loops are extrapolated from the steady state
#: between :data:`STEADY` and this (the ring's period repeats: :func:`model_cycles`).
EXACT_K_TILES = 32
STEADY = 16
#: setmaxnreg of each consumer warp group by consumer count (the SM's 64K registers over the
#: producer's 40 and the consumers: warpspecialized.WsGeometry.validate).
CONSUMER_REGISTERS = {1: 232, 2: 232, 3: 152}
PRODUCER_REGISTERS = 40
BK = 64


class AutotuneError(ValueError):
    """A bad autotune setting (the ``PIPELINE_CORE_AUTOTUNE`` value)."""


@attrs.frozen(kw_only=True, order=True)
class Candidate:
    """One variant the call may launch: CTA tile, ring depth, consumer warp groups, grouped
    raster width and whether K is split (the split count then follows the shape:
    gemm_call.split_count)."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    group_m: int = 8
    split_k: bool = False

    def geometry(self, variant: GemmVariant = GemmVariant()) -> WsGeometry:
        return WsGeometry(bm=self.bm, bn=self.bn, bk=k_tile(variant.dtype),
                          consumers=self.consumers,
                          stages=self.stages, producer_registers=PRODUCER_REGISTERS,
                          consumer_registers=CONSUMER_REGISTERS[self.consumers],
                          group_m=self.group_m, variant=variant)

    def params(self, variant: GemmVariant) -> dict[str, str]:
        """The schedule's ``-p`` parameters for this candidate's geometry and ``variant`` (the
        call's plan sets the variant's ``split_k``; the ring depth is the target's ``-T
        stages``)."""
        g = self.geometry(variant)
        return {**{k: str(val) for k, val in g.as_params().items()},
                **{k: str(val).lower() for k, val in attrs.asdict(variant).items()}}

    def describe(self) -> str:
        return (f"{self.bm}x{self.bn} tile, {self.stages} stages, {self.consumers} consumers, "
                f"group_m {self.group_m}" + (", split-K" if self.split_k else ""))


#: The space searched: every combination that :meth:`WsGeometry.validate` accepts.
TILE_M = (64, 128, 192, 256)
TILE_N = (64, 128, 256)
STAGES = (3, 4, 5, 6)
CONSUMERS = (1, 2, 3)
GROUP_M = (8,)  # the model has no L2: it cannot rank raster widths, so one is searched


def candidates(m: int, n: int, k: int, variant: GemmVariant, sms: int) -> list[Candidate]:
    """The variants valid for ``variant`` (its layout constrains the tile) and shape M x N x K,
    in a fixed order: split-K ones only where the shape splits (gemm_call.split_count)."""
    found = []
    for bm in TILE_M:
        for bn in TILE_N:
            tiles = -(-m // bm) * -(-n // bn)
            splits = split_count(tiles, max(1, -(-k // BK)), sms)
            for split in (False, True) if splits > 1 else (False,):
                for stages in STAGES:
                    for consumers in CONSUMERS:
                        for group_m in GROUP_M:
                            c = Candidate(bm=bm, bn=bn, stages=stages, consumers=consumers,
                                          group_m=group_m, split_k=split)
                            if takes(c, variant) or takes(c, direct_store(variant)):
                                found.append(c)
    return found


def direct_store(variant: GemmVariant) -> GemmVariant:
    """``variant`` with the direct store: a candidate whose tile or shared memory cannot take
    the TMA-store epilogue still runs, storing directly (matmul_call._plan plans it so)."""
    return attrs.evolve(variant, store="direct")


def takes(c: Candidate, variant: GemmVariant) -> bool:
    """Whether candidate ``c`` builds ``variant`` (its geometry validates)."""
    from pipeline_core.plugin_api import ProgramError

    try:
        c.geometry(variant).validate()
    except ProgramError:
        return False
    return True


@attrs.frozen(kw_only=True)
class _Model:
    """A candidate's compiled plan, body and timing machine (shape-free: only K varies)."""

    compiled: CompiledSchedule
    machine: AgentMachine


def launched_store(c: Candidate, variant: GemmVariant) -> str:
    """The epilogue's store candidate ``c`` launches for ``variant``: the variant's, unless K is
    split (the reduced tile is stored directly) or the TMA store does not fit ``c``
    (matmul_call._plan falls back to the direct store then)."""
    if variant.store == "tma" and not c.split_k and takes(c, variant):
        return "tma"
    return "direct"


@functools.lru_cache(maxsize=256)
def _compiled(c: Candidate, store: str = "direct") -> _Model | None:
    """The candidate's schedule with ``store`` compiled (and so proven) once per process; None
    when the compile refuses it (such a candidate is never ranked)."""
    from pipeline_core.plugin_api import PipelineError, compile_named

    from pipeline_core_nvidia_h100.matmul_call import CALL

    variant = GemmVariant(tails=True, split_k=c.split_k, store=store)
    try:
        compiled = compile_named(SCHEDULE_NAME, target="h100", params=c.params(variant),
                                 target_args={"stages": str(c.stages)}, host=CALL.host())
    except PipelineError:
        return None
    machine = getattr(compiled.target_profile, "agent_machine", None)
    if machine is None:
        return None
    return _Model(compiled=compiled, machine=machine)


@functools.lru_cache(maxsize=4096)
def model_cycles(c: Candidate, k_tiles: int, store: str = "direct",
                 splits: int = 1) -> float | None:
    """One output tile of ``k_tiles`` K tiles on the agents timing model, in cycles, with its
    epilogue: the ``store``'s steps, and with split-K the finish of the tile's last CTA, which
    reads ``splits`` slices (docs/guide/agents.md, "Timing model"); beyond
    :data:`EXACT_K_TILES` the steady state's slope carries it on (the ring repeats each
    period, so the cycles grow linearly).  None: the candidate does not compile."""
    from pipeline_core.plugin_api import simulate_agents

    model = _compiled(c, store)
    if model is None:
        return None
    plan, body, machine = model.compiled.plan, model.compiled.body, model.machine

    def run(tiles: int) -> float:
        return simulate_agents(plan, body, machine, max(tiles, plan.min_tiles),
                               splits=splits).cycles

    if k_tiles <= EXACT_K_TILES:
        return run(k_tiles)
    lo, hi = run(STEADY), run(EXACT_K_TILES)
    return hi + (k_tiles - EXACT_K_TILES) * (hi - lo) / (EXACT_K_TILES - STEADY)


def score(c: Candidate, m: int, n: int, k: int, sms: int,
          store: str = "direct") -> float | None:
    """The modelled cycles of the whole call: the output tiles (times the split) in waves of
    ``sms`` CTAs, each wave one tile's modelled cycles over its K tiles and its epilogue (the
    ``store``, :func:`launched_store`; split-K's finish over the shape's splits)."""
    tiles = -(-m // c.bm) * -(-n // c.bn)
    k_tiles = max(1, -(-k // BK))
    splits = split_count(tiles, k_tiles, sms) if c.split_k else 1
    per_tile = model_cycles(c, -(-k_tiles // splits), store, splits)
    if per_tile is None:
        return None
    waves = -(-tiles * splits // max(1, sms))
    return waves * per_tile


#: The variant the call launches untuned (matmul_call.CALL_TILE, CALL_STAGES).
DEFAULT = Candidate()


def rank(m: int, n: int, k: int, variant: GemmVariant, sms: int) -> list[tuple[float, Candidate]]:
    """Every valid candidate that compiles, fastest modelled first.  The model often ties
    variants it cannot tell apart (stages past the latency, consumer split): ties go to the
    one closest to :data:`DEFAULT` (fewest fields differing), then candidate order, so the
    untuned variant is timed whenever the model puts it among the best, and the order is
    deterministic."""
    scored = []
    for c in candidates(m, n, k, variant, sms):
        s = score(c, m, n, k, sms, launched_store(c, variant))
        if s is not None:
            scored.append((s, _distance(c), c))
    return [(s, c) for s, _, c in sorted(scored)]


def _distance(c: Candidate) -> int:
    return sum(a != b for a, b in zip(attrs.astuple(c), attrs.astuple(DEFAULT)))


def bucket(m: int, n: int, k: int) -> tuple[int, int, int]:
    """The shape bucket a tuning is kept for: each dimension rounded up to a power of two
    (4000 and 4096 share one, 4097 starts the next), as Triton's autotuner keys by."""
    return (_pow2(m), _pow2(n), _pow2(k))


def _pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


@functools.lru_cache(maxsize=4)
def source_hash(root: Path | None = None) -> str:
    """sha256 over what generates the kernel: the plugin modules of :data:`SOURCES`, the kit's
    (``kit/*.py``: the frame, the tile loop, the wgmma wrappers) and the device headers the
    kernel includes (``cuda/*.cuh``), under ``root`` (this package by default): a changed
    emitter, schedule, kit module or header invalidates every tuning (a header edit used to
    keep tunings measured on the old device code)."""
    h = hashlib.sha256()
    here = root if root is not None else Path(__file__).parent
    kit = sorted(p.relative_to(here).as_posix() for p in (here / "kit").glob("*.py"))
    headers = sorted(p.relative_to(here).as_posix() for p in (here / "cuda").glob("*.cuh"))
    for name in (*SOURCES, *kit, *headers):
        h.update(name.encode())
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


@attrs.frozen(kw_only=True)
class TuneKey:
    """What one tuning is valid for."""

    device: str
    dtype: str
    layout: str  #: ``<a_major><b_major>``, e.g. ``k,mn``
    bucket: tuple[int, int, int]
    toolkit: str
    source: str

    def text(self) -> str:
        return "|".join((self.device, self.dtype, self.layout,
                         "x".join(str(d) for d in self.bucket), self.toolkit, self.source))


def tune_key(device: str, variant: GemmVariant, m: int, n: int, k: int, toolkit: str) -> TuneKey:
    return TuneKey(device=device, dtype=variant.dtype,
                   layout=f"{variant.a_major},{variant.b_major}", bucket=bucket(m, n, k),
                   toolkit=toolkit, source=source_hash())


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def _say(err: TextIO | None, text: str) -> None:
    print(f"pipeline-core matmul: {text}", file=err or sys.stderr, flush=True)


def load(path: Path, err: TextIO | None = None) -> dict[str, Candidate]:
    """The tunings in ``path``; a missing file is empty, an unreadable or malformed one is one
    warning line and empty (the next tuning rewrites it).  Malformed includes bytes that are
    not UTF-8, nesting deeper than the parser recurses, and any winner :func:`_winner`
    refuses: the file is trusted whole or not at all, as the call launches what it names."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        _say(err, f"warning: tuning cache {path} unreadable ({exc.strerror}); ignoring it")
        return {}
    except UnicodeDecodeError as exc:  # (a ValueError, caught here before any parsing)
        return _malformed(path, err, exc)
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
        return {key: _winner(entry["winner"]) for key, entry in data["tunings"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        return _malformed(path, err, exc)


def _malformed(path: Path, err: TextIO | None, exc: Exception) -> dict[str, Candidate]:
    _say(err, f"warning: tuning cache {path} is malformed ({type(exc).__name__}: "
              f"{str(exc)[:80]}); ignoring it (the next tuning rewrites it; or delete it)")
    return {}


#: Each field of a stored winner and the values the search gives it (:func:`candidates`).
SEARCHED = {"bm": TILE_M, "bn": TILE_N, "stages": STAGES, "consumers": CONSUMERS,
            "group_m": GROUP_M, "split_k": (False, True)}


def _winner(fields: object) -> Candidate:
    """A stored winner as a :class:`Candidate`, only if it is one the search could have
    stored: every field present, of its type (an ``int``, not ``128.0`` or ``true``; a
    ``bool`` for ``split_k``) and in the searched space.  So a NaN, infinite, negative or
    fractional tile, which JSON and ``Candidate`` would take, never reaches a launch;
    ValueError names the field otherwise."""
    if not isinstance(fields, dict) or set(fields) != set(SEARCHED):
        raise ValueError(f"winner {str(fields)[:60]} does not have the fields "
                         f"{', '.join(SEARCHED)}")
    for name, values in SEARCHED.items():
        value = fields[name]
        kind = bool if name == "split_k" else int
        if type(value) is not kind or value not in values:
            raise ValueError(f"winner {name} {value!r} is not one of "
                             f"{', '.join(str(v).lower() for v in values)}")
    return Candidate(**fields)


def store(path: Path, key: TuneKey, winner: Candidate) -> None:
    """Add ``key``'s winner to ``path``: written to a temporary file and renamed, so a reader
    never sees half a file (a concurrent tuning's entry may be lost: it is tuned again).  A
    malformed file was already reported by the tuning's :func:`load`: it is replaced quietly."""
    tunings = load(path, io.StringIO())
    tunings[key.text()] = winner
    data = {"format": FORMAT,
            "tunings": {k: {"winner": attrs.asdict(c)} for k, c in sorted(tunings.items())}}
    ensure_folder(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def enabled(argument: bool | None, environ: dict[str, str] | None = None) -> bool:
    """Whether a call tunes: its ``autotune=`` argument, else ``$PIPELINE_CORE_AUTOTUNE``
    (``1`` or ``0``; unset: off)."""
    if argument is not None:
        return argument
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise AutotuneError(f"{ENV}={value!r}: set it to 1 (tune) or 0 (the fixed variant), or "
                        f"unset it")


def cached(m: int, n: int, k: int, variant: GemmVariant, *, device: str, toolkit: str,
           path: Path | None = None, err: TextIO | None = None) -> Candidate | None:
    """The tuning cache's winner for this shape's bucket, or None (nothing is timed)."""
    key = tune_key(device, variant, m, n, k, toolkit)
    return load(cache_path() if path is None else path, err).get(key.text())


def tune(m: int, n: int, k: int, variant: GemmVariant, *, device: str, sms: int, toolkit: str,
         timer: Callable[[Candidate], float], top_k: int = TOP_K, path: Path | None = None,
         err: TextIO | None = None) -> Candidate:
    """The candidate the call launches for this shape: the cached winner of its bucket, else
    the model's best ``top_k`` timed by ``timer`` (seconds, lower wins; ties go to the model's
    order), the fastest stored.  A cold tuning says so in one stderr line first."""
    path = cache_path() if path is None else path
    found = cached(m, n, k, variant, device=device, toolkit=toolkit, path=path, err=err)
    if found is not None:
        return found
    key = tune_key(device, variant, m, n, k, toolkit)
    ranked = rank(m, n, k, variant, sms)
    if not ranked:
        raise AutotuneError(f"no variant of {SCHEDULE_NAME} compiles for {variant.dtype} "
                            f"{m}x{n}x{k}")
    best = [c for _, c in ranked[:max(1, top_k)]]
    bm, bn, bk = key.bucket
    _say(err, f"tuning {variant.dtype} {variant.a_major.upper()}{variant.b_major.upper()} "
              f"{m}x{n}x{k} (bucket {bm}x{bn}x{bk}) on {device}: timing the model's best "
              f"{len(best)} of {len(ranked)} variants once; the winner goes to {path}")
    timed = [(timer(c), i, c) for i, c in enumerate(best)]
    winner = min(timed)[2]
    store(path, key, winner)
    return winner


def describe_ranking(ranked: Iterable[tuple[float, Candidate]]) -> list[str]:
    """One line per ranked candidate (the benchmark's and the docs' listing)."""
    return [f"{cycles:12.0f}  {c.describe()}" for cycles, c in ranked]
