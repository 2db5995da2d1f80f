"""A Gantt-style timeline picture (``export --format png|svg``), drawn with matplotlib.

Why: a picture in a README or a review shows at a glance how the warp groups take turns on
the MMA unit and where they stall; Perfetto is for digging in. matplotlib is an optional
extra (``pip install 'gpu-pipeline-core[plot]'``, :data:`pipeline_core.PLOT_INSTALL`) and is
imported only when a picture is drawn.

Lanes, top to bottom: one per warp group (stalls hatched by reason, the group's MMAs solid,
issued loads as ticks), the MMA unit (coloured by group), LDS and global memory (in-flight
ops, stacked in sub-lanes, coloured by group). Barrier releases are thin vertical lines over
the group lanes; kernel iteration starts (of group 0) are dotted lines over every lane.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline_core import PLOT_INSTALL
from pipeline_core.ops import OpRole, Phase, ResourceKind
from pipeline_core.simulate import Timeline

INSTALL_HINT = f"{PLOT_INSTALL}  (or: pip install matplotlib)"
DPI = 100
ROW_PX = 54  #: height of one lane
TOP_PX = 70  #: title
BOTTOM_PX = 120  #: x axis and legend
GROUP_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
#: issue ticks in the group lanes (MMAs are drawn as their execution, in the group's colour)
ROLE_COLORS = {OpRole.GLOBAL_LOAD: "#6a3d9a", OpRole.FRAGMENT_LOAD: "#33a02c",
               OpRole.SHARED_STORE: "#b15928"}
BARRIER_STALL = ("#d0d0d0", "//")
#: (face colour, hatch) of waits on the target's sync channels, in declaration order
CHANNEL_STALLS = (("#f4a6a6", "xx"), ("#a6cee3", "\\\\"), ("#b2df8a", "++"), ("#cab2d6", "oo"))
UNIT_STALL = ("#fdd49e", "..")
UNIT_LANES = ((ResourceKind.MMA_UNIT, "MMA unit"), (ResourceKind.LDS, "LDS in flight"),
              (ResourceKind.GLOBAL_MEM, "global in flight"))


class MissingMatplotlib(ImportError):
    """matplotlib is needed for pictures; the message says how to install it."""

    def __init__(self) -> None:
        super().__init__(f"PNG/SVG timelines need matplotlib, which is not installed: {INSTALL_HINT}")


def require_matplotlib():
    """(Figure, Patch) from matplotlib, or MissingMatplotlib naming the install command."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as exc:
        raise MissingMatplotlib() from exc
    return Figure, Patch


def _lanes(tl: Timeline) -> list[tuple[str, Any]]:
    lanes: list[tuple[str, Any]] = [(g.title, g.group) for g in tl.groups]
    lanes += [(title, resource) for resource, title in UNIT_LANES
              if resource == ResourceKind.MMA_UNIT or tl.lanes(resource)]
    if tl.lanes(ResourceKind.VALU):
        lanes.append(("VALU", ResourceKind.VALU))
    return lanes


def figure_size(tl: Timeline, width: int = 1600) -> tuple[int, int]:
    """Pixel size of the picture: the requested width, a height from the number of lanes."""
    return width, TOP_PX + ROW_PX * len(_lanes(tl)) + BOTTOM_PX


def draw(tl: Timeline, width: int = 1600):
    """The matplotlib Figure (no pyplot, so no global state or display backend is touched)."""
    Figure, Patch = require_matplotlib()
    w, h = figure_size(tl, width)
    fig = Figure(figsize=(w / DPI, h / DPI), dpi=DPI)
    lanes = _lanes(tl)
    n = len(lanes)
    ax = fig.add_axes((130 / w, BOTTOM_PX / h, 1 - 150 / w, (h - TOP_PX - BOTTOM_PX) / h))
    end = max(tl.makespan, 1)
    ax.set_xlim(0, end)
    ax.set_ylim(n, 0)
    ax.set_yticks([i + 0.5 for i in range(n)], [label for label, _ in lanes], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("cycles", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    for i in range(1, n):
        ax.axhline(i, color="#888888", linewidth=0.5)
    min_w = end / (w - 150) * 1.2  # ~1 px: keeps 1-cycle issue ticks visible
    for row, (_, key) in enumerate(lanes):
        if isinstance(key, int) and not isinstance(key, ResourceKind):
            _draw_group(ax, tl, key, row, min_w)
        else:
            _draw_unit(ax, tl, key, row, min_w, w)
    _draw_marks(ax, tl, n)
    s = tl.summary()
    _draw_steady_window(ax, tl, s)
    fig.suptitle(f"{tl.name}: {len(tl.groups)} warp group(s), {tl.iterations} kernel iterations; "
                 f"steady state {s.steady_state_cycles:.0f} cycles/iteration (MMA bound "
                 f"{s.mma_bound_cycles}), MMA unit busy {100 * s.mma_utilisation:.0f}%",
                 fontsize=10, y=1 - 18 / h)
    handles = [Patch(facecolor=GROUP_COLORS[g.group % 4], label=f"{g.title}: MMA / in flight")
               for g in tl.groups]
    reasons = {s.stall.reason for g in tl.groups for s in g.steps if s.stall is not None}
    styles = stall_styles(tl)
    handles += [Patch(facecolor=c, hatch=hatch, edgecolor="#555555", label=f"stall: {reason}")
                for reason, (c, hatch) in styles.items() if reason in reasons]
    if reasons - set(styles):
        handles.append(Patch(facecolor=UNIT_STALL[0], hatch=UNIT_STALL[1], edgecolor="#555555",
                             label="stall: unit busy"))
    roles = {s.op.role for g in tl.groups for s in g.steps}
    handles += [Patch(facecolor=c, label=f"{role.name.lower().replace('_', ' ')} issued")
                for role, c in ROLE_COLORS.items() if role in roles]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 4 / h))
    return fig


