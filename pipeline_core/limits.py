"""The bounds of every count a user can type: command-line flags and the core's knobs.

Each bound is checked before any work starts, so an absurd value (``--iterations
1000000000``, ``-c wait_vm_last=2**70``) is refused at once with a message naming
the flag or key and the allowed range, instead of hanging, eating memory, or failing
later with a message about an internal field.  The ranges are wide enough for every
real kernel and small enough that the work they ask for stays within seconds.

Plugins declare the bounds of their own parameters on their ``Param`` records
(``Param(..., bound=Bound(low=1, high=256))``); an int parameter that declares none
gets :data:`PARAM_INT`.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

import attrs


def parse_int(text: str) -> int:
    """A decimal, 0x hex, 0o octal or 0b binary integer typed by a user: the one parser of
    every integer on the command line (``-p``, ``-T``, ``-c``, ``-O`` and the count flags).

    ASCII only: Python's ``int()`` also reads other scripts' digits (``'\u0661\u0662'``,
    fullwidth ``'\uff10\uff18'``, superscript ``'\u00b2\u00b3'`` via ``isdigit``), which a
    user did not mean as a count and a kernel source cannot spell.
    """
    stripped = text.strip()
    if not stripped.isascii():
        raise ValueError(f"{stripped!r} is not an integer (use the ASCII digits 0-9)")
    try:
        return int(stripped, 0)
    except ValueError:
        raise ValueError(f"{stripped!r} is not an integer") from None


def parse_number(text: str) -> float:
    """A decimal number typed by a user (``--optimal SECONDS``): ASCII only, as :func:`parse_int`."""
    stripped = text.strip()
    if not stripped.isascii():
        raise ValueError(f"{stripped!r} is not a number (use the ASCII digits 0-9)")
    try:
        return float(stripped)
    except ValueError:
        raise ValueError(f"{stripped!r} is not a number") from None


@attrs.frozen(kw_only=True)
class Bound:
    """An inclusive range ``[low, high]`` of integers (or of numbers, with ``integer=False``)."""

    low: float
    high: float
    integer: bool = True

    def allowed(self) -> str:
        """The range as a user reads it: ``an integer in [1, 256]``."""
        if self.integer:
            return f"an integer in [{int(self.low)}, {int(self.high)}]"
        return f"a number in [{self.low:g}, {self.high:g}]"

    def contains(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not isinstance(value, (int, float)):
            return False
        return self.low <= value <= self.high

    def argparse_type(self) -> Callable[[str], Any]:
        """An argparse ``type=`` that parses the flag's text and refuses values out of range."""
        def parse(text: str):
            try:
                value: Any = parse_int(text) if self.integer else parse_number(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"expected {self.allowed()}: {exc}") from None
            if not self.contains(value):
                raise argparse.ArgumentTypeError(f"expected {self.allowed()}, got {text}")
            return value

        parse.__name__ = "integer" if self.integer else "number"  # argparse names it in errors
        return parse


# --- command-line flags ---------------------------------------------------------
#: ``--iterations`` of check, export and analyze when not given: kernel iterations run
#: between prologue and epilogue.  One default for all three (they model the same loop);
#: 12 lets a schedule whose steady state takes a few iterations to settle (4wave) average
#: out its warm-up.  A kernel too large for 12 within :data:`MODELLED_ENTRIES` gets as
#: many as fit (:func:`default_iterations`).
DEFAULT_ITERATIONS = 12
#: ``check --iterations``: kernel iterations the hazard checker executes.
CHECK_ITERATIONS = Bound(low=1, high=256)
#: ``check --warps-per-group``: a CTA holds at most 32 warps (1024 threads; an AMD workgroup 16
#: wavefronts of 64): multistage-gemm runs up to warps_m x warps_n = 32.
WARPS_PER_GROUP = Bound(low=1, high=32)
#: ``export --iterations``: kernel iterations the timeline model runs.
EXPORT_ITERATIONS = Bound(low=1, high=128)
#: ``export --width``: picture width in pixels.
PICTURE_WIDTH = Bound(low=200, high=8000)
#: ``analyze --iterations``: steady-state timing iterations (a steady state needs 3).
ANALYZE_ITERATIONS = Bound(low=3, high=256)
#: ``analyze --optimal SECONDS``: time budget of the exact scheduler.
OPTIMAL_SECONDS = Bound(low=0.001, high=600, integer=False)

