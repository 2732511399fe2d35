"""The C versions of the estimate's two hot loops, when the package was built with them.

Sizing tool schemas and the relevance test run on every request with tools,
and in Python they cost more than parsing the body. ``_speedups.c`` does the
common cases and hands back what it cannot say exactly as the Python would
(anything the reasons must mention); the Python modules stay the definition.
Without a C compiler at install time the extension is absent and the Python
does everything, with the same answers.
"""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from policy.structure import _speedups as native
except ImportError:  # installed without a C compiler
    native = None
