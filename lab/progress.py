"""One-line progress bars on stderr, redrawn in place (calibration runs, demo replays)."""

from __future__ import annotations

import sys

_WIDTH = 30


def draw(prefix: str, done: int, total: int, suffix: str = "") -> None:
    filled = int(_WIDTH * done / max(1, total))
    sys.stderr.write(f"\r{prefix}[{'#' * filled}{'.' * (_WIDTH - filled)}] {done}/{total} {suffix}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
