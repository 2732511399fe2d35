"""What happened to one request: its response's structure, acceptance and timing.

Fed chunk by chunk while a stream is relayed (or once with a whole body), and
finished when the response ends: the realised structure trains the learner,
the conversation's placement is remembered for affinity, and one structured
log line records the decision and its outcome.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from draftgate.policy.copying import tau_over_every_round
from draftgate.policy.structure import ObservedStructure, TextParts, measure_parts
from draftgate.proxy.large_answers import (
    LARGE_ANSWER_BYTES,
    answer_skeleton,
    answer_skeleton_in_turns,
    responses_answer_in_turns,
)


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON, or None when it is not JSON; never raises.

    Reading a backend's answer (a body or one event's data) is a side job of
    relaying it, as is reading the model a passed-through request names: odd
    bytes (broken UTF-8, an integer longer than Python converts, nesting deeper
    than the recursion limit) must cost that reading, never the response.
    """
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None


@dataclass(slots=True)
class Observation:
    started: float = field(default_factory=time.perf_counter)
    parts: TextParts = field(default_factory=TextParts)
    spec: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    first_byte_at: float | None = None
    finished_at: float | None = None
    complete: bool = False
    failovers: int = 0
    # the response's id, as the client sees it; vLLM's request id (its logs name it)
    response_id: str | None = None
    # the X-Request-Id the client (or its load balancer) sent: finds in their logs a
    # request that got no response id (shed, cut, the client gone)
    request_id: str | None = None
    # the answer's objects as chat completions, for an API that shapes them otherwise (/v1/responses)
    reshape: Callable[[Any], Any] | None = None
    # the data of the event that ended a Responses stream (the whole response again), kept
    # to be read once the stream's end has gone to the client (``feed_answer``)
    unread_answer: bytes | None = None

    def feed(self, payload: Any) -> None:
        """A parsed SSE chunk or a whole non-streamed body."""
        if self.reshape is not None:
            payload = self.reshape(payload)
        if not isinstance(payload, dict):
            return
        if self.response_id is None and isinstance(rid := payload.get("id"), str):
            self.response_id = rid[:200]
        self.parts.add_chunk(payload)
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
        metrics = payload.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.spec = metrics["speculative_decoding"]

    def feed_bytes(self, raw: bytes) -> Any:
        """One event's data of a chat or completions stream, or a small body; what
        was read of it is returned. A large one (logprobs, mostly) is read in part
        (``answer_skeleton``): parsed whole, it would stall every stream. A whole
        answer goes through ``feed_answer``."""
        payload = parse_json(raw) if len(raw) <= LARGE_ANSWER_BYTES else answer_skeleton(raw)
        self.feed(payload)
        return payload

    async def feed_answer(self, raw: bytes) -> None:
        """A whole answer: a non-streamed body, or the data of the event that ends a
        Responses stream (the whole response again).

        A large one is read in part, in turns (``proxy/large_answers.py``), the loop
        serving the other streams between them: at 8k tokens with ``top_logprobs``
        20, a chat answer takes about 12 ms to read, and a Responses answer, which
        keeps its logprobs beside its text and is parsed but for them, 0.1-0.2 s.
        """
        if len(raw) <= LARGE_ANSWER_BYTES:
            self.feed_bytes(raw)
        elif self.reshape is None:
            self.feed(await answer_skeleton_in_turns(raw))
        elif (payload := await responses_answer_in_turns(raw)) is not None:
            self.feed(payload)
        else:
            # logprobs of a shape unknown: only the id is taken, to know where the response is stored
            skeleton = await answer_skeleton_in_turns(raw)
            if skeleton is not None and isinstance(rid := skeleton.get("id"), str):
                self.response_id = rid[:200]

    async def feed_unread_answer(self) -> None:
        """The answer a Responses stream ended with (``unread_answer``), if it has not been read."""
        raw, self.unread_answer = self.unread_answer, None
        if raw is not None:
            await self.feed_answer(raw)

    def measured(self, body: Any, legacy_guided_honoured: bool = False,
                 reasoning_hidden: bool = False) -> ObservedStructure:
        """What the answer held, by class (see ``measure_parts`` for the two switches)."""
        return measure_parts(body, self.parts, legacy_guided_honoured=legacy_guided_honoured,
                             reasoning_hidden=reasoning_hidden)

    @property
    def observed_tau(self) -> float | None:
        """Accepted draft tokens per round that drafted, as vLLM's per-request metrics count them."""
        if not self.spec:
            return None
        steps = self.spec.get("num_spec_steps")
        accepted = self.spec.get("num_accepted_draft_tokens")
        if isinstance(steps, int) and steps > 0 and isinstance(accepted, (int, float)):
            return accepted / steps
        return None

    def tau_over_every_round(self, tokens: float) -> float | None:
        """Accepted draft tokens per round, rounds that drafted nothing counted, as a lookup
        (ngram, suffix) is priced (``copying.tau_over_every_round``)."""
        accepted = self.spec.get("num_accepted_draft_tokens") if self.spec else None
        if isinstance(accepted, (int, float)) and not isinstance(accepted, bool):
            return tau_over_every_round(accepted, tokens)
        return None
