"""A Gantt-style timeline picture (``export --format png|svg``), drawn with matplotlib.

Why: a picture in a README or a review shows at a glance how the warp groups take turns on
the MMA unit and where they stall; Perfetto is for digging in. matplotlib is an optional
extra (``pip install 'gpu-pipeline-core[plot]'``, :data:`pipeline_core.PLOT_INSTALL`) and is
imported only when a picture is drawn.

Lanes, top to bottom: one per warp group (stalls hatched by reason, the group's MMAs solid,
issued loads as ticks), the MMA unit (coloured by group), LDS and global memory (in-flight
ops, stacked in sub-lanes, a row per SUBLANES_PER_ROW of them, coloured by group). Barrier
releases are thin vertical lines over the group lanes; kernel iteration starts (of group 0)
are dotted lines over every lane.
A unit lane's bar carries its op's name where the text fits inside the bar; in the SVG every
bar also has a tooltip naming its op, group (or agent) and cycles, so the picture is readable
at the default 12 iterations, where most bars are a few pixels wide.
"""
from __future__ import annotations

import functools
import io
import re
from pathlib import Path
from typing import Any, Callable, Sequence
from xml.sax.saxutils import escape

import attrs

from pipeline_core import PLOT_INSTALL
from pipeline_core.ops import OpRole, Phase, ResourceKind, tag_name
from pipeline_core.simulate import Timeline
from pipeline_core.simulate.labels import timeline_label
from pipeline_core.simulate.timeline import Busy, Step

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
#: in-flight sub-lanes a unit lane stacks per row: 4 leave each bar ~10 px high, room for a
#: label; a unit with more ops in flight (8 global loads) takes more rows
SUBLANES_PER_ROW = 4
LABEL_POINTS = 6  #: font size of the op labels on the unit lanes' bars
LABEL_PAD_PX = 2  #: room a label leaves at each end of its bar
#: the SVG id of a bar; the bar's tooltip (``<title>``) goes inside the group with this id
BAR_ID = "op-bar-{}"


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


