"""The log lines: what docs/logs.md promises is what the proxy writes."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time
from pathlib import Path

import httpx
import pytest

from draftgate.proxy.logs import JsonFormatter, RequestLog
from tests.proxy_harness import stack, wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "logs.md"
MODEL = "Qwen/Qwen3-32B"


def documented_request_fields() -> set[str]:
    """Field names in the first column of the request line's table."""
    section = DOC.read_text().split("## The request line", 1)[1].split("Example", 1)[0]
    return {name for row in re.findall(r"^\| (.+?) \|", section, re.M) for name in re.findall(r"`(\w+)`", row)}


@pytest.fixture
def request_log() -> io.StringIO:
    """The per-request lines, captured in place of standard output."""
    before, RequestLog.stream = RequestLog.stream, io.StringIO()
    try:
        yield RequestLog.stream
    finally:
        RequestLog.stream = before


def test_the_request_line_has_the_documented_fields_and_names_the_response(request_log: io.StringIO) -> None:
    with stack(31, log_requests=True) as st:
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
        answer = httpx.post(f"{st.proxy.url}/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": [tool],
            "tool_choice": "required", "temperature": 0}, headers={"x-request-id": "lb-7f3a"})
        assert answer.status_code == 200
        assert wait_until(lambda: request_log.getvalue().endswith("\n")), "no line: it is written after the answer"
        (line,) = [json.loads(x) for x in request_log.getvalue().splitlines()]
        route = answer.headers["x-draftgate-route"]
    documented = documented_request_fields()
    common = {"ts", "level", "logger", "message", "event"}
    assert set(line) - common <= documented, set(line) - common - documented
    # the optional ones are those a completed answer from a plain pool may lack
    assert documented - set(line) <= {"tau_observed", "saving_modelled"}, documented - set(line)
    assert line["id"] == answer.json()["id"] and line["status"] == 200 and line["route"] == route
    # the caller's X-Request-Id reached vLLM, which named the response after it, and the line
    assert line["request_id"] == "lb-7f3a" and line["id"] == "chatcmpl-lb-7f3a"
    assert line["replica"] == (st.on.url if route == "spec-on" else st.off.url)


def test_an_exception_is_logged_with_its_whole_traceback() -> None:
    try:
        raise ZeroDivisionError("a bug in the gate")
    except ZeroDivisionError:
        record = logging.LogRecord("draftgate.proxy", logging.ERROR, __file__, 1, "the gate failed", None,
                                   exc_info=sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert line["error"] == "ZeroDivisionError: a bug in the gate"
    assert line["traceback"].startswith("Traceback") and "test_an_exception_is_logged" in line["traceback"]


def test_a_pool_streaming_without_usage_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    """Without --enable-force-include-usage a stream's output is measured from its
    characters: the operator is told which pool lacks the flag, once."""
    prose = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8,
             "stream": True}
    with caplog.at_level(logging.WARNING, logger="draftgate"), \
            stack(32, off_kwargs={"force_include_usage": False}) as st:

        def told() -> list[str]:
            return [r.getMessage() for r in caplog.records if "streams without usage" in r.getMessage()]

        def stream(body: dict[str, object]) -> None:
            r = httpx.post(f"{st.proxy.url}/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200 and r.headers["x-draftgate-route"] == "spec-off"

        stream({**prose, "stream_options": {"include_usage": True}})  # the client asked: usage came
        time.sleep(0.2)  # recorded as the stream ends
        assert told() == []
        stream(prose)
        stream(prose)
        assert wait_until(lambda: len(told()) >= 1)
        time.sleep(0.2)
        assert len(told()) == 1 and told()[0].startswith("pool spec-off ")
