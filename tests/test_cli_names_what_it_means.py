"""The CLI says what a newcomer meant and what it did: a listing narrowed to the names given,
a key typed after the wrong flag named with the flag that takes it (issue 39's smaller items)."""
from __future__ import annotations

import json


def test_a_listing_shows_only_the_names_given(cli):
    result = cli("schedules", "pingpong", "hello")
    heads = [line.split(":", 1)[0] for line in result.stdout.splitlines()
             if not line.startswith(" ")]
    assert result.exit_code == 0 and heads == ["hello", "pingpong"]
    doc = json.loads(cli("targets", "mi355x", "--format", "json").stdout)
    assert [row["name"] for row in doc["targets"]] == ["mi355x"]
    assert cli("schedules").stdout.count("\n") > result.stdout.count("\n")


def test_a_listed_name_that_does_not_exist_is_one_line_with_the_close_one(cli):
    result = cli("schedules", "pingpong", "4wav")
    assert result.exit_code != 0
    line, = result.stderr.strip().splitlines()
    assert "Unknown schedule '4wav'" in line and "Did you mean '4wave'?" in line
    assert "pipeline-core schedules NAME" in line


def test_a_target_key_given_with_p_names_the_T_flag_that_takes_it(cli):
    result = cli("compile", "pingpong", "-p", "vm_per_load_a=2")
    assert result.exit_code != 0
    line, = result.stderr.strip().splitlines()
    assert "vm_per_load_a is a -T parameter of target mi355x: pass -T vm_per_load_a=2." in line


def test_a_schedule_key_given_with_T_names_the_p_flag_that_takes_it(cli):
    result = cli("compile", "pingpong", "-T", "BM=128")
    assert result.exit_code != 0
    line, = result.stderr.strip().splitlines()
    assert "BM is a -p parameter of schedule pingpong: pass -p BM=128." in line
