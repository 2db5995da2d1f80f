"""``export --format png|svg``: timeline pictures (matplotlib is optional: image tests skip
without it; the missing-matplotlib message is tested by simulating the ImportError)."""
from __future__ import annotations

import argparse
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import golden_data  # noqa: E402
from test_simulate import compile_case  # noqa: E402

from pipeline_core.export import cli_export, picture  # noqa: E402
from pipeline_core.ops import ResourceKind  # noqa: E402
from pipeline_core.simulate import simulate  # noqa: E402
from pipeline_core.simulate.labels import timeline_label  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"

CASES = ("pingpong_bf16", "fourwave_fp8")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk (the first chunk of every PNG)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, "not a PNG file"
    length, chunk = struct.unpack(">I4s", head[8:16])
    assert chunk == b"IHDR" and length == 13
    return struct.unpack(">II", head[16:24])


def args_for(path: Path | None, fmt: str | None, *extra: str):
    parser = argparse.ArgumentParser()
    cli_export.add_arguments(parser)
    argv = (["--format", fmt] if fmt else []) + (["-o", str(path)] if path else []) + list(extra)
    return parser.parse_args(argv)


@pytest.fixture(params=CASES)
def case(request):
    return request.param


def test_png_written_with_expected_size(tmp_path, case, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "timeline.png"
    assert cli_export.run(args_for(path, "png", "--iterations", "3"), compile_case(case)) == 0
    tl = simulate(compile_case(case), 3)
    assert png_size(path) == picture.figure_size(tl, 1600)
    assert "wrote" in capsys.readouterr().out


def test_png_width_option(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "small.png"
    src = golden_data.load("pingpong_bf16")
    assert cli_export.run(args_for(path, None, "--iterations", "2", "--width", "900"), src) == 0
    width, height = png_size(path)
    assert width == 900
    assert height == picture.figure_size(simulate(src, 2), 900)[1]
    # two warp groups, the MMA unit, LDS (4 ops in flight: one row), global memory (8 in
    # flight: two rows, so that each in-flight bar is tall enough for a label)
    rows = 2 + 1 + 1 + 2
    assert height == picture.TOP_PX + rows * picture.ROW_PX + picture.BOTTOM_PX


def test_svg_parses_as_xml(tmp_path, case):
    pytest.importorskip("matplotlib")
    path = tmp_path / "timeline.svg"
    assert cli_export.run(args_for(path, "svg", "--iterations", "3"), compile_case(case)) == 0
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    tl = simulate(compile_case(case), 3)
    w, h = picture.figure_size(tl)
    assert root.get("width") == f"{w * 72 / picture.DPI:g}pt"
    assert root.get("height") == f"{h * 72 / picture.DPI:g}pt"
    text = path.read_text()
    assert "group 0" in text and "MMA unit" in text


def test_svg_is_deterministic(tmp_path):
    pytest.importorskip("matplotlib")
    tl = simulate(golden_data.load("fourwave_fp8"), 2)
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    picture.write(tl, a)
    picture.write(tl, b)
    assert a.read_bytes() == b.read_bytes()


def test_missing_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(picture.MissingMatplotlib) as exc:
        picture.require_matplotlib()
    assert "pip install 'gpu-pipeline-core[plot]'" in str(exc.value)
    path = tmp_path / "x.png"
    assert cli_export.run(args_for(path, "png"), golden_data.load("pingpong_bf16")) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install 'gpu-pipeline-core[plot]'" in err
    assert not path.exists()


def test_image_needs_an_output_file(capsys):
    assert cli_export.run(args_for(None, "svg"), golden_data.load("pingpong_bf16")) == 2
    assert "-o FILE.svg" in capsys.readouterr().err
    assert cli_export.run(args_for(None, "png", "-o", "-"), golden_data.load("pingpong_bf16")) == 2


def test_bad_picture_format(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError):
        picture.write(simulate(golden_data.load("fourwave_fp8"), 1), tmp_path / "x.gif")


# --- op labels where they fit, tooltips on every bar -------------------------------------

def five_px_a_char(text: str) -> float:
    return 5.0 * len(text)


def test_a_label_is_the_most_informative_candidate_narrower_than_its_bar():
    candidates = ("LOAD_B[B s1.0 K1]", "LOAD_B")  # 85 and 30 px at five pixels a character
    pad = 2 * picture.LABEL_PAD_PX
    assert picture.fitting_label(candidates, 85 + pad, 20, five_px_a_char) == "LOAD_B[B s1.0 K1]"
    assert picture.fitting_label(candidates, 85 + pad - 1, 20, five_px_a_char) == "LOAD_B"
    assert picture.fitting_label(candidates, 30 + pad, 20, five_px_a_char) == "LOAD_B"
    assert picture.fitting_label(candidates, 30 + pad - 1, 20, five_px_a_char) is None
    # a bar lower than the font takes no label, however wide
    assert picture.fitting_label(candidates, 500, 5, five_px_a_char) is None


def test_the_default_picture_labels_the_bars_wide_enough_and_only_those():
    """At the default 12 iterations the global loads (45 px) are labelled, the MMAs (4 px) not."""
    pytest.importorskip("matplotlib")
    tl = simulate(golden_data.load("pingpong_bf16"), 12)
    scale = picture.px_per_cycle(tl, 1600)
    labelled = 0
    for resource in (ResourceKind.MMA_UNIT, ResourceKind.LDS, ResourceKind.GLOBAL_MEM):
        labels = picture.unit_labels(tl, resource, 0, 1600, picture.label_width_px)
        bars = tl.busy_on(resource)
        for label in labels:
            bar = label.bar
            assert bar in bars and label.x == (bar.start + bar.end) / 2
            assert label.text in picture.label_candidates(tl, tl.step(bar.group, bar.seq))
            room = (bar.end - bar.start) * scale - 2 * picture.LABEL_PAD_PX
            assert picture.label_width_px(label.text) <= room
        if resource == ResourceKind.GLOBAL_MEM:
            assert len(labels) == len(bars) and {lb.text for lb in labels} == {"LOAD_A", "LOAD_B"}
        else:
            assert labels == []  # 3.6 and 4.5 px wide: nothing fits
        labelled += len(labels)
    texts = [t.get_text() for t in picture.draw(tl).axes[0].texts]
    assert sum(t in ("LOAD_A", "LOAD_B") for t in texts) == labelled > 0


def test_every_svg_bar_has_a_tooltip_naming_its_op_group_and_cycles(tmp_path):
    pytest.importorskip("matplotlib")
    tl = simulate(golden_data.load("pingpong_bf16"), 2)
    path = picture.write(tl, tmp_path / "t.svg")
    groups = [g for g in ET.parse(path).getroot().iter(f"{SVG}g")
              if g.get("id", "").startswith("op-bar-")]
    titles = [g.find(f"{SVG}title") for g in groups]
    assert groups and all(t is not None and t.text for t in titles)
    tips = [t.text for t in titles]
    busy = tl.busy
    assert len(tips) >= len(busy)
    for b in busy:  # every op on a unit, in the unit lane (and MMAs in the group lane too)
        step = tl.step(b.group, b.seq)
        want = (timeline_label(tl, step), tl.groups[b.group].title, f"cycles {b.start}-{b.end}")
        assert any(all(w in tip for w in want) for tip in tips), want
    stalls = [s for g in tl.groups for s in g.steps if s.stall is not None]
    assert sum("stalled before issue" in tip for tip in tips) == len(stalls) > 0
    assert len(set(g.get("id") for g in groups)) == len(groups)


@pytest.mark.parametrize("width", [400, 1600])
def test_iteration_marks_never_overprint_and_the_steady_label_is_off_the_bars(width):
    """Issue 39: at a narrow width the "it N" marks overprinted each other, and the steady
    state's label sat inside the plot over the lowest lane's bars."""
    pytest.importorskip("matplotlib")
    tl = simulate(golden_data.load("pingpong_bf16"), 12)
    marks = picture.mark_labels(tl, width)
    scale = picture.px_per_cycle(tl, width)
    starts = [x for x, _ in marks]
    assert starts == sorted(starts) and marks[0][1] == "it 0"
    for (x0, t0), (x1, _) in zip(marks, marks[1:]):
        assert x0 * scale + picture.label_width_px(t0, picture.MARK_POINTS) <= x1 * scale
    if width == 1600:  # wide enough: every iteration and the epilogue are named
        assert [t for _, t in marks] == [f"it {i}" for i in range(12)] + ["epilogue"]
    else:
        assert len(marks) < 13
    ax = picture.draw(tl, width).axes[0]
    assert not [t for t in ax.texts if t.get_text().startswith("steady state")]
    assert "steady state, iterations" in ax.get_xlabel()
