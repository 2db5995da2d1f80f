"""The text rendering's block layout: double-buffer schedules only."""
from __future__ import annotations

from pipeline_core.api import compile_named
from pipeline_core.export.text import render


def test_block_layout_of_a_single_buffer_schedule_is_empty():
    """A single-buffer kernel has no block program, so there is no layout (not a crash)."""
    compiled = compile_named("default-matmul")
    assert compiled.plan.details.layout(compiled.plan, compiled.tag_names, None) == ()
    assert "BLOCKS" not in render(compiled)


def test_block_layout_lists_the_partitions_of_a_double_buffer_schedule():
    compiled = compile_named("pingpong")
    lines = compiled.plan.details.layout(compiled.plan, compiled.tag_names,
                                         compiled.target_profile.sync)
    assert lines[0].startswith("BLOCKS")
    assert sum(line.strip().startswith("partition ") for line in lines) == compiled.config.num_partitions
    assert "\n".join(lines) in render(compiled)
