"""Structural verification of the final block program
(docs/guide/reference-behaviours.md, "Structural verification").

The reference's checks were debug asserts (no-ops in release). Here each is a
real error with a stable rule id, the block/partition where it fails, and a
message saying what is wrong and what to change. ``check_program`` returns
every finding; ``verify_program`` raises the first.
"""
from __future__ import annotations

from collections import Counter

from pipeline_core.config import NO_WAIT, PipelineConfig
from pipeline_core.errors import VerificationError
from pipeline_core.ops import Op, OpRole, tag_name
from pipeline_core.program.program import Program
from pipeline_core.program.waits import block0_lgkm

#: Stable rule ids, in check order.
RULES: tuple[str, ...] = ("block-count", "block-mma", "wait-bounds", "global-distribution",
                          "stage-consistency", "prefetch-coverage", "completion-coverage",
                          "warp-stagger-lds-race", "explicit-data-ops")


def _op_text(op) -> str:
    return f"{tag_name(op.tag)}(stage {op.stage}, sub {op.subtile}, ch {op.channel})"


def _check_block_count(program: Program, config: PipelineConfig):
    n = config.total_blocks
    if len(program.blocks) != n:
        yield VerificationError(
            "block-count",
            f"expected {n} blocks (m_mmas * n_mmas * num_partitions), got {len(program.blocks)}. "
            f"Build the program from a body with exactly {n} COMPUTE ops, or fix the MMA grid / "
            f"num_partitions in the pipeline config.")


def _check_block_mma(program: Program, config: PipelineConfig):
    bph = config.blocks_per_partition
    for i, blk in enumerate(program.blocks):
        part = i // bph if bph else None
        if not blk.mma.is_present:
            yield VerificationError(
                "block-mma",
                f"block {i} has no MMA op. Every block must end with one COMPUTE op; give the "
                f"body one MMA per block.", block=i, partition=part)
        elif blk.mma.role != OpRole.COMPUTE:
            yield VerificationError(
                "block-mma",
                f"block {i} MMA slot holds {_op_text(blk.mma)} with role {blk.mma.role.name}, "
                f"expected COMPUTE. Check the cost model's role for tag {blk.mma.tag}.",
                block=i, partition=part)


def _check_wait_bounds(program, config, lgkm_a, lgkm_b, wait_lgkm_first, wait_vm_last):
    if wait_lgkm_first < NO_WAIT:
        if wait_lgkm_first < 0:
            yield VerificationError(
                "wait-bounds", f"wait_lgkm_first is negative ({wait_lgkm_first}). Use a count "
                f">= 0, or >= {NO_WAIT} for no wait.")
        elif (lgkm_a > 0 or lgkm_b > 0) and len(program.blocks) == config.total_blocks:
            for h in range(config.num_partitions):
                g = block0_lgkm(program, config, h, lgkm_a, lgkm_b)
                if wait_lgkm_first > g:
                    b0 = h * config.blocks_per_partition
                    yield VerificationError(
                        "wait-bounds",
                        f"wait_lgkm_first ({wait_lgkm_first}) > block {b0} global lgkm ({g}) in "
                        f"partition {h}: the wait would not cover block {b0}'s fragment loads. "
                        f"Lower wait_lgkm_first to at most {g} (or enable auto_waits).",
                        block=b0, partition=h)
    if wait_vm_last < 0:
        yield VerificationError(
            "wait-bounds", f"wait_vm_last is negative ({wait_vm_last}). Use a count >= 0.")


