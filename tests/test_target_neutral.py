"""The core owns no GPU family's facts: they come from the target's plugin (docs/guide/architecture.md, "Architecture")."""
from __future__ import annotations

import re
from pathlib import Path

import pipeline_core

#: words that name one GPU family's parts or instructions
FAMILY_WORDS = re.compile(r"mi355x|cdna|gfx9\d*|s_waitcnt|s_barrier|s_setprio", re.IGNORECASE)


def test_no_core_module_names_a_gpu_family():
    root = Path(pipeline_core.__file__).parent
    hits = [f"{path.relative_to(root)}:{n}: {line.strip()}"
            for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if FAMILY_WORDS.search(line)]
    assert hits == []


def test_amd_only_facts_live_in_the_amd_plugin():
    import pipeline_core.config as config
    import pipeline_core.edges as edges
    for gone in ("KernelGeometry", "derive_safe_max_globals"):
        assert not hasattr(config, gone)
    for gone in ("derive_cross_stage_rotation_edges", "filter_spurious_cross_stage_flow"):
        assert not hasattr(edges, gone)
