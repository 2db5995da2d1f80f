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
                value: Any = int(text.strip(), 0) if self.integer else float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected {self.allowed()}, got {text!r}") from None
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
#: Kernel entries one modelled run may execute (kernel entries x --iterations) in
#: ``check``, ``export`` and ``analyze``: about a second of modelling.  Large kernels
#: get fewer iterations; the message says how many fit.
MODELLED_ENTRIES = 50_000


def iterations_help(bound: Bound, what: str = "kernel iterations to run between prologue and epilogue") -> str:
    """The help text of an ``--iterations`` flag (the same words on every command)."""
    return (f"{what} (default {DEFAULT_ITERATIONS}, or as many as fit the modelling budget; "
            f"{bound.allowed()})")


def default_iterations(kernel_entries: int, bound: Bound) -> int:
    """:data:`DEFAULT_ITERATIONS`, or fewer when a ``kernel_entries``-entry kernel needs it.

    Never below the flag's lower bound (:func:`iterations_over_budget` then says why even
    that is too many).
    """
    fit = MODELLED_ENTRIES // max(kernel_entries, 1)
    return int(max(bound.low, min(DEFAULT_ITERATIONS, fit, bound.high)))


def iterations_over_budget(iterations: int, kernel_entries: int, bound: Bound,
                           flag: str = "--iterations") -> str:
    """Why ``iterations`` of a ``kernel_entries``-entry kernel are too many ('' when they fit).

    ``bound`` is the flag's own range (its lower end is the fewest iterations the
    command can work with).
    """
    per = max(kernel_entries, 1)
    total = iterations * per
    if total <= MODELLED_ENTRIES:
        return ""
    fit = MODELLED_ENTRIES // per
    budget = f"more than the {MODELLED_ENTRIES:,} kernel entries a run may model"
    if fit < bound.low:
        return (f"{flag} {iterations}: the kernel has {kernel_entries:,} entries, so even "
                f"{int(bound.low)} iterations would model {budget}")
    return (f"{flag} {iterations} would model {total:,} kernel entries ({kernel_entries:,} per "
            f"iteration), {budget}: use {flag} {fit} or fewer")
