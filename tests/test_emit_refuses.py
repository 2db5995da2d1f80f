"""``EmitterRecord.refuses``: ``compile`` asks the emitters of the schedule's kernel family
whether they write what it compiled, and warns in one line when none does (issue 33: a
flash-attention geometry proved SAFE at compile and was first refused at ``emit``)."""
from __future__ import annotations

import pytest

from pipeline_core import hookimpl
from pipeline_core.emitters import EmitterRecord
from pipeline_core.errors import ConfigError

#: what this test plugin registers, set by each test before the command runs
MODE: dict[str, object] = {}


def _emit(compiled, **options):
    return "kernel\n"


def _picky(compiled) -> str:
    why = MODE.get("why", "")
    if isinstance(why, Exception):
        raise why
    return str(why)


@hookimpl
def pipeline_core_register_emitters():
    records = [EmitterRecord("picky", "refuses by MODE", ("mi355x",), _emit,
                             kernel_families=("gemm-pingpong",), refuses=_picky)]
    if MODE.get("lenient"):
        records.append(EmitterRecord("lenient", "writes anything of the family", ("mi355x",),
                                     _emit, kernel_families=("gemm-pingpong",)))
    return records


def _compile(cli, **mode):
    MODE.clear()
    MODE.update(mode)
    return cli("--plugin", __name__, "compile", "pingpong")


def test_a_geometry_every_emitter_refuses_is_one_warning_line(cli):
    result = _compile(cli, why="takes BM=128 only: set -p BM=128")
    assert result.exit_code == 0 and result.stdout.startswith("schedule pingpong")
    assert result.stderr == ("warning: no emitter writes this pingpong kernel (`pipeline-core "
                             "emit` would refuse it): emitter picky: takes BM=128 only: set -p "
                             "BM=128\n")


@pytest.mark.parametrize("mode", [{"why": ""}, {"why": "no", "lenient": True}])
def test_no_warning_while_some_emitter_writes_it(cli, mode):
    result = _compile(cli, **mode)
    assert (result.exit_code, result.stderr) == (0, "")


def test_a_refuses_that_raises_is_the_plugins_failure(cli):
    result = _compile(cli, why=RuntimeError("boom"))
    assert result.exit_code == 3
    assert "failed in refuses of emitter 'picky': RuntimeError: boom" in result.stderr


def test_refuses_must_be_callable():
    with pytest.raises(ConfigError, match="EmitterRecord.refuses = 'no' is invalid"):
        EmitterRecord("bad", "refuses is text", (), _emit, refuses="no")
