"""The gated endpoints, each a small strategy: how to check its body, what the
gate reads of it, how its answer is measured, how its stream reports an error.

The request's lifecycle (``proxy/exchange.py``) and the routes (``proxy/app.py``)
are the same for every endpoint; what differs between them lives here, so the
shared path asks an endpoint rather than testing its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from draftgate.policy.structure import chat_completion, chat_view, messages_chat_chunk, messages_chat_view
from draftgate.policy.vllm_fields import as_bool
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.errors import (
    ErrorShape,
    anthropic_error,
    anthropic_stream_error_event,
    openai_error,
    stream_error_event,
)
from draftgate.proxy.request_body import BadRequest
from draftgate.proxy.stored_responses import CREATE_PATH, continued_response_id, stored


class Endpoint:
    """A gated endpoint; this base is the Chat Completions API."""

    name = "chat"  # the ``endpoint`` label of metrics and logs
    path = "/v1/chat/completions"
    estimated_as: Literal["chat", "completions"] = "chat"  # the estimator's reading of the gate's view
    # the answer's objects as chat completions, for an API that shapes them otherwise
    reshape: Callable[[Any], Any] | None = None
    # how the proxy writes the errors it answers itself on this route
    error: ErrorShape = staticmethod(openai_error)

    def check(self, body: Any) -> None:
        """Raise BadRequest for a body the gate cannot plan for."""
        if not isinstance(body, dict):
            raise BadRequest(400, "request body must be a JSON object")
        self.check_fields(body)
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise BadRequest(400, "'model' must be a string", param="model")

    def check_fields(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise BadRequest(400, "'messages' must be a list of message objects", param="messages")
        if not messages:
            raise BadRequest(400, "'messages' must not be empty", param="messages")

    def gated_by(self, settings: ProxySettings) -> bool:
        """Whether the configuration gates this endpoint (else it passes through)."""
        return True

    def gate_view(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body as the gate reads it."""
        return body

    def not_gated(self, body: dict[str, Any]) -> str | None:
        """Why a request to this endpoint cannot be gated and must pass through, or None."""
        return None

    def stores_answer(self, body: dict[str, Any]) -> bool:
        """Whether the replica that answers keeps the answer, for follow-ups to find."""
        return False

    def stream_error(self, status: int, message: str, events_relayed: int) -> bytes:
        """The event that ends a stream which failed after ``events_relayed`` events."""
        return stream_error_event(status, message)


class CompletionsEndpoint(Endpoint):
    name = "completions"
    path = "/v1/completions"
    estimated_as = "completions"

    def check_fields(self, body: dict[str, Any]) -> None:
        if "prompt" not in body:
            raise BadRequest(400, "'prompt' is required", param="prompt")


class ResponsesEndpoint(Endpoint):
    """The Responses API, gated as the chat completion it amounts to."""

    name = "responses"
    path = CREATE_PATH
    reshape = staticmethod(chat_completion)

    def check_fields(self, body: dict[str, Any]) -> None:
        if not isinstance(body.get("input"), (str, list)):
            raise BadRequest(400, "'input' must be a string or a list of input items", param="input")

    def gated_by(self, settings: ProxySettings) -> bool:
        return settings.gate_responses

    def gate_view(self, body: dict[str, Any]) -> dict[str, Any]:
        return chat_view(body)

    def not_gated(self, body: dict[str, Any]) -> str | None:
        # where a follow-up goes is decided by the replica that holds the response it
        # continues; a background answer is fetched later, past the proxy's sight
        if continued_response_id(body):
            return "continues_stored_response"
        if as_bool(body.get("background")):
            return "background"
        return None

    def stores_answer(self, body: dict[str, Any]) -> bool:
        return stored(body)

    def stream_error(self, status: int, message: str, events_relayed: int) -> bytes:
        # its events are numbered: the error is the next in the sequence
        return stream_error_event(status, message, events_relayed)


class MessagesEndpoint(Endpoint):
    """Anthropic's Messages API, gated as the chat completion vLLM makes of it
    (``policy/structure/messages_api.py``); its errors in Anthropic's shape."""

    name = "messages"
    path = "/v1/messages"
    reshape = staticmethod(messages_chat_chunk)
    error = staticmethod(anthropic_error)

    def check_fields(self, body: dict[str, Any]) -> None:
        super().check_fields(body)
        cap = body.get("max_tokens")
        # required here (vLLM refuses a request without it too): it bounds the answer the gate prices
        if not isinstance(cap, int) or isinstance(cap, bool) or cap <= 0:
            raise BadRequest(400, "'max_tokens' must be a positive integer", param="max_tokens")

    def gate_view(self, body: dict[str, Any]) -> dict[str, Any]:
        return messages_chat_view(body)

    def stream_error(self, status: int, message: str, events_relayed: int) -> bytes:
        return anthropic_stream_error_event(status, message)


CHAT = Endpoint()
COMPLETIONS = CompletionsEndpoint()
RESPONSES = ResponsesEndpoint()
MESSAGES = MessagesEndpoint()
GATED: dict[str, Endpoint] = {e.path: e for e in (CHAT, COMPLETIONS, RESPONSES, MESSAGES)}
BY_NAME: dict[str, Endpoint] = {e.name: e for e in (CHAT, COMPLETIONS, RESPONSES, MESSAGES)}


def endpoint_of_body(body: dict[str, Any], completions: bool = False) -> Endpoint:
    """The endpoint a body sent to be explained is for, told from its own fields:
    such a request has no path to tell it. A Messages request is told by what only it
    has: ``system``, ``stop_sequences``, ``output_config``, tools with an ``input_schema``,
    a ``tool_choice`` object with a ``type``, or content blocks of calls, results or
    thinking; one with none of these reads the same as a chat request."""
    if completions or ("prompt" in body and "messages" not in body):
        return COMPLETIONS
    if "input" in body and "messages" not in body:
        return RESPONSES
    if _looks_like_messages(body):
        return MESSAGES
    return CHAT


def _looks_like_messages(body: dict[str, Any]) -> bool:
    if "system" in body or "stop_sequences" in body or "output_config" in body:
        return True
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return True
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool", "auto", "none"):
        return True
    messages = body.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, dict) and isinstance(m.get("content"), list)
        and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result", "thinking") for b in m["content"])
        for m in messages)


def error_shape_of(path: str) -> ErrorShape:
    """The error shape of a route the proxy passes on: Anthropic's under ``/v1/messages``
    (``count_tokens``), OpenAI's elsewhere."""
    return anthropic_error if path == MESSAGES.path or path.startswith(MESSAGES.path + "/") else openai_error
