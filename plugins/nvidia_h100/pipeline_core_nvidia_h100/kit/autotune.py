"""Family-neutral autotuning (issue 34): the family lists candidates, the agents timing model
ranks them, the best few are timed on the device, the winner is cached.

Why in the kit: no one tile and ring depth suits every shape of any family (issue 26), and
ranking, hashing and caching are the same work for each.  A family gives an
:class:`Autotuner` its candidates for a problem (frozen ``attrs`` records), each candidate's
:class:`Workload` on a problem (its compiled, so proven, schedule as a :class:`TimingModel`,
the K tiles each output tile visits and the CTAs they are dealt to), its problem's key fields
(the shape bucket) and its source files.  The kit ranks the candidates on the agents timing
model (``plugin_api.simulate_agents``; docs/guide/agents.md, "Timing model") without running
anything, times only the model's best few (:data:`TOP_K`) with a timer the caller gives (CUDA
events in production, a fake in tests), and keeps the winner in the family's own JSON file
under the kernel cache's folder (``PIPELINE_CORE_CACHE_DIR``), keyed by family, device,
toolkit, problem bucket and a hash of the family's sources, the kit (``kit/*.py``) and the
device headers (``cuda/*.cuh``): a change to any of them tunes again.  No GPU package is
imported here.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TextIO, TypeVar

import attrs

from pipeline_core_nvidia_h100.kernel_cache import cache_dir, ensure_folder

if TYPE_CHECKING:
    from attrs import AttrsInstance

    from pipeline_core.plugin_api import AgentMachine, CompiledSchedule

#: Candidates timed on a cold tuning: the model's best few (its ranking is good, not exact:
#: Spearman 0.91 on the GEMM's calibration run, pipeline_core_nvidia_h100/machine.py).
TOP_K = 3
#: The environment switch for calls that do not pass ``autotune=`` (every family's).
ENV = "PIPELINE_CORE_AUTOTUNE"
#: A tuning file's format; a file of another version is one warning line and ignored (and
#: rewritten).  2: one file per family, naming it (1 was the GEMM's ``autotune.json``).
FORMAT = 2
#: K tiles the model runs exactly; longer K loops are extrapolated from the steady state
#: between :data:`STEADY` and this (the ring's period repeats: :meth:`TimingModel.cycles`).
EXACT_TRIPS = 32
STEADY = 16
#: What the kit hashes beside a family's sources: itself and the device headers.
KIT = Path(__file__).parent
HEADERS = KIT.parent / "cuda"

C = TypeVar("C", bound="AttrsInstance")  # a family's candidate: a frozen attrs record
P = TypeVar("P")  # a family's problem: what sizes one call


class AutotuneError(ValueError):
    """A bad autotune setting (the ``PIPELINE_CORE_AUTOTUNE`` value), or nothing to tune."""


@attrs.frozen(kw_only=True, eq=False)
class TimingModel:
    """A candidate's compiled plan on its target's agents machine, its cycles memoised (a
    family keeps one per candidate, so ranking a second problem runs nothing new)."""

    compiled: CompiledSchedule
    machine: AgentMachine
    _memo: dict[tuple[int, int], float] = attrs.field(factory=dict, init=False, repr=False)

    def cycles(self, trips: int, splits: int = 1) -> float:
        """One output tile of ``trips`` K tiles, in cycles, with its epilogue (with a split,
        the finish of its last CTA, which reads ``splits`` slices); beyond
        :data:`EXACT_TRIPS` the steady state's slope carries it on (the ring repeats each
        period, so the cycles grow linearly)."""
        key = (trips, splits)
        found = self._memo.get(key)
        if found is None:
            if trips <= EXACT_TRIPS:
                found = self._run(trips, splits)
            else:
                lo, hi = self._run(STEADY, splits), self._run(EXACT_TRIPS, splits)
                found = hi + (trips - EXACT_TRIPS) * (hi - lo) / (EXACT_TRIPS - STEADY)
            self._memo[key] = found
        return found

    def _run(self, trips: int, splits: int) -> float:
        from pipeline_core.plugin_api import simulate_agents

        plan = self.compiled.plan
        return simulate_agents(plan, self.compiled.body, self.machine,
                               max(trips, plan.min_tiles), splits=splits).cycles


def timing_model(compiled: CompiledSchedule) -> TimingModel | None:
    """``compiled`` on its target's agents machine; None when the target has none (such a
    candidate is never ranked)."""
    machine = getattr(compiled.target_profile, "agent_machine", None)
    return None if machine is None else TimingModel(compiled=compiled, machine=machine)


@attrs.frozen(kw_only=True)
class Workload:
    """One candidate on one problem: the K tiles each output tile visits (a CTA's slice of it
    when K is split ``splits`` ways), dealt round robin to ``ctas`` persistent CTAs (tile ``i``
    to CTA ``i % ctas``, as the kit's linear tile loop deals them)."""

    model: TimingModel
    trips: Sequence[int]
    ctas: int
    splits: int = 1

    def cycles(self) -> float:
        """The modelled cycles of the call: its busiest CTA's output tiles, each modelled alone
        (an output tile with no K tile is charged nothing)."""
        ctas = max(1, self.ctas)
        if len(set(self.trips)) <= 1:  # uniform: the first CTA has the most tiles
            return sum(-(-n // ctas) * self.model.cycles(t, self.splits)
                       for t, n in Counter(self.trips).items() if t)
        return max(sum(n * self.model.cycles(t, self.splits)
                       for t, n in sorted(Counter(self.trips[i::ctas]).items()) if t)
                   for i in range(min(ctas, len(self.trips))))


@attrs.frozen(kw_only=True)
class TuneKey:
    """What one tuning is valid for: the family, the device, the problem's key fields (its
    bucket: element type, layout, rounded shape ...), the toolkit and the source hash."""

    family: str
    device: str
    problem: tuple[str, ...]
    toolkit: str
    source: str

    def text(self) -> str:
        return "|".join((self.family, self.device, *self.problem, self.toolkit, self.source))


@attrs.frozen(kw_only=True)
class Autotuner(Generic[C, P]):
    """A family's tuner.  The family gives its ``name`` (its cache file and keys), the name of
    the call whose lines these are (``call``), its ``sources`` (files, or package folders whose
    ``*.py`` and ``*.cuh`` count), the candidate record (``make``) and each field's searched
    values (``searched``: what a stored winner may hold), its ``candidates`` for a problem,
    each candidate's ``workload`` on a problem (None: it does not compile), the problem's
    ``problem_key`` fields and its ``describe`` text for the cold tuning's line, and the
    ``default`` candidate ties go to.  ``kit`` and ``headers`` are where the kit's modules and
    the device headers are read for the hash (a test points them at a copy)."""

    name: str
    call: str
    sources: tuple[Path, ...]
    make: Callable[..., C]
    searched: Mapping[str, tuple[Any, ...]]
    candidates: Callable[[P], Sequence[C]]
    workload: Callable[[C, P], Workload | None]
    problem_key: Callable[[P], tuple[str, ...]]
    describe: Callable[[P], str]
    default: C | None = None
    kit: Path = KIT
    headers: Path = HEADERS

    def score(self, c: C, problem: P) -> float | None:
        """The modelled cycles of ``c`` on ``problem``; None: it does not compile."""
        work = self.workload(c, problem)
        return None if work is None else work.cycles()

    def rank(self, problem: P) -> list[tuple[float, C]]:
        """Every candidate that compiles, fastest modelled first.  The model often ties
        candidates it cannot tell apart (stages past the latency): ties go to the one closest
        to :attr:`default` (fewest fields differing), then candidate order, so the default is
        timed whenever the model puts it among the best, and the order is deterministic."""
        scored = []
        for i, c in enumerate(self.candidates(problem)):
            s = self.score(c, problem)
            if s is not None:
                scored.append((s, self._distance(c), i, c))
        return [(s, c) for s, _, _, c in sorted(scored, key=lambda t: t[:3])]

    def _distance(self, c: C) -> int:
        if self.default is None:
            return 0
        return sum(a != b for a, b in zip(attrs.astuple(c), attrs.astuple(self.default)))

    def source_hash(self) -> str:
        return source_hash(self.sources, self.kit, self.headers)

    def key(self, problem: P, device: str, toolkit: str) -> TuneKey:
        return TuneKey(family=self.name, device=device, problem=self.problem_key(problem),
                       toolkit=toolkit, source=self.source_hash())

    def cache_path(self) -> Path:
        """The family's tuning file in the kernel cache's folder."""
        return cache_dir() / f"autotune-{self.name}.json"

    def say(self, err: TextIO | None, text: str) -> None:
        print(f"pipeline-core {self.call}: {text}", file=err or sys.stderr, flush=True)

    def load(self, path: Path, err: TextIO | None = None) -> dict[str, C]:
        """The tunings in ``path``; a missing file is empty, an unreadable or malformed one is
        one warning line and empty (the next tuning rewrites it).  Malformed includes bytes
        that are not UTF-8, nesting deeper than the parser recurses, another format or family,
        and any winner :meth:`winner` refuses: the file is trusted whole or not at all, as the
        call launches what it names."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self.say(err, f"warning: tuning cache {path} unreadable ({exc.strerror}); "
                          "ignoring it")
            return {}
        except UnicodeDecodeError as exc:  # (a ValueError, caught here before any parsing)
            return self._malformed(path, err, exc)
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            if data.get("family") != self.name:
                raise ValueError(f"family {data.get('family')!r}, not {self.name!r}")
            return {key: self.winner(entry["winner"]) for key, entry in data["tunings"].items()}
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            return self._malformed(path, err, exc)

    def _malformed(self, path: Path, err: TextIO | None, exc: Exception) -> dict[str, C]:
        self.say(err, f"warning: tuning cache {path} is malformed ({type(exc).__name__}: "
                      f"{str(exc)[:80]}); ignoring it (the next tuning rewrites it; or delete "
                      "it)")
        return {}

    def winner(self, fields: object) -> C:
        """A stored winner as a candidate, only if it is one the search could have stored:
        every field present, of its searched values' type (an ``int``, not ``128.0`` or
        ``true``) and among them.  So a NaN, infinite, negative or fractional tile, which JSON
        and the record would take, never reaches a launch; ValueError names the field."""
        if not isinstance(fields, dict) or set(fields) != set(self.searched):
            raise ValueError(f"winner {str(fields)[:60]} does not have the fields "
                             f"{', '.join(self.searched)}")
        for name, values in self.searched.items():
            value = fields[name]
            if type(value) is not type(values[0]) or value not in values:
                raise ValueError(f"winner {name} {value!r} is not one of "
                                 f"{', '.join(str(v).lower() for v in values)}")
        return self.make(**fields)

    def store(self, path: Path, key: TuneKey, winner: C) -> None:
        """Add ``key``'s winner to ``path``: written to a temporary file and renamed, so a
        reader never sees half a file (a concurrent tuning's entry may be lost: it is tuned
        again).  A malformed file was already reported by the tuning's :meth:`load`: it is
        replaced quietly."""
        tunings = self.load(path, io.StringIO())
        tunings[key.text()] = winner
        data = {"format": FORMAT, "family": self.name,
                "tunings": {k: {"winner": attrs.asdict(c)} for k, c in sorted(tunings.items())}}
        ensure_folder(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)

    def cached(self, problem: P, *, device: str, toolkit: str, path: Path | None = None,
               err: TextIO | None = None) -> C | None:
        """The tuning file's winner for this problem's bucket, or None (nothing is timed)."""
        key = self.key(problem, device, toolkit)
        return self.load(self.cache_path() if path is None else path, err).get(key.text())

    def tune(self, problem: P, *, device: str, toolkit: str, timer: Callable[[C], float],
             top_k: int = TOP_K, path: Path | None = None, err: TextIO | None = None,
             also: Sequence[C] = ()) -> C:
        """The candidate the call launches for ``problem``: the cached winner of its bucket,
        else the model's best ``top_k`` timed by ``timer`` (seconds, lower wins; ties go to
        the model's order), the fastest stored.  ``also``: candidates timed beside them (the
        untuned call's own pick, which the model may not rank: a tuned call is then never
        slower than the untuned one but for the timing's noise).  A cold tuning says so in one
        line first."""
        path = self.cache_path() if path is None else path
        found = self.cached(problem, device=device, toolkit=toolkit, path=path, err=err)
        if found is not None:
            return found
        ranked = self.rank(problem)
        if not ranked:
            raise AutotuneError(f"no candidate of {self.name} compiles for "
                                f"{self.describe(problem)}")
        best = [c for _, c in ranked[:max(1, top_k)]]
        best += [c for c in also if c not in best]
        self.say(err, f"tuning {self.describe(problem)} on {device}: timing the model's best "
                      f"{len(best)} of {len(ranked)} variants once; the winner goes to {path}")
        timed = [(timer(c), i) for i, c in enumerate(best)]
        winner = best[min(timed)[1]]
        self.store(path, self.key(problem, device, toolkit), winner)
        return winner


def enabled(argument: bool | None, environ: Mapping[str, str] | None = None) -> bool:
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


@functools.lru_cache(maxsize=16)
def source_hash(sources: tuple[Path, ...], kit: Path = KIT, headers: Path = HEADERS) -> str:
    """sha256 over what generates a family's kernels: its ``sources`` (a file by its name; a
    folder's ``*.py`` and ``*.cuh`` by their names in it), the kit's modules (``kit/*.py``:
    the frame, the tile loop, the wgmma wrappers, this tuner) and the device headers
    (``cuda/*.cuh``), so a changed family, kit module or header invalidates the family's
    tunings (a header edit once kept tunings measured on the old device code).  Names are
    hashed with the text, relative to their folder, so a copy elsewhere hashes alike."""
    h = hashlib.sha256()
    for name, path in (*_files(sources), *_files((kit,), "kit/", ("*.py",)),
                       *_files((headers,), "cuda/", ("*.cuh",))):
        h.update(name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _files(sources: Sequence[Path], prefix: str = "",
           patterns: Sequence[str] = ("*.py", "*.cuh")) -> list[tuple[str, Path]]:
    found = []
    for source in sources:
        if source.is_dir():
            found += sorted((prefix + p.name, p) for pattern in patterns
                            for p in source.glob(pattern))
        else:
            found.append((prefix + source.name, source))
    return found