def lane_rows(tl: Timeline, key: Any) -> int:
    """Rows (of ROW_PX) a lane takes: a group's one, a unit's one per SUBLANES_PER_ROW sub-lanes."""
    if isinstance(key, ResourceKind):
        return max(1, -(-tl.lanes(key) // SUBLANES_PER_ROW))
    return 1


def figure_size(tl: Timeline, width: int = 1600) -> tuple[int, int]:
    """Pixel size of the picture: the requested width, a height from the lanes' rows."""
    return width, TOP_PX + ROW_PX * _total_rows(tl) + BOTTOM_PX


def _total_rows(tl: Timeline) -> int:
    return sum(lane_rows(tl, key) for _, key in _lanes(tl))


def draw(tl: Timeline, width: int = 1600):
    """The matplotlib Figure (no pyplot, so no global state or display backend is touched)."""
    return _draw(tl, width)[0]


def _draw(tl: Timeline, width: int) -> tuple[Any, dict[str, str]]:
    """The Figure and its bars' tooltips (SVG id -> text), which :func:`write` puts in an SVG."""
    Figure, Patch = require_matplotlib()
    w, h = figure_size(tl, width)
    fig = Figure(figsize=(w / DPI, h / DPI), dpi=DPI)
    lanes = _lanes(tl)
    n = _total_rows(tl)
    tops = [sum(lane_rows(tl, key) for _, key in lanes[:i]) for i in range(len(lanes))]
    ax = fig.add_axes((130 / w, BOTTOM_PX / h, 1 - 150 / w, (h - TOP_PX - BOTTOM_PX) / h))
    end = max(tl.makespan, 1)
    ax.set_xlim(0, end)
    ax.set_ylim(n, 0)
    ax.set_yticks([top + lane_rows(tl, key) / 2 for top, (_, key) in zip(tops, lanes)],
                  [label for label, _ in lanes], fontsize=9)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("cycles", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    for top in tops[1:]:
        ax.axhline(top, color="#888888", linewidth=0.5)
    min_w = 1.2 / px_per_cycle(tl, w)  # ~1 px: keeps 1-cycle issue ticks visible
    bars = _Bars(ax)
    for top, (title, key) in zip(tops, lanes):
        if isinstance(key, int) and not isinstance(key, ResourceKind):
            _draw_group(bars, tl, key, top, min_w)
        else:
            _draw_unit(bars, tl, key, title, top, min_w, w)
    _draw_marks(ax, tl, n, w)
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
    return fig, bars.tips


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
    # said under the axis, not inside the band, where it overprinted the lowest lane's bars
    ax.set_xlabel(f"cycles (shaded: the steady state, iterations {s.window[0]}.."
                  f"{s.window[1] - 1})", fontsize=9)


def stall_styles(tl: Timeline) -> dict[str, tuple[str, str]]:
    """Stall reason -> (face colour, hatch): the barrier, then each of the target's channels."""
    styles = {"barrier": BARRIER_STALL}
    for i, (_, label) in enumerate(tl.channels):
        styles[label] = CHANNEL_STALLS[i % len(CHANNEL_STALLS)]
    return styles


class _Bars:
    """Draws the picture's bars, one patch each, and keeps each bar's tooltip under the SVG
    id the patch is written with (matplotlib writes a patch's ``gid`` as a group's id)."""

    def __init__(self, ax: Any) -> None:
        self.ax = ax
        self.tips: dict[str, str] = {}

    def add(self, x: float, width: float, y: float, height: float, tip: str, **style: Any) -> None:
        from matplotlib.patches import Rectangle

        gid = BAR_ID.format(len(self.tips))
        # add_artist, not add_patch: the limits are set already, and add_patch's update of
        # them for every bar doubled the time to draw a 12-iteration picture
        self.ax.add_artist(Rectangle((x, y), width, height, gid=gid, **style))
        self.tips[gid] = tip


def bar_tooltip(tl: Timeline, step: Step, start: int, end: int, what: str = "") -> str:
    """A bar's tooltip: the op in the shared notation, what the bar shows, the group (or the
    agent) with the iteration or phase, and the bar's cycles."""
    when = f"iteration {step.iteration}" if step.iteration >= 0 else step.phase.name.lower()
    lines = [timeline_label(tl, step)] + ([what] if what else [])
    return "\n".join(lines + [f"{tl.groups[step.group].title}, {when}", f"cycles {start}-{end}"])


def _draw_group(bars: _Bars, tl: Timeline, group: int, row: int, min_w: float) -> None:
    g = tl.groups[group]
    styles = stall_styles(tl)
    for s in g.steps:
        if s.stall is not None:
            key = s.stall.reason if s.stall.reason in styles else "unit"
            color, hatch = styles.get(key, UNIT_STALL)
            tip = bar_tooltip(tl, s, s.ready, s.start,
                              f"stalled before issue: {s.stall.detail or s.stall.reason}")
            bars.add(s.ready, s.start - s.ready, row + 0.08, 0.5, tip, facecolor=color,
                     edgecolor="#666666", hatch=hatch, linewidth=0.3)
    for b in tl.busy:
        if b.group == group and b.resource == ResourceKind.MMA_UNIT:
            bars.add(b.start, b.end - b.start, row + 0.62, 0.3, _busy_tooltip(tl, b, "MMA unit"),
                     facecolor=GROUP_COLORS[group % 4], edgecolor="white", linewidth=0.4)
    for role in ROLE_COLORS:  # issue ticks, drawn over the MMAs
        for s in g.steps:
            if s.op.role == role and not s.is_marker:
                bars.add(s.start, max(s.issue_end - s.start, min_w), row + 0.62, 0.3,
                         bar_tooltip(tl, s, s.start, s.issue_end, "issued"),
                         facecolor=ROLE_COLORS[role], linewidth=0)


def _busy_tooltip(tl: Timeline, b: Busy, unit: str) -> str:
    return bar_tooltip(tl, tl.step(b.group, b.seq), b.start, b.end, f"on the {unit}")


def _draw_unit(bars: _Bars, tl: Timeline, resource: ResourceKind, title: str, top: int,
               min_w: float, width_px: int) -> None:
    busy = tl.busy_on(resource)
    lanes = max(tl.lanes(resource), 1)
    height = sublane_height(tl, resource)
    for grp in sorted({b.group for b in busy}):
        for lane in range(lanes):
            for b in busy:
                if b.group == grp and b.lane == lane:
                    bars.add(b.start, max(b.end - b.start, min_w), top + 0.08 + lane * height,
                             height * 0.9, _busy_tooltip(tl, b, title),
                             facecolor=GROUP_COLORS[grp % 4], edgecolor="white", linewidth=0.4,
                             alpha=1.0 if resource == ResourceKind.MMA_UNIT else 0.75)
    for label in unit_labels(tl, resource, top, width_px, label_width_px):
        bars.ax.text(label.x, label.y, label.text, ha="center", va="center",
                     fontsize=LABEL_POINTS, color="white")


# --- op labels that fit their bars ----------------------------------------------

@attrs.frozen(kw_only=True)
class BarLabel:
    """An op label drawn inside its bar, centred at (``x`` cycles, ``y`` rows)."""

    bar: Busy  #: the unit occupancy the bar draws
    x: float
    y: float
    text: str


def px_per_cycle(tl: Timeline, width_px: int) -> float:
    """Horizontal scale of the plot: its width (the picture's less the margins) over the run."""
    return (width_px - 150) / max(tl.makespan, 1)


def label_candidates(tl: Timeline, step: Step) -> tuple[str, ...]:
    """What a bar may say, most informative first: the op in the shared notation
    (``LOAD_B[B s1.0 K1]``), then its name alone (``LOAD_B``)."""
    return tuple(dict.fromkeys((timeline_label(tl, step), tag_name(step.op.tag, tl.tag_names))))


def fitting_label(candidates: Sequence[str], width_px: float, height_px: float,
                  measure: Callable[[str], float]) -> str | None:
    """The first of ``candidates`` whose text (``measure``: its width in pixels) fits inside a
    bar ``width_px`` wide with LABEL_PAD_PX to spare at each end; None when the bar is lower
    than the font or too narrow for all of them (a label that overflows its bar would cover
    its neighbours')."""
    if height_px < LABEL_POINTS * DPI / 72 or width_px <= 2 * LABEL_PAD_PX:
        return None
    return next((text for text in candidates if measure(text) + 2 * LABEL_PAD_PX <= width_px),
                None)


def sublane_height(tl: Timeline, resource: ResourceKind) -> float:
    """Height (in rows) of one in-flight sub-lane of ``resource``'s lane; a bar takes 90% of it."""
    return (lane_rows(tl, resource) - 0.16) / max(tl.lanes(resource), 1)


def unit_labels(tl: Timeline, resource: ResourceKind, top: int, width_px: int,
                measure: Callable[[str], float]) -> list[BarLabel]:
    """The labels of ``resource``'s lane (drawn from row ``top``): one per bar with room for one."""
    height = sublane_height(tl, resource)
    scale = px_per_cycle(tl, width_px)
    out = []
    for b in tl.busy_on(resource):
        text = fitting_label(label_candidates(tl, tl.step(b.group, b.seq)),
                             (b.end - b.start) * scale, height * 0.9 * ROW_PX, measure)
        if text is not None:
            out.append(BarLabel(bar=b, x=(b.start + b.end) / 2,
                                y=top + 0.08 + (b.lane + 0.45) * height, text=text))
    return out


@functools.lru_cache(maxsize=1024)  # a 12-iteration picture measures ~20 texts 800 times
def label_width_px(text: str, points: float = LABEL_POINTS) -> float:
    """Width of ``text`` at ``points`` (the bar labels' size by default), in pixels, as
    matplotlib lays it out."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    width_pt = text_to_path.get_text_width_height_descent(
        text, FontProperties(size=points), ismath=False)[0]
    return width_pt * DPI / 72


#: font size of the iteration marks above the plot ("it 3", "epilogue")
MARK_POINTS = 7


def mark_labels(tl: Timeline, width_px: int) -> list[tuple[int, str]]:
    """(cycle, text) of the iteration marks written above the plot: each kernel iteration's
    and the epilogue's start, left to right, leaving out a mark that would overprint the one
    before it (short iterations, a narrow picture); every start still gets its dotted line."""
    scale = px_per_cycle(tl, width_px)
    kept: list[tuple[int, str]] = []
    end_px = float("-inf")
    for span in tl.groups[0].spans:
        if span.phase not in (Phase.KERNEL, Phase.EPILOGUE):
            continue
        text = f"it {span.iteration}" if span.phase == Phase.KERNEL else "epilogue"
        x_px = span.start * scale
        if x_px >= end_px:
            kept.append((span.start, text))
            end_px = x_px + label_width_px(text, MARK_POINTS) + 4
    return kept


def _draw_marks(ax, tl: Timeline, n: int, width_px: int) -> None:
    groups = len(tl.groups)
    for b in tl.barriers:
        ax.vlines(b.release, 0, groups, color="#444444", linewidth=0.4, alpha=0.6)
    for span in tl.groups[0].spans:
        if span.phase == Phase.KERNEL or span.phase == Phase.EPILOGUE:
            ax.vlines(span.start, 0, n, color="black", linewidth=0.8, linestyles="dotted")
    for x, text in mark_labels(tl, width_px):
        ax.text(x, -0.05, text, fontsize=MARK_POINTS, ha="left", va="bottom")


def write(tl: Timeline, path: str | Path, *, fmt: str | None = None, width: int = 1600) -> Path:
    """Draw and save; ``fmt`` "png" or "svg" (default: from the file suffix)."""
    path = Path(path)
    fmt = (fmt or path.suffix.lstrip(".") or "png").lower()
    if fmt not in ("png", "svg"):
        raise ValueError(f"picture format must be png or svg, not {fmt!r}")
    fig, tips = _draw(tl, width)
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "pipeline-core", "hatch.linewidth": 0.5}):
        if fmt == "png":
            fig.savefig(path, format=fmt, dpi=DPI)
            return path
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=DPI, metadata={"Date": None})
    path.write_text(with_tooltips(buf.getvalue().decode("utf-8"), tips), encoding="utf-8")
    return path


def with_tooltips(svg: str, tips: dict[str, str]) -> str:
    """``svg`` with each bar's tooltip as the first child (``<title>``) of the bar's group."""
    bar_id = re.escape(BAR_ID).replace(re.escape("{}"), r"\d+")
    return re.sub(rf'<g id="({bar_id})">',
                  lambda m: f'{m.group(0)}\n   <title>{escape(tips[m.group(1)])}</title>', svg)
