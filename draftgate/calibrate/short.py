"""A short calibration of one speculation pool against a plain one, for the demo and the evaluation."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draftgate.calibrate import protocol
from draftgate.calibration_file import save_calibration

ARMS = ("A", "B", "C", "D")


def short_calibration(on: str, off: str, out: Path, model: str, requests: int, gamma: int = 8,
                      workloads: dict[str, list[dict[str, Any]]] | None = None,
                      progress: Callable[[int, int, str], None] | None = None,
                      concurrency: tuple[int, ...] = (1, 8), others: tuple[protocol.Pool, ...] = ()) -> protocol.Fit:
    """Run the four arms at each of ``concurrency``, greedy, and write the fitted calibration to ``out``.

    ``workloads``: the arms' requests (the committed arms where not given). ``others``: more
    speculation pools beside the draft-model pool ``on`` (named spec-on), each fitted on its own."""
    given = workloads or {}
    arms = {arm: given.get(arm) or protocol.load_arm(arm) for arm in ARMS}
    plan = protocol.CalibrationPlan(model, [protocol.Pool("spec-on", on, gamma), *others],
                                    protocol.Pool("spec-off", off, 0), list(ARMS), list(concurrency), ["greedy"],
                                    requests, None, arms)
    with tempfile.TemporaryDirectory() as tmp:
        state = protocol.execute(plan, Path(tmp) / "state.jsonl", progress)
        fitted = protocol.fit(plan, state, 0.6)
    save_calibration(fitted.calibration, out)
    return fitted
