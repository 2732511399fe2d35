"""Pure decision logic for draftgate: the Draft Law, request structure, calibration, the gate.

Nothing in this package performs I/O or imports a web framework, so it can be
used from a notebook or tested with hypothesis alone.
"""