def steady_window_cycles(tl: Timeline, s: Any) -> tuple[int, int] | None:
    """Cycles [start, end) of group 0's steady-state iterations (None: no window)."""
    lo, hi = s.window
    starts = tl.groups[0].iteration_starts if tl.groups else ()
    if hi <= lo or hi >= len(starts):
        return None
    return starts[lo], starts[hi]


def _draw_steady_window(ax, tl: Timeline, s: Any) -> None:
    """A shaded band over every lane where the steady state was measured, labelled."""
    span = steady_window_cycles(tl, s)
    if span is None:
        return
    ax.axvspan(span[0], span[1], color="#ffe680", alpha=0.18, zorder=0, linewidth=0)
    ax.text((span[0] + span[1]) / 2, len(_lanes(tl)) - 0.04,
            f"steady state: iterations {s.window[0]}..{s.window[1] - 1}",
            ha="center", va="bottom", fontsize=8, color="#7a6000")


def stall_styles(tl: Timeline) -> dict[str, tuple[str, str]]:
    """Stall reason -> (face colour, hatch): the barrier, then each of the target's channels."""
    styles = {"barrier": BARRIER_STALL}
    for i, (_, label) in enumerate(tl.channels):
        styles[label] = CHANNEL_STALLS[i % len(CHANNEL_STALLS)]
    return styles


def _draw_group(ax, tl: Timeline, group: int, row: int, min_w: float) -> None:
    g = tl.groups[group]
    stalls: dict[str, list[tuple[int, int]]] = {}
    ticks: dict[OpRole, list[tuple[float, float]]] = {}
    styles = stall_styles(tl)
    for s in g.steps:
        if s.stall is not None:
            key = s.stall.reason if s.stall.reason in styles else "unit"
            stalls.setdefault(key, []).append((s.ready, s.start - s.ready))
        if s.op.role in ROLE_COLORS and not s.is_marker:
            ticks.setdefault(s.op.role, []).append((s.start, max(s.issue_end - s.start, min_w)))
    for key, spans in stalls.items():
        color, hatch = styles.get(key, UNIT_STALL)
        ax.broken_barh(spans, (row + 0.08, 0.5), facecolors=color, edgecolor="#666666",
                       hatch=hatch, linewidth=0.3)
    mmas = [(b.start, b.end - b.start) for b in tl.busy
            if b.group == group and b.resource == ResourceKind.MMA_UNIT]
    ax.broken_barh(mmas, (row + 0.62, 0.3), facecolors=GROUP_COLORS[group % 4],
                   edgecolor="white", linewidth=0.4)
    for role, role_spans in ticks.items():
        ax.broken_barh(role_spans, (row + 0.62, 0.3), facecolors=ROLE_COLORS[role])


def _draw_unit(ax, tl: Timeline, resource: ResourceKind, row: int, min_w: float, width_px: int) -> None:
    busy = tl.busy_on(resource)
    lanes = max(tl.lanes(resource), 1)
    height = 0.84 / lanes
    for grp in sorted({b.group for b in busy}):
        for lane in range(lanes):
            mine = [(b.start, max(b.end - b.start, min_w)) for b in busy
                    if b.group == grp and b.lane == lane]
            if mine:
                ax.broken_barh(mine, (row + 0.08 + lane * height, height * 0.9),
                               facecolors=GROUP_COLORS[grp % 4], edgecolor="white",
                               linewidth=0.4,
                               alpha=1.0 if resource == ResourceKind.MMA_UNIT else 0.75)
    if resource == ResourceKind.MMA_UNIT:
        px_per_cycle = (width_px - 150) / max(tl.makespan, 1)
        for b in busy:
            if (b.end - b.start) * px_per_cycle >= 22:
                o = tl.step(b.group, b.seq).op
                ax.text((b.start + b.end) / 2, row + 0.5, f"{o.stage}{o.subtile}", ha="center",
                        va="center", fontsize=6, color="white")


def _draw_marks(ax, tl: Timeline, n: int) -> None:
    groups = len(tl.groups)
    for b in tl.barriers:
        ax.vlines(b.release, 0, groups, color="#444444", linewidth=0.4, alpha=0.6)
    g0 = tl.groups[0]
    for span in g0.spans:
        if span.phase == Phase.KERNEL or span.phase == Phase.EPILOGUE:
            ax.vlines(span.start, 0, n, color="black", linewidth=0.8, linestyles="dotted")
            label = f"it {span.iteration}" if span.phase == Phase.KERNEL else "epilogue"
            ax.text(span.start, -0.05, label, fontsize=7, ha="left", va="bottom")


def write(tl: Timeline, path: str | Path, *, fmt: str | None = None, width: int = 1600) -> Path:
    """Draw and save; ``fmt`` "png" or "svg" (default: from the file suffix)."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".") or "png").lower()
    if fmt not in ("png", "svg"):
        raise ValueError(f"picture format must be png or svg, not {fmt!r}")
    fig = draw(tl, width)
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "pipeline-core", "hatch.linewidth": 0.5}):
        metadata = {"Date": None} if fmt == "svg" else {}
        fig.savefig(path, format=fmt, dpi=DPI, metadata=metadata)
    return path