def _check_distribution(program: Program, config: PipelineConfig):
    cap = config.block_sizing.max_globals
    n = len(program.blocks)
    total = sum(b.num_globals for b in program.blocks)
    if cap <= 0 or total < n * cap:
        return
    bph = config.blocks_per_partition
    for i, blk in enumerate(program.blocks):
        if blk.num_globals != cap:
            yield VerificationError(
                "global-distribution",
                f"block {i} has {blk.num_globals} globals, expected {cap} (max_globals = {cap} "
                f"and the body has {total} globals for {n} blocks). Run redistribute_globals "
                f"after construction, or set max_globals = 0 to allow bunching.",
                block=i, partition=i // bph)


def _check_stages(program: Program, config: PipelineConfig):
    if config.depth != 2 or config.cross_stage_rotation:
        return
    bph = config.blocks_per_partition
    for i, blk in enumerate(program.blocks):
        h = i // bph
        for slot in ("pre_op_0", "pre_op_1"):
            op = getattr(blk, slot)
            if op.is_present and op.stage != h:
                yield VerificationError(
                    "stage-consistency",
                    f"block {i} {slot} {_op_text(op)} reads stage {op.stage}, expected {h} "
                    f"(partition {h} reads LDS stage {h}). Fix the fragment's stage, move it to a "
                    f"partition-{op.stage} block, or set cross_stage_rotation = True if the "
                    f"schedule rotates stages on purpose.", block=i, partition=h)


def _check_prefetch(program: Program, config: PipelineConfig):
    if not any(b.has_prefetch for b in program.blocks):
        yield VerificationError(
            "prefetch-coverage",
            "no global load is marked as prefetch, so nothing is loaded for the next iteration. "
            "Give at least one global load a k_offset other than K_PREV/NONE (K0, K1, K_NEXT).")


def _check_completion(program: Program, config: PipelineConfig):
    if config.depth != 2 or config.cross_stage_rotation:
        return
    bph = config.blocks_per_partition
    for h in range(config.num_partitions):
        if not any(op.stage != h for blk in program.blocks[h * bph:(h + 1) * bph]
                   for op, _ in blk.global_loads()):
            yield VerificationError(
                "completion-coverage",
                f"partition {h} has no completion load (stage != {h}): wait_vm would drain "
                f"nothing, race condition. Give partition {h} a global load into the other "
                f"partition's stage, or set cross_stage_rotation = True.", partition=h)


def _check_stagger_race(program: Program, config: PipelineConfig):
    if (config.depth != 2 or not config.warp_stagger.enabled
            or config.block_sizing.max_globals != 0):
        return
    bph = config.blocks_per_partition
    for h in range(config.num_partitions):
        for pos in range(1, bph - 1):
            i = h * bph + pos
            nxt = program.blocks[i + 1]
            for op, _ in program.blocks[i].global_loads():
                if op.stage != h:
                    continue
                if any(f.stage == op.stage for f in nxt.frags()):
                    yield VerificationError(
                        "warp-stagger-lds-race",
                        f"cross-block LDS race: block {i} prefetch {_op_text(op)} writes stage "
                        f"{op.stage}, which block {i + 1} reads via a fragment load while the "
                        f"other warp group may still be running behind. Reorder the body so this "
                        f"load is not directly followed by a block reading stage {op.stage} "
                        f"(e.g. move it to the partition's last block), cap the global loads "
                        f"per block (-T max_globals=1 where the target has it, else the "
                        "schedule's config(): "
                        'docs/guide/concepts.md, "Block sizing"), or '
                        f"disable warp_stagger in the schedule's config().",
                        block=i, partition=h)


def check_program(program: Program, config: PipelineConfig, lgkm_a: int = 0, lgkm_b: int = 0,
                  wait_lgkm_first: int = 0, wait_vm_last: int = 0) -> list[VerificationError]:
    """Every structural finding, in rule order (empty when the program is sound)."""
    findings: list[VerificationError] = []
    findings += _check_block_count(program, config)
    findings += _check_block_mma(program, config)
    findings += _check_wait_bounds(program, config, lgkm_a, lgkm_b, wait_lgkm_first,
                                   wait_vm_last)
    findings += _check_distribution(program, config)
    findings += _check_stages(program, config)
    findings += _check_prefetch(program, config)
    if len(program.blocks) == config.total_blocks:  # partition slicing needs the full set
        findings += _check_completion(program, config)
        findings += _check_stagger_race(program, config)
    return findings


def verify_program(program: Program, config: PipelineConfig, lgkm_a: int = 0, lgkm_b: int = 0,
                   wait_lgkm_first: int = 0, wait_vm_last: int = 0) -> None:
    """Raise the first VerificationError, if any (the reference's verify_schedule)."""
    findings = check_program(program, config, lgkm_a, lgkm_b, wait_lgkm_first, wait_vm_last)
    if findings:
        raise findings[0]


_DATA_ROLES = (OpRole.COMPUTE, OpRole.FRAGMENT_LOAD, OpRole.GLOBAL_LOAD)


def _data_key(op: Op) -> tuple[int, int, int, int, int]:
    return (op.tag, int(op.role), op.channel, op.stage, op.subtile)


def check_explicit_blocks(program: Program, source: str) -> list[VerificationError]:
    """Explicit op lists (a plugin's ``pipeline_core_explicit_blocks`` answer or a schedule's
    ``build_explicit_blocks``) replace a block's template, so the checks above, which read
    the template's slots, would not see what is emitted.  Each non-empty list must carry
    exactly its block's data ops (the MMA, its fragment loads and global loads, any order):
    a dropped or added one is an error naming ``source``.  Waits and barriers are left to
    the hazard proof, which runs on what is emitted."""
    findings: list[VerificationError] = []
    for i, blk in enumerate(program.blocks):
        ops = program.explicit(i)
        if not ops:
            continue
        want = [blk.mma] + ([blk.fused_mma] if blk.fused_mma.is_present else [])
        want += list(blk.frags()) + [op for op, _ in blk.global_loads()]
        wanted = Counter(_data_key(o) for o in want if o.is_present)
        given = Counter(_data_key(o) for o in ops if o.is_present and o.role in _DATA_ROLES)
        missing = [o for o in want if o.is_present and (wanted - given)[_data_key(o)] > 0]
        extra = [o for o in ops if o.is_present and o.role in _DATA_ROLES
                 and (given - wanted)[_data_key(o)] > 0]
        if missing or extra:
            parts = []
            if missing:
                parts.append("lacks " + ", ".join(f"{_op_text(o)} ({o.role.name})" for o in missing))
            if extra:
                parts.append("adds " + ", ".join(f"{_op_text(o)} ({o.role.name})" for o in extra))
            findings.append(VerificationError(
                "explicit-data-ops",
                f"block {i}'s explicit op list from {source} {' and '.join(parts)}: an explicit "
                "list must emit exactly its block's MMA, fragment loads and global loads (its "
                "waits, barriers and hints are its own); return the missing ops, or an empty "
                "list to keep the template", block=i))
    return findings
