"""``-O`` emitter options: declared on the record (type, bound, default) and parsed and checked
by the core before the emitter runs (issue 23: ``-O watchdog=2**70`` was emitted as a literal no
``unsigned long long`` holds, ``-O watchdog=`` with superscript digits blamed the plugin)."""
from __future__ import annotations

import json

import pytest

from pipeline_core import hookimpl
from pipeline_core.emitters import EmitterRecord
from pipeline_core.errors import ConfigError
from pipeline_core.limits import Bound
from pipeline_core.schedule import Param

CALLS: list[dict] = []


def _emit(compiled, **options):
    CALLS.append(options)
    return f"{sorted(options.items())}\n"


DECLARED = (Param("depth", int, 2, "a count", bound=Bound(low=1, high=8)),
            Param("fast", bool, False, "a switch"))


@hookimpl
def pipeline_core_register_emitters():
    return [EmitterRecord("probe", "records its options", ("mi355x",), _emit,
                          kernel_families=("gemm-pingpong",), options=DECLARED),
            EmitterRecord("free", "takes -O strings as typed", ("mi355x",), _emit,
                          kernel_families=("gemm-pingpong",))]


def emit(cli, emitter, *options):
    CALLS.clear()
    args = [a for o in options for a in ("-O", o)]
    return cli("--plugin", __name__, "emit", "pingpong", "--emitter", emitter, *args)


def test_declared_options_reach_the_emitter_typed_with_their_defaults(cli):
    result = emit(cli, "probe", "depth=0x3")
    assert result.exit_code == 0, result.stderr
    assert CALLS == [{"depth": 3, "fast": False}]
    assert emit(cli, "probe", "fast=yes").stdout == "[('depth', 2), ('fast', True)]\n"


@pytest.mark.parametrize("option, line", [
    ("depth=9", "-O depth=9 is invalid for emitter probe: an integer in [1, 8]"),
    (f"depth={2**70}", f"-O depth={2**70} is invalid for emitter probe: an integer in [1, 8]"),
    ("depth=\u0663", "-O depth=\u0663 is invalid for emitter probe: '\u0663' is not an integer "
                     "(use the ASCII digits 0-9); expected an integer in [1, 8]"),
    ("fast=maybe", "-O fast=maybe is invalid for emitter probe: 'maybe' is not a boolean (use "
                   "true or false)"),
    ("nope=1", "Unknown -O parameter of emitter probe 'nope'. Known parameters of emitter probe: "
               "depth, fast."),
])
def test_a_bad_option_is_refused_before_the_emitter_runs(cli, option, line):
    result = emit(cli, "probe", option)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"error: {line}\n"
    assert CALLS == []


def test_an_emitter_that_declares_no_options_gets_the_strings_as_typed(cli):
    result = emit(cli, "free", "depth=\u0663", "x=y")
    assert result.exit_code == 0, result.stderr
    assert CALLS == [{"depth": "\u0663", "x": "y"}]


def test_options_must_be_param_records():
    with pytest.raises(ConfigError, match="EmitterRecord.options"):
        EmitterRecord("bad", "options that are not Params", (), _emit, options=("depth",))
    assert EmitterRecord("none", "declares it takes none", (), _emit, options=[]).options == ()


def test_an_empty_emitter_listing_says_so_and_names_a_plugin_to_install():
    """With no plugin loaded, ``emitters`` printed one empty line; the JSON stays an empty list."""
    from pipeline_core.testing import run_cli

    env = {"PIPELINE_CORE_NO_AUTOLOAD": "1"}
    text = run_cli(["emitters"], env=env)
    assert text.exit_code == 0
    assert text.stdout.strip().startswith("no emitter is installed")
    assert "pip install pipeline-core-nvidia-h100" in text.stdout
    assert json.loads(run_cli(["emitters", "--format", "json"], env=env).stdout)["emitters"] == []
