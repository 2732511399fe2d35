"""Bearer tokens: the proxy's API keys and its admin token.

Tokens are compared with ``hmac.compare_digest``, against every configured
key, so the time a refusal takes tells a caller nothing about how much of a
key it has guessed, nor which key came close.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence

from pydantic import SecretStr

from draftgate.proxy.config import ApiKey


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case), else None."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def token_matches(token: str | None, keys: Iterable[SecretStr]) -> bool:
    return _matching_index(token, keys) is not None


def matching_key(token: str | None, keys: Sequence[ApiKey]) -> ApiKey | None:
    """The configured key ``token`` is, if any."""
    index = _matching_index(token, (k.key for k in keys))
    return None if index is None else keys[index]


def _matching_index(token: str | None, secrets: Iterable[SecretStr]) -> int | None:
    """Which of ``secrets`` ``token`` is: each compared in constant time, and every one
    compared (no early exit), so every key costs the same time."""
    if token is None:
        return None
    given = token.encode("utf-8", "surrogateescape")
    found: int | None = None
    for i, secret in enumerate(secrets):
        if hmac.compare_digest(given, secret.get_secret_value().encode("utf-8", "surrogateescape")) and found is None:
            found = i
    return found
