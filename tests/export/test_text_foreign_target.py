"""The text view on a target written outside this repository: an out-of-order copy channel,
in-order asynchronous fragment loads, no priority or fence hints (issue 24).

The block program is written in the template's words; the target's binding drops the hints, so
the emitted kernel is shorter than the template and every block sits elsewhere in it
(pipeline_core/program/binding.py).  The view must place the blocks where the emitted kernel has
them and report the waits the kernel emits, in the target's channel names.
"""
from __future__ import annotations

import pytest

from pipeline_core.compiler import compile_schedule
from pipeline_core.config import ScheduleConfig, TargetProfile
from pipeline_core.export.text import render
from pipeline_core.ops import OpRole
from pipeline_core.sync import BarrierKind, BlockBinding, Channel, Effect, SyncModel
from reference_bodies import mi355x_cost_model, mi355x_double_buffer, pingpong_body

COPY_WAIT, READ_WAIT, BAR = 140, 143, 141

FOREIGN = SyncModel(
    name="foreign-gpu",
    channels=(Channel(name="copy", label="copies", wait_tag=COPY_WAIT, wait_name="WAIT_COPY",
                      in_order=False),
              Channel(name="reads", label="reads", wait_tag=READ_WAIT, wait_name="WAIT_READ")),
    effects=(Effect(role=OpRole.GLOBAL_LOAD, counter="copy"),
             Effect(role=OpRole.FRAGMENT_LOAD, counter="reads"),
             Effect(role=OpRole.COMPUTE, counter=None)),
    barriers=(BarrierKind(tag=BAR, name="bar.sync"),),
    block_binding=BlockBinding(global_channel="copy", fragment_channel="reads"))


class _OnForeign:
    name = "pingpong-on-foreign"

    def __init__(self) -> None:
        self.target = TargetProfile(mi355x_cost_model(), mi355x_double_buffer(), sync=FOREIGN)

    def config(self):
        return self.target.pipeline

    def build_body(self):
        return pingpong_body()

    def schedule_config(self):
        return ScheduleConfig()


@pytest.fixture(scope="module")
def compiled():
    return compile_schedule(_OnForeign(), allow_unsafe=True)


def _kernel_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("KERNEL"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("  sync:"))
    return lines[start + 1:end]


def test_the_compact_kernel_rows_cover_the_emitted_kernel_once(compiled):
    text = render(compiled, kernel_only=True, compact=True)
    rows = [line for line in _kernel_lines(text)]
    spans = [tuple(int(x) for x in row.split(":")[0].split()[0].split("-")) for row in rows]
    assert spans[0][0] == 0 and spans[-1][1] == len(compiled.kernel) - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))  # no gap, no overlap
    program = compiled.plan.details.program
    assert [r.split()[1].rstrip(":") for r in rows][:len(program.blocks)] == \
        [f"b{i}" for i in range(len(program.blocks))]
    # every block row holds exactly one of the kernel's MMAs
    for row in rows[:len(program.blocks)]:
        assert row.count("MMA[") == 1, row


def test_the_block_markers_sit_on_each_blocks_first_entry(compiled):
    lines = _kernel_lines(render(compiled, kernel_only=True))
    marked = [int(line.split()[0]) for line in lines if "<- block" in line]
    program = compiled.plan.details.program
    assert len(marked) == len(program.blocks)
    # each block's MMA lies between its marker and the next
    mmas = [i for i, e in enumerate(compiled.kernel) if e.op.role == OpRole.COMPUTE]
    bounds = marked + [len(compiled.kernel)]
    assert all(sum(bounds[b] <= m < bounds[b + 1] for m in mmas) == 1
               for b in range(len(marked)))


def test_the_block_layout_lists_ranges_inside_the_kernel(compiled):
    text = render(compiled)
    ranges = [line.split("[")[1].split("]")[0] for line in text.splitlines()
              if line.strip().startswith("block ") and "[" in line]
    ends = [int(r.split("-")[1]) for r in ranges]
    assert ranges and max(ends) == len(compiled.kernel) - 1


def test_the_header_reports_the_emitted_waits_in_the_targets_words(compiled):
    header = next(line for line in render(compiled).splitlines()
                  if line.startswith("derived waits"))
    assert "wait_vm" not in header and "wait_lgkm" not in header
    emitted = {e.op.wait_value for e in compiled.kernel if e.op.tag == COPY_WAIT}
    assert emitted == {0}  # an out-of-order channel proves a load done only at 0
    assert "wait_copy_last=0" in header


def test_the_bundled_pingpong_target_lists_its_compact_kernel(capsys):
    """h100-pingpong's binding drops the fragment waits: compact listing used to exit 70."""
    from pipeline_core.cli import main

    assert main(["compile", "pingpong", "--target", "h100-pingpong", "--kernel-only",
                 "--compact"]) == 0
    out = capsys.readouterr().out
    assert "wait_lgkm" not in out and "wait_cp_async_last=" in out
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 8 and all(f" b{i} " in row for i, row in enumerate(rows))
