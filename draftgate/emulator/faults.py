"""Faults an emulated server can be told to show, for reliability tests.

Set at start (``--faults JSON``) or at run time (``POST /debug/faults``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send


class Faults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refuse_connections: bool = Field(False, description="stop accepting connections (one-way)")
    health_503: bool = Field(False, description="/health answers 503, as a dead engine does")
    health_delay: float = Field(0.0, ge=0.0, description="seconds /health takes to answer, as a busy server's may")
    metrics_delay: float = Field(0.0, ge=0.0, description="seconds /metrics takes to answer, as a busy server's may")
    error_status: int | None = Field(None, ge=400, le=599, description="answer completions with this status")
    error_rate: float = Field(1.0, ge=0.0, le=1.0, description="share of requests error_status applies to")
    first_byte_delay: float = Field(0.0, ge=0.0, description="seconds before any byte of a completion")
    linger_after_done: float = Field(0.0, ge=0.0, description="seconds a stream stays open after its [DONE], "
                                                             "as when the last chunk and the close arrive apart")
    die_after_tokens: int | None = Field(None, ge=0, description="drop a stream after this many tokens")
    die_before_first_event: bool = Field(False, description="drop a stream after its headers, as in prefill")
    cut_answer_short: bool = Field(False, description="drop the connection halfway through a non-streamed "
                                                      "answer (completions, chat, /tokenize)")
    malformed_chunk_after_tokens: int | None = Field(None, ge=0, description="send a broken SSE chunk")
    kv_usage: float | None = Field(None, ge=0.0, le=1.0, description="report this KV-cache usage in /metrics, "
                                                                     "as a server whose cache is that full does")
    mismatch_rate: float = Field(0.0, ge=0.0, le=1.0, description="alter output text (breaks losslessness)")


class CutShort(JSONResponse):
    """An answer whose connection drops halfway through its body (``cut_answer_short``),
    as when a server dies while writing it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body[: len(self.body) // 2], "more_body": True})
        raise ConnectionAbortedError("injected fault: the server dies while writing an answer")
