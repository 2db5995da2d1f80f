"""Sphinx configuration of the pipeline-core user guide (``tox -e docs``).

Sphinx with MyST: the pages stay Markdown (as docs/document-format.md already is), autodoc
generates the hook reference from the hookspecs' docstrings, and sphinx-argparse-cli
generates the CLI reference from the argparse parser (one anchor per option), so neither
can drift from the code.  Nothing is fetched: no intersphinx, no remote theme.
"""
project = "pipeline-core"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx_argparse_cli"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "design/*", "pingpong_timeline.png"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "none"
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["myst.xref_missing"]
