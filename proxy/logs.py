"""One JSON object per log line, for log pipelines. Client keys never reach a log."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO


def _line(level: str, logger: str, message: str) -> dict[str, Any]:
    """The fields every line starts with, whichever way it is written."""
    return {"ts": round(time.time(), 3), "level": level, "logger": logger, "message": message}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = _line(record.levelname.lower(), record.name, record.getMessage())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        for key in ("replica", "host", "path", "error"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            # the last line to read at a glance, the whole traceback to fix the bug with
            out["traceback"] = self.formatException(record.exc_info)
            out["error"] = out["traceback"].splitlines()[-1]
        return json.dumps(out, default=str)


class RequestLog:
    """The one line per request, written straight to the log stream.

    Same JSON shape as the formatter's lines, without the logging machinery in
    between: building and routing a LogRecord costs more than the line itself,
    once per request. Off (``stream`` None) until ``configure`` turns it on at
    info level or below.
    """

    stream: TextIO | None = None

    @classmethod
    def write(cls, fields: dict[str, Any]) -> None:
        stream = cls.stream
        if stream is None:
            return
        line = _line("info", "draftgate.requests", "request")
        line.update(fields)
        stream.write(json.dumps(line, default=str) + "\n")
        stream.flush()


def configure(level: str = "info") -> None:
    # One line per request makes a log record's cost part of every request's. These
    # fields are never printed here, and the Python logging HOWTO ("Optimization")
    # names each of these switches for skipping them.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # no stack walk to find the caller's file and line
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("draftgate")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # uvicorn's own lines (a malformed request, a response the app left unfinished) in the
    # same shape, so that a log pipeline reads every line; serve starts it with log_config=None
    server = logging.getLogger("uvicorn")
    server.handlers[:] = [handler]
    server.propagate = False
    RequestLog.stream = sys.stdout if root.isEnabledFor(logging.INFO) else None
