"""``python -m pipeline_core.check --input FILE``: the checker without the main CLI."""
from __future__ import annotations

import sys

from pipeline_core.check.cli import main

sys.exit(main())
