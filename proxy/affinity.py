"""Which pool and replica hold a conversation's prefix in their cache.

Agents resend a growing conversation; moving turn N+1 to another pool
re-prefills all of it. A conversation is identified by a chained hash over its
messages (so turn N+1, which extends turn N, finds turn N's entry at the
longest matching prefix) and by what the client says groups its requests,
when it says it (``_SESSION_FIELDS``): that still finds a conversation whose
client has trimmed or compacted its history. Memory is bounded (LRU, and every
key a hash, whatever the client sent).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# What clients send to say which requests share a prompt, most specific first:
# OpenAI's prompt_cache_key (agent clients such as Codex set it per conversation),
# session_id (vLLM's Responses requests carry one: "stable across the requests of one
# conversation or agent session"), then the end user (user, and safety_identifier,
# OpenAI's newer name for it).
_SESSION_FIELDS = ("prompt_cache_key", "session_id", "user", "safety_identifier")


@dataclass(frozen=True, slots=True)
class Placement:
    pool: str
    replica: str
    prompt_tokens: float


@dataclass(frozen=True, slots=True)
class Match:
    placement: Placement
    cached_tokens: float
    via: str  # "prefix" or "session"


@dataclass(frozen=True, slots=True)
class Conversation:
    """What identifies a request's conversation: its prefix chain and its session.

    Computed once per request (hashing every message is the costly part) and
    used both to look the conversation up and, once answered, to record it.
    """

    chain: tuple[tuple[int, int], ...]  # (hash, characters so far) after each message
    session: int | None

    @classmethod
    def of(cls, body: Any, shared: bool = False) -> Conversation:
        """``shared``: the keys are the same in every process (BLAKE2b), for a table that
        proxy replicas share; else Python's own hash, salted per process, which costs
        about a third as much (``bench/bench_conversation.py``)."""
        if not isinstance(body, dict):
            return cls((), None)
        model, salt = body.get("model"), body.get("cache_salt")
        # vLLM salts the prefix cache with cache_salt: prompts alike under two salts share no block
        cache = (model if type(model) is str else None, salt if type(salt) is str else None)
        if shared:
            return cls(_chain(body, cache, _stable_digest, _stable), _session(body, cache, _stable))
        return cls(_chain(body, cache), _session(body, cache))

    def looked_up_keys(self, most: int = 32) -> list[int]:
        """The keys ``AffinityTable.lookup`` may find this conversation under: the prefixes
        before its new turn, longest first (the last ``most``: an agent's next request
        extends its last by a turn or two), then its session."""
        keys = [h for h, _ in reversed(self.chain[:-1])][:most]
        return keys + ([self.session] if self.session is not None else [])

    def recorded_keys(self) -> list[int]:
        """The keys its placement is recorded under, once answered: its whole prefix, and its session."""
        return ([self.chain[-1][0]] if self.chain else []) + ([self.session] if self.session is not None else [])


def _chain(body: dict[str, Any], cache: tuple[str | None, str | None],
           digest: Callable[[Any], tuple[int, int]] | None = None,
           combine: Callable[[Any], int] = hash) -> tuple[tuple[int, int], ...]:
    """(hash, characters so far) after each message, rooted in the model, the cache
    salt and the tool names. The characters count the tool definitions first: the
    chat template puts them before every message, so a cached prefix holds them.

    By default Python's own hash, of each message taken apart into tuples: a table
    that lives and dies with this process loses nothing to a per-process hash seed.
    """
    digest = digest or _digest
    tools = body.get("tools")
    names: tuple[Any, ...] = ()
    chars = 0
    if isinstance(tools, list):
        names = tuple(tool.get("function", {}).get("name") if isinstance(tool, dict)
                      and isinstance(tool.get("function"), dict) else None for tool in tools[:512])
        chars = len(_text(tools)) if tools else 0
    h = combine((*cache, repr(names)))
    out: list[tuple[int, int]] = []
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ()
    for message in messages:
        one, size = digest(message)
        chars += size
        h = combine((h, one))
        out.append((h, chars))
    return tuple(out)


def _stable(value: Any) -> int:
    """A 64-bit BLAKE2b of ``value``'s repr: the same in every process."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "big")


