"""Send what concerns a stored response to the replica that holds it.

vLLM run with ``VLLM_ENABLE_RESPONSES_API_STORE=1`` keeps each response of
``/v1/responses`` in the memory of the server that made it. Only that server can
retrieve it (``GET /v1/responses/{id}``), cancel it, or continue the conversation
from it (``previous_response_id``): any other replica answers 404. Spread over
replicas by load, a follow-up lands on the wrong one more often than not, and a
background response polled through the proxy looks lost.

So the proxy learns who holds each response from the answers it passes on (the
id is the response object's first field, and the first event of a stream carries
that object), and pins requests about it there. When it has not seen the answer
(another proxy replica passed it on, or this one restarted) it asks each replica
for the response in turn: a lookup is cheap, and only the holder has it.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from draftgate.policy.vllm_fields import as_bool
from draftgate.proxy.headers import upstream_headers
from draftgate.proxy.pools import Pool, Replica
from draftgate.proxy.upstream import UpstreamClient, UpstreamError

CREATE_PATH = "/v1/responses"
_PREFIX = "/v1/responses/"
# the id opens the response object; a stream's first event wraps that object
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,256})"')
# how far into an answer the id is looked for: a response.created event with long instructions runs long
SNIFF_BYTES = 16384


def stored_response_id(path: str) -> str | None:
    """The response a ``/v1/responses/{id}[/...]`` path is about; ``path`` as the
    client wrote it, so that an id holding an encoded / stays one segment."""
    if not path.startswith(_PREFIX):
        return None
    rid = unquote(path[len(_PREFIX):].split("/", 1)[0])
    return rid or None


def streams_stored_response(method: str, path: str, query: bytes) -> bool:
    """Whether a request replays a stored response's events (``GET .../{id}?stream=true``):
    an answer that comes event by event, paced by the generation like any stream."""
    if method != "GET" or b"stream=" not in query or not stored_response_id(path):
        return False
    asked = parse_qs(query.decode("latin-1")).get("stream", [""])[-1]
    return as_bool(asked) is True  # a query bool, as vLLM's FastAPI reads one


def stored(body: Any) -> bool:
    """Whether the response ``body`` asks for may be stored: unless it says ``store: false``
    (a server without the store keeps nothing either, but the proxy cannot tell)."""
    return not (isinstance(body, dict) and as_bool(body.get("store")) is False)


def continued_response_id(body: Any) -> str | None:
    """The response a new one continues from (``previous_response_id``)."""
    previous = body.get("previous_response_id") if isinstance(body, dict) else None
    return previous if isinstance(previous, str) and previous else None


class ResponseHolders:
    """Which replica holds each stored response this proxy has seen; bounded (LRU)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._holders: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (pool, replica url)

    def __len__(self) -> int:
        return len(self._holders)

    def remember(self, rid: str, pool: str, replica: str) -> None:
        self._holders[rid] = (pool, replica)
        self._holders.move_to_end(rid)
        while len(self._holders) > self.capacity:
            self._holders.popitem(last=False)

    def remember_from_answer(self, head: bytes, pool: str, replica: str) -> bool:
        """Remember the holder of the response whose answer starts with ``head``; False if no id is there yet."""
        found = _RESPONSE_ID.search(head)
        if found is None:
            return False
        self.remember(found.group(1).decode("utf-8", "replace"), pool, replica)
        return True

    def holder(self, rid: str, pools: Iterable[Pool]) -> tuple[Pool, Replica] | None:
        """The pool and replica holding ``rid``, if known and still among ``pools``."""
        known = self._holders.get(rid)
        if known is None:
            return None
        pool = next((p for p in pools if p.name == known[0]), None)
        if pool is None:
            return None
        replica = pool.replicas.get(known[1])
        if replica is None:
            del self._holders[rid]  # its replica has left the pool, and the response with it
            return None
        self._holders.move_to_end(rid)
        return pool, replica

    async def locate(self, client: UpstreamClient, rid: str, pools: list[Pool], headers: list[tuple[bytes, bytes]],
                     strip_authorization: bool, connect_timeout: float,
                     read_timeout: float) -> tuple[Pool, Replica] | None:
        """The holder of ``rid``: remembered, or else found by asking each replica of
        ``pools`` for it (those in rotation first), and remembered from then on.

        The lookup carries the client's headers, credentials included, as the
        request it is for will: a replica shows a response only to whom it would.
        """
        known = self.holder(rid, pools)
        if known is not None:
            return known
        target = f"{CREATE_PATH}/{quote(rid, safe='')}"
        ordered = [(p, r) for p in pools for r in p.replicas_in_rotation()]
        listed = {r.url for _, r in ordered}
        ordered += [(p, r) for p in pools for r in p.replicas.values() if r.url not in listed]
        for pool, replica in ordered:
            try:
                response = await client.origin(replica.url).request(
                    "GET", target, upstream_headers(headers, pool, strip_authorization), b"", connect_timeout,
                    read_timeout)
            except UpstreamError:
                continue  # a replica that cannot be reached holds nothing it could give back
            try:
                await response.aread()
            except UpstreamError:
                continue
            finally:
                await response.aclose()
            if response.status_code == 200:
                self.remember(rid, pool.name, replica.url)
                return pool, replica
        return None

