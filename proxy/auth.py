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
    if token is None:
        return False
    given = token.encode("utf-8", "surrogateescape")
    matched = False
    for key in keys:  # no early exit: every key costs the same time
        matched |= hmac.compare_digest(given, key.get_secret_value().encode("utf-8", "surrogateescape"))
    return matched


def matching_key(token: str | None, keys: Sequence[ApiKey]) -> ApiKey | None:
    """The key ``token`` is, compared against every key as ``token_matches`` does."""
    if token is None:
        return None
    given = token.encode("utf-8", "surrogateescape")
    found: ApiKey | None = None
    for key in keys:  # no early exit: every key costs the same time
        if hmac.compare_digest(given, key.key.get_secret_value().encode("utf-8", "surrogateescape")) and found is None:
            found = key
    return found