# --- -p / -T parameters ------------------------------------------------------------
#: Any int ``-p`` / ``-T`` parameter whose plugin declares no bound of its own.
PARAM_INT = Bound(low=0, high=65536)
#: Counter ticks one load adds (``-p``/``-c`` lgkm_per_load_*, ``-T`` vm_per_load_*).
COUNTER_TICKS = Bound(low=0, high=1024)
#: vmcnt ticks of one global load: at least 1, or every vm wait derives to 0 and
#: protects nothing.
GLOBAL_LOAD_TICKS = Bound(low=1, high=1024)

# --- -c ScheduleConfig knobs ----------------------------------------------------------
#: Manual wait values; the top value means "emit no wait" (``config.NO_WAIT``).
WAIT_VALUE = Bound(low=0, high=255)
#: Per-block bit masks (one bit per MMA block).
BLOCK_MASK = Bound(low=0, high=2**64 - 1)
#: Cycles in the cost model (``lds_contention_penalty``).
CYCLES = Bound(low=0, high=100_000)
#: VGPR budget of the search strategies; the top value means "unlimited".
VGPR_BUDGET = Bound(low=0, high=999_999)
#: Time budget of the search strategies in milliseconds (0 = no limit): at most an hour.
SEARCH_TIME_MS = Bound(low=0, high=3_600_000)
#: Node budget of the search strategies (0 = no limit): a budget counted in search steps
#: stops CSP and EXACT at the same point on every machine, so the result is repeatable;
#: a billion steps is hours of search.
SEARCH_NODES = Bound(low=0, high=1_000_000_000)
#: nesting of a JSON document read by ``check --input``: a schedule document nests 5 deep
#: (document, phase list, entry, op, field); deeper input is refused before parsing, so a
#: hostile file cannot exhaust the parser's recursion
JSON_DEPTH = Bound(low=1, high=64)

# --- modelled work ------------------------------------------------------------------
#: Entries one modelled run may execute (kernel entries x --iterations) in ``check``,
#: ``export`` and ``analyze``: about a second of modelling.  Large kernels get fewer
#: iterations; the message says how many fit.  ``check`` adds the prologue and epilogue
#: and counts every modelled warp (``fixed_entries``): a document it reads may carry a
#: prologue of any length, which is refused before any modelling.
MODELLED_ENTRIES = 50_000


def iterations_help(bound: Bound, what: str = "kernel iterations to run between prologue and epilogue") -> str:
    """The help text of an ``--iterations`` flag (the same words on every command)."""
    return (f"{what} (default {DEFAULT_ITERATIONS}, or as many as fit the modelling budget; "
            f"{bound.allowed()})")


def default_iterations(kernel_entries: int, bound: Bound, fixed_entries: int = 0) -> int:
    """:data:`DEFAULT_ITERATIONS`, or fewer when a ``kernel_entries``-entry kernel needs it.

    ``fixed_entries`` (prologue and epilogue) are modelled once and leave that much less
    of the budget to the kernel.  Never below the flag's lower bound
    (:func:`iterations_over_budget` then says why even that is too many).
    """
    fit = max(MODELLED_ENTRIES - fixed_entries, 0) // max(kernel_entries, 1)
    return int(max(bound.low, min(DEFAULT_ITERATIONS, fit, bound.high)))


def iterations_over_budget(iterations: int, kernel_entries: int, bound: Bound,
                           flag: str = "--iterations", fixed_entries: int = 0) -> str:
    """Why ``iterations`` of a ``kernel_entries``-entry kernel are too many ('' when they fit).

    ``bound`` is the flag's own range (its lower end is the fewest iterations the
    command can work with); ``fixed_entries`` (prologue and epilogue) are modelled once.
    """
    per = max(kernel_entries, 1)
    total = iterations * per + fixed_entries
    if total <= MODELLED_ENTRIES:
        return ""
    fit = max(MODELLED_ENTRIES - fixed_entries, 0) // per
    budget = f"more than the {MODELLED_ENTRIES:,} entries a run may model"
    fixed = f" and the prologue and epilogue {fixed_entries:,}" if fixed_entries else ""
    if fit < bound.low and fixed_entries:  # no --iterations helps: the document is too large
        return (f"the prologue and epilogue have {fixed_entries:,} entries and the kernel "
                f"{kernel_entries:,}, so even {flag} {int(bound.low)} would model {budget}")
    if fit < bound.low:
        return (f"{flag} {iterations}: the kernel has {kernel_entries:,} entries, so even "
                f"{int(bound.low)} iterations would model {budget}")
    return (f"{flag} {iterations} would model {total:,} entries ({kernel_entries:,} per "
            f"iteration{fixed}), {budget}: use {flag} {fit} or fewer")
