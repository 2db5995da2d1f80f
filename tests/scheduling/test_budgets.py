"""Search results are honest and repeatable (issue 16): a node budget cuts CSP and EXACT at
the same point on every machine, a cut search says which budget cut it, and a VGPR budget
no order meets is refused naming the peak."""
from __future__ import annotations

import pytest

from pipeline_core.scheduling.registry import SchedulingRequest
from pipeline_core.testing import run_cli

CUT = ["compile", "pingpong", "-c", "lds_contention_penalty=8", "--format", "json"]


@pytest.mark.parametrize("strategy", ["CSP", "EXACT"])
def test_a_node_budget_cuts_the_search_repeatably_and_says_so(strategy):
    argv = [*CUT, "-c", f"scheduling={strategy}", "-c", "search_node_limit=50"]
    first, second = run_cli(argv), run_cli(argv)
    assert first.exit_code == 0, first.stderr
    assert first.stdout == second.stdout
    warning = [line for line in first.stderr.splitlines() if "search_node_limit" in line]
    assert len(warning) == 1
    assert warning[0].startswith(f"{strategy}: node limit of 50 nodes reached")
    assert '"search_node_limit": 50' in first.stdout


def test_a_search_that_finishes_within_its_budget_says_nothing():
    result = run_cli(["compile", "pingpong", "-c", "search_node_limit=1000000", "--format", "json"])
    assert result.exit_code == 0 and "limit" not in result.stderr


def test_the_seconds_budget_names_its_knob_and_the_repeatable_one():
    request = SchedulingRequest(body=(), edges=(), time_limit=10.0)
    assert request.budget_text("time-limit") == \
        "time limit of 10s reached (-c search_time_limit_ms)"


def test_the_node_budget_is_bounded():
    result = run_cli(["compile", "pingpong", "-c", "search_node_limit=-1"])
    assert result.exit_code == 2 and "search_node_limit" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("budget", [8, 80])
@pytest.mark.parametrize("strategy", ["CSP", "EXACT", "GREEDY"])
def test_a_vgpr_budget_no_order_meets_is_refused_naming_the_peak(budget, strategy):
    result = run_cli(["compile", "pingpong", "-c", f"max_vgpr={budget}",
                      "-c", f"scheduling={strategy}"])
    assert result.exit_code != 0 and result.stdout == ""
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert f"-c max_vgpr={budget}: no order meets the VGPR budget" in line
    assert "peaks at 96 VGPRs" in line


def test_a_vgpr_budget_the_order_meets_compiles_unchanged():
    plain = run_cli(["compile", "pingpong", "--format", "json"])
    budget = run_cli(["compile", "pingpong", "-c", "max_vgpr=96", "--format", "json"])
    assert budget.exit_code == 0
    strip = lambda text: text.replace('"max_vgpr": 96', '"max_vgpr": 999999')  # noqa: E731
    assert strip(budget.stdout) == plain.stdout
