"""Progress bars: redrawn in place on a terminal, a line at each quarter in a log."""

from __future__ import annotations

import io

import pytest

from draftgate.progress import draw


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_at_each_quarter_and_no_carriage_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    for done in range(131):
        draw("  replay ", done, 130, "requests")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split("] ")[1] for line in lines] == ["0/130 requests", "33/130 requests", "65/130 requests",
                                                       "98/130 requests", "130/130 requests"]
    # a second run under the same label starts afresh
    for done in (0, 1, 2):
        draw("  replay ", done, 2)
    assert log.getvalue().count("\n") == 5 + 3


def test_a_terminal_gets_one_bar_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    for done in range(11):
        draw("", done, 10)
    assert screen.getvalue().count("\r") == 11 and screen.getvalue().count("\n") == 1
    assert screen.getvalue().endswith("[##############################] 10/10 \n")
