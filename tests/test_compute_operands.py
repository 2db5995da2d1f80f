"""Compute ops that name their operands (issue 39): ``logical(tag, reads=...)``.  A one-operand
step is compiled, proven, checked from its document and timed; the default stays an A and a B;
a compute's ``channel=``, which the ring lowering would ignore, is refused naming ``reads=``.
The row-sum plugin is the one docs/guide/schedule-plugin.md shows (run from the page)."""
from __future__ import annotations

import itertools
import json

import pytest

from guide_pages import DOCS, shown_files

from pipeline_core.document import op_from_doc, op_doc
from pipeline_core.errors import ConfigError
from pipeline_core.ops import OpRole, logical

pytest.importorskip("hello_schedule")

PAGE = DOCS / "guide" / "schedule-plugin.md"
#: module names unique in the process: an imported module name is reused from sys.modules
_NAMES = itertools.count()


@pytest.fixture
def rowsum(tmp_path, monkeypatch):
    """The page's plugin module, written out and importable; ``run(*argv)`` runs the CLI with
    it loaded, and ``edit(old, new)`` rewrites its source first (a variant of the page's)."""
    from pipeline_core.testing import run_cli

    source = shown_files(PAGE)["rowsum_plugin.py"]
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(text: str) -> str:
        name = f"rowsum_plugin_{next(_NAMES)}"  # a fresh module per variant (no stale import)
        (tmp_path / f"{name}.py").write_text(text)
        return name

    class Page:
        text = source

        @staticmethod
        def run(*argv: str, text: str | None = None):
            return run_cli(["--plugin", write(text or source), *argv])

    return Page


def test_a_one_operand_reduction_is_compiled_proven_checked_and_timed(rowsum, tmp_path):
    compiled = rowsum.run("compile", "rowsum", "--format", "json")
    assert compiled.exit_code == 0, compiled.stderr
    doc = json.loads(compiled.stdout)
    computes = [o for o in doc["body"] if o["role"] == int(OpRole.COMPUTE)]
    assert [o["reads"] for o in computes] == [[0]]
    assert all("reads" not in o for o in doc["body"] if o["role"] != int(OpRole.COMPUTE))
    path = tmp_path / "rowsum.json"
    path.write_text(compiled.stdout)
    checked = rowsum.run("check", "--input", str(path))  # the proof read back from the document
    assert checked.exit_code == 0 and "SAFE" in checked.stdout, checked.stderr
    analyzed = rowsum.run("analyze", "rowsum")
    assert analyzed.exit_code == 0 and "cycles" in analyzed.stdout, analyzed.stderr


def test_without_reads_the_compute_still_reads_an_a_and_a_b(rowsum):
    result = rowsum.run("compile", "rowsum",
                        text=rowsum.text.replace("logical(MMA, reads=(0,))", "logical(MMA)"))
    assert result.exit_code == 1
    assert "reads fragment register ch1 #0 that was never loaded" in result.stderr


def test_a_three_operand_chain_reads_three_fragments_and_is_proven(rowsum):
    """A fused multiply-add chain: a third operand channel (loaded with toy-gpu's A tags on
    channel 2), its fragment matched at the compute's subtile like B's."""
    one = ("ops = [logical(LOAD_A, channel=0), logical(FRAG_A, channel=0),\n"
           "               logical(MMA, reads=(0,))]")
    three = ("ops = [logical(LOAD_A, channel=0), logical(LOAD_A, channel=1), "
             "logical(LOAD_A, channel=2), logical(FRAG_A, channel=0), "
             "logical(FRAG_A, channel=1), logical(FRAG_A, channel=2), "
             "logical(MMA, reads=(0, 1, 2))]")
    assert one in rowsum.text
    text = rowsum.text.replace(one, three)
    assert rowsum.run("compile", "rowsum", text=text).exit_code == 0
    dropped = text.replace("logical(FRAG_A, channel=2), ", "")
    result = rowsum.run("compile", "rowsum", text=dropped)
    assert result.exit_code == 1 and "ch2 #0 that was never loaded" in result.stderr


def test_a_reduction_whose_fragment_is_not_loaded_is_refused_by_the_proof(rowsum):
    text = rowsum.text.replace("logical(FRAG_A, channel=0),", "")
    result = rowsum.run("compile", "rowsum", text=text)
    assert result.exit_code == 1
    assert "reads fragment register ch0 #0 that was never loaded" in result.stderr


