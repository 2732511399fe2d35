"""Who sent a request, and what that lets it choose of the gate.

A configured key (``api_keys``) may carry a label for the metrics, a mode, and
latency targets of its own; and it may be allowed to choose the mode request by
request, with the ``x-draftgate-mode`` header or, for clients that cannot set
headers, a ``draftgate_mode`` field in the body (``extra_body``). A proxy with
no keys is open, and honours that choice from everyone.

What the gate then does for the request is the model's policy with the key's
settings over it, and the request's own choice over both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from starlette.datastructures import Headers

from draftgate.policy.gate import GatePolicy, Mode
from draftgate.proxy.auth import bearer_token, matching_key
from draftgate.proxy.config import ApiKey
from draftgate.proxy.request_body import BadRequest

MODE_HEADER = "x-draftgate-mode"
MODE_FIELD = "draftgate_mode"
_MODES: dict[str, Mode] = {"auto": "auto", "on": "always_on", "off": "always_off"}
OPEN = ""  # the key label of requests to a proxy without keys


@dataclass(frozen=True, slots=True)
class Caller:
    """The settings a request's key brings (none, on an open proxy), and the mode it asked for."""

    label: str = OPEN
    mode: Mode | None = None
    tpot_target: float | None = None  # seconds
    ttft_target: float | None = None
    chose_mode: bool = False  # the request chose ``mode`` itself

    def policy(self, base: GatePolicy) -> GatePolicy:
        """``base``, the model's policy, with this caller's settings over it."""
        changes: dict[str, Any] = {}
        if self.mode is not None:
            changes["mode"] = self.mode
        if self.tpot_target is not None:
            changes["tpot_target"] = self.tpot_target
        if self.ttft_target is not None:
            changes["ttft_target"] = self.ttft_target
        return replace(base, **changes) if changes else base


def authenticated_key(headers: Headers, keys: Sequence[ApiKey]) -> ApiKey | None:
    """The configured key a request carries, as ``Authorization: Bearer`` or as Anthropic's
    ``x-api-key``; raises 401 when keys are configured and it carries none of them."""
    token = bearer_token(headers.get("authorization", "")) or headers.get("x-api-key") or None
    key = matching_key(token, keys)
    if key is None:
        raise BadRequest(401, "invalid or missing API key", code="invalid_api_key")
    return key


def caller_of(key: ApiKey | None, headers: Headers, body: Any) -> Caller:
    """Who sent a request with ``headers`` and ``body`` under ``key`` (None: the proxy is open).

    Raises 400 for a mode that is not ``auto``, ``on`` or ``off``, and 403 when the
    key may not choose one."""
    asked = headers.get(MODE_HEADER)
    if asked is None and isinstance(body, dict) and MODE_FIELD in body:
        asked = body[MODE_FIELD]
    mode: Mode | None = None
    if asked is not None:
        mode = _MODES.get(asked.strip().lower()) if isinstance(asked, str) else None
        if mode is None:
            raise BadRequest(400, f"{MODE_HEADER} must be auto, on or off, got {str(asked)[:40]!r}",
                             param=MODE_FIELD if MODE_HEADER not in headers else None)
        if key is not None and not key.allow_mode_header:
            raise BadRequest(403, f"this API key may not choose {MODE_HEADER}: set allow_mode_header on it",
                             code="mode_not_allowed")
    if key is None:
        return Caller(mode=mode, chose_mode=mode is not None)
    return Caller(label=key.label, mode=mode or key.mode, tpot_target=seconds(key.tpot_target_ms),
                  ttft_target=seconds(key.ttft_target_ms), chose_mode=mode is not None)


def seconds(ms: float | None) -> float | None:
    """A target configured in milliseconds, as the gate takes it."""
    return None if ms is None else ms / 1000.0


def without_mode_field(raw: bytes, body: dict[str, Any]) -> bytes:
    """The body to forward: as sent, but without ``draftgate_mode``, which is the proxy's
    alone (vLLM would log it as an unknown field on every request)."""
    if MODE_FIELD not in body:
        return raw
    return json.dumps({k: v for k, v in body.items() if k != MODE_FIELD}, ensure_ascii=False).encode()
