"""An operator's own traffic, from a file of JSON lines, as the verdict replays its own data.

Each line is one request: ``{"request": <body>, "session": "<id>", "endpoint":
"/v1/chat/completions" | "/v1/responses" | "/v1/messages"}`` (``session`` and
``endpoint`` optional), or a Chat Completions body alone. The lines of one
session are its turns, in order: each is sent when the previous is answered,
plus a think time. A Responses or Messages request is replayed as the chat
completion vLLM turns it into. The proxy writes such a file from what it
serves (``record_traffic``).

Each item (a lone request, or a session) takes the workload the verdict would
give it: calls to tools over several turns are an agent session, in one a tool call;
thinking asked for is reasoning; several turns of prose a conversation; the
rest chat. Items fall in the calibration or the verdict part by their id, as
the built-in data does (``mix.split_of``), and the model each names is the
emulated target's.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from draftgate.emulator.vllm_request import messages_as_chat, messages_problem, responses_as_chat
from draftgate.workloads import mix

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


class TrafficFileError(ValueError):
    """A traffic file that cannot be replayed: unreadable, a broken line, or no usable request."""


def items(path: str, split: mix.Split) -> dict[str, list[mix.Item]]:
    """The file's items of ``split``, by workload, in the order the file first names them."""
    out: dict[str, list[mix.Item]] = {workload: [] for workload in mix.WORKLOADS}
    for item in _read(path):
        if mix.split_of(item.id) == split:
            out[item.workload].append(item)
    return out


def shares(path: str) -> dict[str, float]:
    """Each workload's share of the file's items: the mix it is replayed in unless told otherwise."""
    found = _read(path)
    return {workload: sum(item.workload == workload for item in found) / len(found) for workload in mix.WORKLOADS}


def _read(path: str) -> tuple[mix.Item, ...]:
    """The file's items, read once for as long as the file is unchanged."""
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise TrafficFileError(f"cannot read {path}: {exc.strerror}") from None
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[mix.Item, ...]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TrafficFileError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    sessions: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        session, body = _request(line, number)
        sessions.setdefault(session if session is not None else f"line {number}", []).append(
            dict(body, model=mix.MODEL, seed=body.get("seed", number)))
    if not sessions:
        raise TrafficFileError(f"{path} holds no request")
    found = tuple(mix.Item(f"traffic:{name}", workload_of(turns), tuple(turns)) for name, turns in sessions.items())
    for split in ("calibration", "verdict"):
        if not any(mix.split_of(item.id) == split for item in found):
            raise TrafficFileError(f"{path}: none of its {len(found)} requests or sessions falls in the {split} "
                                   "part; the verdict needs both (a few dozen sessions or requests at least)")
    return found


def _request(line: str, number: int) -> tuple[str | None, dict[str, Any]]:
    """A line's session and its request as a chat completion; a broken line is refused by number."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TrafficFileError(f"line {number} is not JSON: {exc.msg}") from None
    if not isinstance(record, dict):
        raise TrafficFileError(f"line {number} is not a JSON object")
    if "request" not in record:
        record = {"request": record}
    body, session, endpoint = record["request"], record.get("session"), record.get("endpoint", ENDPOINTS[0])
    if not isinstance(body, dict):
        raise TrafficFileError(f"line {number}: request is not a JSON object")
    if session is not None and not isinstance(session, (str, int)):
        raise TrafficFileError(f"line {number}: session is not a string")
    if endpoint not in ENDPOINTS:
        raise TrafficFileError(f"line {number}: endpoint {endpoint!r} is not one of {', '.join(ENDPOINTS)}")
    if endpoint == "/v1/responses":
        body = responses_as_chat(body)
    elif endpoint == "/v1/messages":
        problem = messages_problem(body)
        if problem is not None:
            raise TrafficFileError(f"line {number}: not a Messages request: {problem[0]}")
        body = messages_as_chat(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise TrafficFileError(f"line {number}: the request has no messages to answer")
    return (None if session is None else str(session)), body


def workload_of(turns: list[dict[str, Any]]) -> str:
    """The verdict's workload an item of ``turns`` (chat completion bodies) belongs to."""
    last = turns[-1]
    if last.get("tools"):
        return "agent_session" if len(turns) > 1 else "tool_call"
    template = last.get("chat_template_kwargs")
    if (isinstance(template, dict) and template.get("enable_thinking")) or last.get("reasoning_effort"):
        return "reasoning"
    return "conversation" if len(turns) > 1 else "chat"
