"""The C versions of the estimate's hot loops, when the package was built with them.

The estimate and its shape digest run on every request, beside parsing its
body, and in Python they cost twice that parse. The extension (sources in
``csrc/``) does four of their loops: sizing tool schemas
(``schema_length.SchemaWalk``), the relevance test
(``relevance.question_unrelated``), reading the conversation
(``estimator._read_conversation``) and writing the text the shape digest
hashes (``learner.shape_text``). Each does the common cases and hands back
(None) what it cannot say exactly as the Python would, anything the reasons must
mention included; the Python modules stay the definition, and
``tests/test_speedups.py`` holds the two to the same answers. Without a C
compiler at install time the extension is absent and the Python does
everything, with the same answers, slower.
"""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from policy.structure import _speedups as native
except ImportError:  # installed without a C compiler
    native = None
