"""Run by ``tox -e wheels`` before the suite: every package must come from an installed
wheel (site-packages), none from this checkout, or the run would prove nothing."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

PACKAGES = ("pipeline_core", "pipeline_core_amd_mi355x", "pipeline_core_schedules_pingpong",
            "pipeline_core_schedules_4wave", "pipeline_core_schedules_matmul_grid",
            "pipeline_core_nvidia_h100", "pipeline_core_schedules_attention",
            "pipeline_core_family_gemv", "pipeline_core_target_a100", "hello_schedule")


def main() -> int:
    wrong = []
    for name in PACKAGES:
        where = Path(importlib.import_module(name).__file__ or "").resolve()
        if "site-packages" not in where.parts:  # an editable install or the source tree
            wrong.append(f"{name} imported from {where}")
    for line in wrong:
        print(f"error: {line}, not from an installed wheel", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
