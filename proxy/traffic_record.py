"""The requests the proxy serves, written as a traffic file that ``draftgate evaluate --traffic`` replays.

One JSON line a request: ``{"request": <body as the client sent it>,
"endpoint": <its path>, "session": <id>}``, ``session`` left out of a request
that starts no conversation anyone continued. A session is what the client
names as one (``prompt_cache_key``, ``session_id``, ``user``), else the
conversation a request's messages continue: requests whose messages agree up
to the first user turn are one session's turns. Sampling takes sessions whole.
With ``redact``, every text is replaced by filler of its length (tool-call
arguments keep their keys), so the file says how long and how structured the
traffic is and nothing of what it says.
"""

from __future__ import annotations

import json
import logging
import random
import zlib
from typing import IO, Any

from draftgate.proxy.config import RecordTraffic
from draftgate.proxy.endpoints import BY_NAME
from draftgate.proxy.planner import RequestPlan

log = logging.getLogger("draftgate.traffic")

REPLAYED = ("/v1/chat/completions", "/v1/responses", "/v1/messages")  # the endpoints a traffic file holds
# keys whose string values are what was said: replaced under ``redact``
_SAID = frozenset({"content", "text", "input", "instructions", "system", "prompt", "arguments", "description",
                   "thinking", "reasoning_content", "output"})


class TrafficRecord:
    """The open file and what goes into it; the proxy opens one at start and closes it at shutdown."""

    def __init__(self, settings: RecordTraffic) -> None:
        self.settings = settings
        settings.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = settings.path.open("a", encoding="utf-8")
        self._lone = random.Random()

    def write(self, plan: RequestPlan, sent: dict[str, Any]) -> None:
        """The request ``sent`` (as the client sent it; ``plan`` the gate's view of it), if its endpoint
        replays and its session is sampled; a failed write is logged, never raised."""
        path = BY_NAME[plan.endpoint].path
        if self._file is None or path not in REPLAYED:
            return
        session = session_of(plan)
        sampled = (zlib.crc32(session.encode()) % 1_000_000 < self.settings.sample * 1_000_000 if session
                   else self._lone.random() < self.settings.sample)
        if not sampled:
            return
        line: dict[str, Any] = {"request": redacted(sent) if self.settings.redact else sent, "endpoint": path}
        if session:
            line["session"] = session
        try:
            self._file.write(json.dumps(line, ensure_ascii=False) + "\n")
            self._file.flush()
        except (OSError, TypeError, ValueError) as exc:
            log.warning("recording traffic to %s failed: %s", self.settings.path, exc)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def session_of(plan: RequestPlan) -> str | None:
    """The session ``plan``'s request belongs to: the client's, else its conversation up to the first
    user turn (None for a body with no messages). ``plan.body`` is the gate's chat view of the request,
    whatever its endpoint."""
    conversation = plan.conversation
    if conversation.session is not None:
        return f"c{conversation.session & 0xFFFFFFFFFFFF:012x}"
    messages = plan.body.get("messages")
    if not isinstance(messages, list) or not conversation.chain:
        return None
    first_user = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), 0)
    return f"m{conversation.chain[min(first_user, len(conversation.chain) - 1)][0] & 0xFFFFFFFFFFFF:012x}"


def redacted(value: Any, key: str = "", every: bool = False) -> Any:
    """``value`` with every text said replaced by filler of its length (``every``: every string); keys,
    roles, names, numbers and schemas' structure kept. Tool-call arguments are JSON: their values are
    redacted, their keys kept."""
    if isinstance(value, dict):
        return {k: redacted(v, k, every) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, key, every) for v in value]
    if isinstance(value, str) and (every or key in _SAID):
        if key == "arguments" and not every:
            try:
                return json.dumps(redacted(json.loads(value), every=True))
            except json.JSONDecodeError:
                pass
        return _filler(value)
    return value


def _filler(text: str) -> str:
    """As many characters as ``text``, its spacing kept, every word made of ``x``."""
    return "".join(c if c.isspace() else "x" for c in text)
