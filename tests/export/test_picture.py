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
from pipeline_core.simulate import simulate  # noqa: E402

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
    lanes = 2 + 3  # two warp groups, MMA unit, LDS, global memory
    assert height == picture.TOP_PX + lanes * picture.ROW_PX + picture.BOTTOM_PX


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
