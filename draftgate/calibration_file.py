"""Calibration files on disk: the I/O around policy/calibration, which stays pure."""

from __future__ import annotations

from pathlib import Path

from draftgate.policy.calibration import (
    Calibration,
    CalibrationError,
    calibration_from_yaml,
    dump_calibration,
)


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file, failing with the offending field named."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CalibrationError(f"{path}: cannot read calibration file: {exc.strerror}") from None
    return calibration_from_yaml(text, origin=str(path))


def save_calibration(calibration: Calibration, path: str | Path) -> None:
    Path(path).write_text(dump_calibration(calibration))
