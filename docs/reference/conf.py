"""Sphinx configuration of the API reference, generated from the docstrings (autodoc).

Build (the `docs` extra; .ci/run does this, warnings are errors):
    sphinx-build -W --keep-going -b html docs/reference /tmp/pybridge-api
It documents the pybridge that Python imports: the installed package from a folder outside the
checkout (sphinx-build, unlike `python -m sphinx`, does not put the current folder on sys.path).
"""

import pybridge

project = "pybridge"
copyright = "pybridge contributors"
version = release = pybridge.__version__
extensions = ["sphinx.ext.autodoc"]
# Each package's __all__ decides what is documented; members keep the source order.
autodoc_default_options = {"members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "description"
html_theme = "alabaster"
exclude_patterns = ["_build"]
