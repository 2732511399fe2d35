"""One-line progress bars on stderr (calibration runs, evaluation replays).

On a terminal the bar is redrawn in place. Anywhere else (a CI log, ``| tee``)
a carriage return does not go back, so every redraw would pile up on one
line: there the bar is written as a line of its own at each quarter instead.
"""

from __future__ import annotations

import sys

_WIDTH = 30
_last_quarter: dict[str, int] = {}


def draw(prefix: str, done: int, total: int, suffix: str = "") -> None:
    stream = sys.stderr
    filled = int(_WIDTH * done / max(1, total))
    bar = f"{prefix}[{'#' * filled}{'.' * (_WIDTH - filled)}] {done}/{total} {suffix}"
    if stream.isatty():
        stream.write(f"\r{bar}" + ("\n" if done >= total else ""))
    else:
        quarter = min(4, 4 * done // max(1, total))
        if prefix not in _last_quarter or quarter > _last_quarter[prefix]:
            stream.write(bar.rstrip() + "\n")
        _last_quarter[prefix] = quarter
        if done >= total:
            del _last_quarter[prefix]
    stream.flush()