def test_a_compute_channel_the_ring_would_ignore_is_refused_naming_reads(rowsum):
    text = rowsum.text.replace("logical(MMA, reads=(0,))", "logical(MMA, channel=0)")
    result = rowsum.run("compile", "rowsum", text=text)
    assert result.exit_code == 2
    line, = result.stderr.strip().splitlines()
    assert "build_body()[2].channel = 0" in line and "logical(..., reads=(0,))" in line


def test_reads_on_a_load_is_refused():
    from pipeline_core.compiler import check_body_fits_target

    class Named:
        name = "x"

        @staticmethod
        def tag_names():
            return {}

    load = logical(0, channel=0, reads=(0,)).evolve(role=OpRole.GLOBAL_LOAD)
    with pytest.raises(ConfigError, match=r"build_body\(\)\[0\]\.reads"):
        check_body_fits_target(Named(), (load,), None, "")


@pytest.mark.parametrize("reads", [(), (0, 0), (-1,), ("a",), 3])
def test_a_reads_that_names_no_channel_is_refused_in_one_line(reads):
    with pytest.raises(ConfigError, match="reads"):
        logical(5, reads=reads)


def test_the_document_carries_reads_only_where_named():
    named, default = logical(5, reads=(0, 2)), logical(5)
    assert op_from_doc(op_doc(named, {})).reads == (0, 2)
    assert "reads" not in op_doc(default, {}) and op_from_doc(op_doc(default, {})).reads is None
    assert default.operand_channels == (0, 1) and named.operand_channels == (0, 2)


def test_a_schedule_registered_under_another_name_is_compiled_and_checked_under_it(tmp_path,
                                                                                  monkeypatch):
    """Issue 39: a factory returning an object named otherwise (a schedule re-registered for
    a new target) compiled under the object's name, so ``check --input`` looked up the other
    record and refused the target the user compiled for."""
    from pipeline_core.testing import run_cli

    (tmp_path / "renamed_hello.py").write_text(
        "from hello_schedule.plugin import _build\n"
        "from pipeline_core.plugin_api import ScheduleRecord, hookimpl\n"
        "@hookimpl\n"
        "def pipeline_core_register_schedules():\n"
        "    return [ScheduleRecord('hello-again', 'hello under a name of its own', _build,\n"
        "                           default_target='toy-gpu')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    compiled = run_cli(["--plugin", "renamed_hello", "compile", "hello-again", "--format", "json"])
    assert compiled.exit_code == 0, compiled.stderr
    assert json.loads(compiled.stdout)["schedule"] == "hello-again"
    path = tmp_path / "doc.json"
    path.write_text(compiled.stdout)
    checked = run_cli(["--plugin", "renamed_hello", "check", "--input", str(path)])
    assert checked.exit_code == 0 and "SAFE" in checked.stdout, checked.stderr


def test_each_lowering_refuses_the_field_it_would_ignore():
    """Under the ring and block lowerings a compute's channel= means nothing (refused, naming
    reads=); under the agents lowering, which binds a compute by its channel, reads= would be
    ignored (refused).  The lowerings say which through LoweringRecord.compute_channels."""
    from pipeline_core.compiler import check_body_fits_target
    from pipeline_core.plugins import default_host

    class Named:
        name = "x"

        @staticmethod
        def tag_names():
            return {}

    lowerings = default_host().lowerings
    binds = {name: lowerings[name].compute_channels for name in ("agents", "blocks", "ring")}
    assert binds == {"agents": True, "blocks": False, "ring": False}
    compute = logical(5, channel=1).evolve(role=OpRole.COMPUTE)
    named = logical(5, reads=(0,)).evolve(role=OpRole.COMPUTE)
    for name, binds_channel in binds.items():
        bad, good = (named, compute) if binds_channel else (compute, named)
        with pytest.raises(ConfigError, match=r"build_body\(\)\[0\]\.(reads|channel)"):
            check_body_fits_target(Named(), (bad,), None, "",
                                   compute_channels=lowerings[name].compute_channels)
        check_body_fits_target(Named(), (good,), None, "",
                               compute_channels=lowerings[name].compute_channels)
