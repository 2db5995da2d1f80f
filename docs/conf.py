"""Sphinx configuration of the pipeline-core user guide (``tox -e docs``).

Sphinx with MyST: the pages stay Markdown (as docs/document-format.md already is), autodoc
generates the hook reference from the hookspecs' docstrings, and a local extension
(``_ext/cli_reference.py``) generates the CLI reference from the argparse parser, so
neither can drift from the code.  Nothing is fetched: no intersphinx, no remote theme.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "pipeline-core"
extensions = ["myst_parser", "sphinx.ext.autodoc", "cli_reference"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "design/*", "pingpong_timeline.png"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "none"
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
