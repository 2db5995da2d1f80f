"""The text rendering's block layout: double-buffer schedules only."""
from __future__ import annotations

from pipeline_core.api import compile_named
from pipeline_core.export.text import block_layout


def test_block_layout_of_a_single_buffer_schedule_is_empty():
    """A single-buffer kernel has no block program, so there is no layout (not a crash)."""
    compiled = compile_named("default-matmul")
    assert compiled.kernel_program is None
    assert block_layout(compiled) == []


def test_block_layout_lists_the_partitions_of_a_double_buffer_schedule():
    compiled = compile_named("pingpong")
    lines = block_layout(compiled)
    assert lines[0].startswith("BLOCKS")
    assert sum(line.strip().startswith("partition ") for line in lines) == compiled.config.num_partitions
