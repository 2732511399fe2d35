"""The addresses commands take, however they were pasted.

A pool's or a proxy's address reaches a command in the forms people have at
hand: the base URL, the OpenAI base URL (``.../v1``) a client is configured
with, or the ``.../metrics`` address Prometheus scrapes. Each means the same
server; anything that is not an http(s) URL with a host is refused in one line.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from draftgate.cli_error import CliError

_SUFFIXES = ("/metrics", "/v1")


def base_url(text: str, flag: str) -> str:
    """``text`` as a server's base URL, without a trailing ``/``, ``/metrics`` or ``/v1``."""
    url = text.strip().rstrip("/")
    for suffix in _SUFFIXES:
        if url.endswith(suffix):
            url = url[: -len(suffix)].rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        raise CliError(f"{flag}: {text!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(f"{flag}: {text!r} is not an http(s) URL with a host (http://host:8000)")
    return url
