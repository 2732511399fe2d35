"""A short run of ``bench.soak``: mixed agent traffic through ``draftgate serve`` while
each fault the emulator can show, and a SIGKILL, hits one replica after another.
No request may be lost, and the proxy must count every one and hold none after."""

from __future__ import annotations

import pytest

from bench.soak import FAULTS, run


def test_no_request_is_lost_while_replicas_fail_one_way_after_another(capsys: pytest.CaptureFixture[str]) -> None:
    period = 1.5
    status = run(seconds=period * len(FAULTS) + 1, rate=20.0, period=period, seed=4)
    report = capsys.readouterr().out
    assert status == 0, report
    for name, _ in FAULTS[1:]:
        assert name in report, f"{name!r} never ran:\n{report}"
