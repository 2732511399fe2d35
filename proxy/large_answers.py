"""What measuring needs of a large answer, read without parsing the rest of it.

A non-streamed answer is measured after it has gone to the client, on the event
loop, and ``json.loads`` of a body with logprobs costs about 45 ms a megabyte
on a slow core: an 8,192-token answer with ``top_logprobs`` 20 is 14 MB, most
of a second during which every stream through the proxy stalls. Measuring
needs a sliver of it: each choice's message (or completion text), the usage,
vLLM's speculation metrics and the id.

In JSON text a quote inside a string is always escaped, so ``"message":``
found in the text is an object's key, never part of a value. Each such key's
value is decoded where it stands (``JSONDecoder.raw_decode``), and the rest,
the logprobs, is only searched for keys, in C, never built into objects.
A Responses answer keeps its logprobs elsewhere, and is read otherwise
(``responses_answer``).

Both readings work on the bytes as they came, never decoding the whole: in
UTF-8 no byte of a multi-byte character is a quote, a backslash, a colon or a
bracket. And both are written as steps (``proxy/turns.py``): even searching
10 MB takes a few ms, which a stream should not wait for.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from draftgate.proxy.turns import Steps, at_once, in_turns

# Above this an answer is read in part: a full parse of 64 KiB takes a few ms on a
# slow core, and a chat answer without logprobs (8k tokens of prose is 32 KB)
# rarely reaches it.
LARGE_ANSWER_BYTES = 64 * 1024

_DECODER = json.JSONDecoder()
_COLON = re.compile(rb"\s*:\s*")
_SEARCH_STEP = 256 * 1024  # bytes searched for a key at a step: a fraction of a ms
_VALUE_SPAN = 64 * 1024  # bytes first decoded for a value; four times more each time it does not end there


def answer_skeleton(raw: bytes) -> dict[str, Any] | None:
    """A chat or completions answer, or one chunk of a stream, reduced to what measuring
    reads: ``id``, each choice's ``message`` (chat), ``delta`` (a chat chunk) or
    ``text`` (completions), ``usage`` and ``metrics``.

    The keys are taken where they stand in the text: messages, deltas and texts in
    order, the first ``id``, the last ``usage`` and ``metrics`` (the top level's,
    which vLLM writes after the choices). None when a value read is not UTF-8
    (the logprobs, which are only searched, are not checked).
    """
    return at_once(_reading_skeleton(raw))


async def answer_skeleton_in_turns(raw: bytes, turn: float = 0.001) -> dict[str, Any] | None:
    """``answer_skeleton``, giving the event loop a turn each ``turn`` seconds."""
    return await in_turns(_reading_skeleton(raw), turn)


class _NotUTF8(ValueError):
    """A value read is not UTF-8: nothing of the answer is taken."""


def _reading_skeleton(raw: bytes) -> Steps[dict[str, Any] | None]:
    try:
        ids = yield from _values(raw, b"id", most=1)
        messages = yield from _values(raw, b"message")
        deltas = [] if messages else (yield from _values(raw, b"delta"))
        texts = [] if messages or deltas else (yield from _values(raw, b"text"))
        usage = yield from _values(raw, b"usage", last_first=True, most=1)
        metrics = yield from _values(raw, b"metrics", last_first=True, most=1)
    except _NotUTF8:
        return None
    skeleton: dict[str, Any] = {"id": ids[0]} if ids else {}
    if messages:
        skeleton["choices"] = [{"message": m} for m in messages]
    elif deltas:
        skeleton["choices"] = [{"delta": d} for d in deltas]
    else:
        skeleton["choices"] = [{"text": t} for t in texts if isinstance(t, str)]
    for key, found in (("usage", usage), ("metrics", metrics)):
        if found:
            skeleton[key] = found[0]
    return skeleton


def _values(raw: bytes, key: bytes, last_first: bool = False, most: int | None = None) -> Steps[list[Any]]:
    """The values of ``key`` wherever it is an object's key in ``raw``, in order (or
    last first), up to ``most``.

    A match not followed by a colon was a string value that read as the key
    (``"usage"`` as a whole value): it is skipped.
    """
    quoted = b'"' + key + b'"'
    found: list[Any] = []
    at = yield from (_searching_back(raw, quoted, len(raw)) if last_first else _searching(raw, quoted, 0))
    while at != -1:
        after = at + len(quoted)
        colon = _COLON.match(raw, after)
        if colon is not None and (value := _value_at(raw, colon.end())) is not None:
            found.append(value[0])
            if len(found) == most:
                break
            after = value[1]
        # forward, the search goes on past the value: a key inside it is the value's own
        at = yield from (_searching_back(raw, quoted, at) if last_first else _searching(raw, quoted, after))
    return found


def _searching(raw: bytes, needle: bytes, start: int) -> Steps[int]:
    """``raw.find(needle, start)``, ``_SEARCH_STEP`` bytes at a step."""
    straddle = len(needle) - 1
    while start < len(raw):
        at = raw.find(needle, start, start + _SEARCH_STEP + straddle)
        if at != -1:
            return at
        start += _SEARCH_STEP
        yield
    return -1


def _searching_back(raw: bytes, needle: bytes, end: int) -> Steps[int]:
    """``raw.rfind(needle, 0, end)``, ``_SEARCH_STEP`` bytes at a step."""
    straddle = len(needle) - 1
    while True:
        begin = max(0, end - _SEARCH_STEP)
        at = raw.rfind(needle, begin, end)
        if at != -1 or begin == 0:
            return at
        end = begin + straddle
        yield


def _value_at(raw: bytes, start: int) -> tuple[Any, int] | None:
    """The JSON value that starts at ``start`` and the offset past it, or None.

    Only the bytes the value spans are decoded, and a few more: the span grows
    until the value ends inside it.
    """
    span = _VALUE_SPAN
    while True:
        end = min(len(raw), start + span)
        while end < len(raw) and (raw[end] & 0xC0) == 0x80:  # a span never ends inside a character
            end -= 1
        try:
            text = raw[start:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _NotUTF8 from exc
        try:
            value, stop = _DECODER.raw_decode(text)
        except RecursionError:
            return None
        except ValueError:
            if end == len(raw):
                return None
            span *= 4
            continue
        return value, start + len(text[:stop].encode("utf-8"))


# one per output_text part, and a few in the request's tools repeated
_MAX_LOGPROBS_KEYS = 1024
# Responses logprobs nest four deep: [ {"top_logprobs": [ {"bytes": [...]} ] } ]
_SKIP_DEPTH = 5
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'  # unrolled: a quarter faster than (?:[^"\\]|\\.)*
# an item and a comma are two: 32 logprobs entries, about 40 KB at top_logprobs 20
_ITEMS_PER_STEP = 64


def responses_answer(raw: bytes) -> dict[str, Any] | None:
    """A Responses answer (a body, or the data of the event that ends a stream)
    parsed whole but for its logprobs, each left as ``null``.

    The Responses API puts the logprobs inside each ``output_text`` part, beside
    the text, so there is no small object to pick out as a chat answer's
    ``message``; and the answer repeats the request's tools, whatever their size.
    So the answer is parsed, with each ``"logprobs"`` key's list skipped by a
    regular expression (C, no objects built, but it still reads every string:
    2-4x faster than the parse it saves, ``bench.bench_large_answer``). The list
    of a key that merely ends in ``"logprobs"`` (one holding an escaped quote)
    would be left as ``null`` too: measuring reads no such key. None when a
    list cannot be skipped so (nested deeper than any logprobs are), when
    there are more such keys than any answer has parts, or when the rest is not
    JSON.

    This reads it in one go; ``responses_answer_in_turns`` reads it the same way
    without holding the event loop.
    """
    return at_once(_reading_responses_answer(raw))


async def responses_answer_in_turns(raw: bytes, turn: float = 0.001) -> dict[str, Any] | None:
    """``responses_answer``, giving the event loop a turn each ``turn`` seconds.

    Skipping the logprobs of an 8,192-token answer with ``top_logprobs`` 20 is
    0.1-0.2 s of regular expression; in one call, every stream through the proxy
    would wait that long for its next event.
    """
    return await in_turns(_reading_responses_answer(raw), turn)


def _reading_responses_answer(raw: bytes) -> Steps[dict[str, Any] | None]:
    # Bytes that are not UTF-8 are found by the parse of what is kept (the skipped
    # logprobs are not checked).
    kept: list[bytes] = []
    done = seen = 0
    at = yield from _searching(raw, b'"logprobs"', 0)
    while at != -1:
        seen += 1
        if seen > _MAX_LOGPROBS_KEYS:  # no answer has so many parts: reading it would cost more than parsing it
            return None
        colon = _COLON.match(raw, at + len(b'"logprobs"'))
        start = colon.end() if colon is not None else -1
        if start != -1 and raw.startswith(b"[", start):
            end = yield from _skipping_list(raw, start)
            if end is None:
                return None
            kept += (raw[done:start], b"null")
            done = end
        at = yield from _searching(raw, b'"logprobs"', max(done, at + 1))
    kept.append(raw[done:])
    try:
        return json.loads(b"".join(kept))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _skipping_list(raw: bytes, start: int) -> Steps[int | None]:
    """Where the JSON list that opens at ``start`` ends, found a few of its items at
    a step; None when it does not end, or nests deeper than logprobs do."""
    items = _list_items()
    at = start + 1
    while not raw.startswith(b"]", at):
        step = items.match(raw, at)
        if step is None:
            return None
        at = step.end()
        yield
    return at + 1


@cache  # ms to compile (8 here), and most proxies never see a large Responses answer
def _list_items() -> re.Pattern[bytes]:
    """Up to ``_ITEMS_PER_STEP`` of a list's items and the commas between them, nested at most
    ``_SKIP_DEPTH`` deep with the list. Brackets inside strings do not count;
    possessive quantifiers keep a failed match from backtracking."""
    inner = rf'(?:{_STRING}|[^"\[\]{{}}]++)*+'
    for _ in range(_SKIP_DEPTH - 1):
        inner = rf'(?:{_STRING}|[^"\[\]{{}}]++|\[{inner}\]|\{{{inner}\}})*+'
    items = rf'(?:{_STRING}|[^"\[\]{{}}]++|\[{inner}\]|\{{{inner}\}}){{1,{_ITEMS_PER_STEP}}}+'
    return re.compile(items.encode())