def _stable_digest(message: Any) -> tuple[int, int]:
    """``_digest``, the same in every process: each string fed to one BLAKE2b as it is."""
    h = hashlib.blake2b(digest_size=8)
    if type(message) is not dict:
        text = _text(message)
        h.update(text.encode("utf-8", "surrogatepass"))
        return int.from_bytes(h.digest(), "big"), len(text)
    size = 0
    for key, value in message.items():
        h.update(f"\x00{key}\x01".encode("utf-8", "surrogatepass"))
        if type(value) is str:
            size += len(value)
        elif value is None:
            value = ""
        else:
            text = _text(value)
            size += len(text)
            value = f"{type(value).__name__}:{text}"  # [1] and "[1]" stay apart
        h.update(value.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "big"), size


def _digest(message: Any) -> tuple[int, int]:
    """A message's hash and its size in characters.

    Its string fields are hashed as they are: the whole message's repr was hashed
    before, which copies every character and cost twice what parsing the body had
    (``bench/bench_conversation.py``). What nests (tool calls, content parts) still
    goes by repr: a walk in Python cost more than the copy, on tool calls.
    """
    if type(message) is not dict:
        text = _text(message)
        return hash(text), len(text)
    parts, size = [], 0
    for key, value in message.items():
        if type(value) is str:
            size += len(value)
        elif value is not None:
            text = _text(value)
            size += len(text)
            value = (type(value).__name__, text)  # [1] and "[1]" stay apart
        parts.append((key, value))
    return hash(tuple(parts)), size


def _text(value: Any) -> str:
    try:
        return repr(value)
    except RecursionError:  # nested deeper than repr goes: rare, and such a message is its own prefix
        return f"<deep value {id(value)}>"


def _session(body: dict[str, Any], cache: tuple[str | None, str | None],
             combine: Callable[[Any], int] = hash) -> int | None:
    """The client's grouping, under the model and salt it caches for, as a hash: a
    megabyte ``user`` must not be kept 100,000 times."""
    for key in _SESSION_FIELDS:
        value = body.get(key)
        if isinstance(value, str) and value:
            return combine((key, value, *cache))
    return None


class AffinityTable:
    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        # Placements are kept as plain tuples of strings and a number: the cycle collector
        # stops tracking such a tuple, and a full table of dataclasses would add 100,000
        # objects to every full collection's pause (bench.bench_gc).
        self._entries: OrderedDict[int, tuple[str, str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, conversation: Conversation, prompt_tokens: float) -> Match | None:
        chain = conversation.chain
        total = chain[-1][1] if chain else 0
        # the last message is the new turn: only what precedes it can be cached
        for h, chars in reversed(chain[:-1]):
            entry = self._entries.get(h)
            if entry is not None:
                self._entries.move_to_end(h)
                placement = Placement(*entry)
                cached = min(placement.prompt_tokens, prompt_tokens * chars / total) if total else 0.0
                return Match(placement, cached, "prefix")
        session = conversation.session
        if session is not None and session in self._entries:
            placement = Placement(*self._entries[session])
            self._entries.move_to_end(session)
            return Match(placement, min(placement.prompt_tokens, prompt_tokens) * 0.5, "session")
        return None

    def record(self, conversation: Conversation, pool: str, replica: str, prompt_tokens: float) -> None:
        entry = (pool, replica, float(prompt_tokens))
        for key in conversation.recorded_keys():
            self._put(key, entry)

    def adopt(self, key: int, entry: tuple[str, str, float]) -> None:
        """An entry another proxy recorded, from the store they share."""
        self._put(key, entry)

    def _put(self, key: int, entry: tuple[str, str, float]) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
