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
the logprobs, is only scanned for keys, in C, never built into objects.
A Responses answer keeps its logprobs elsewhere, and is read otherwise
(``responses_answer``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Generator, Iterator
from functools import cache
from typing import Any

# Above this an answer is read in part: a full parse of 64 KiB takes a few ms on a
# slow core, and a chat answer without logprobs (8k tokens of prose is 32 KB)
# rarely reaches it.
LARGE_ANSWER_BYTES = 64 * 1024

_DECODER = json.JSONDecoder()
_COLON = re.compile(r"\s*:\s*")
_BYTES_COLON = re.compile(rb"\s*:\s*")


def answer_skeleton(raw: bytes) -> dict[str, Any] | None:
    """A chat or completions answer, or one chunk of a stream, reduced to what measuring
    reads: ``id``, each choice's ``message`` (chat), ``delta`` (a chat chunk) or
    ``text`` (completions), ``usage`` and ``metrics``.

    The keys are taken where they stand in the text: messages, deltas and texts in
    order, the first ``id``, the last ``usage`` and ``metrics`` (the top level's,
    which vLLM writes after the choices). None when the bytes are not UTF-8.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    skeleton: dict[str, Any] = {}
    for rid in _values(text, "id"):
        skeleton["id"] = rid
        break
    messages = list(_values(text, "message"))
    deltas = [] if messages else list(_values(text, "delta"))
    if messages:
        skeleton["choices"] = [{"message": m} for m in messages]
    elif deltas:
        skeleton["choices"] = [{"delta": d} for d in deltas]
    else:
        skeleton["choices"] = [{"text": t} for t in _values(text, "text") if isinstance(t, str)]
    for key in ("usage", "metrics"):
        for value in _values(text, key, last_first=True):
            skeleton[key] = value
            break
    return skeleton


def _values(text: str, key: str, last_first: bool = False) -> Iterator[Any]:
    """The values of ``key`` wherever it is an object's key in ``text``, in order (or last first).

    A match not followed by a colon was a string value that read as the key
    (``"usage"`` as a whole value): it is skipped.
    """
    quoted = f'"{key}"'
    at = text.rfind(quoted) if last_first else text.find(quoted)
    while at != -1:
        after = at + len(quoted)
        colon = _COLON.match(text, after)
        if colon is not None:
            try:
                value, after = _DECODER.raw_decode(text, colon.end())
            except (ValueError, RecursionError):
                pass
            else:
                yield value
        # forward, the search goes on past the value: a key inside it is the value's own
        at = text.rfind(quoted, 0, at) if last_first else text.find(quoted, after)


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
    2-4x faster than the parse it saves, ``lab.bench_large_answer``). The list
    of a key that merely ends in ``"logprobs"`` (one holding an escaped quote)
    would be left as ``null`` too: measuring reads no such key. None when a
    list cannot be skipped so (nested deeper than any logprobs are), when
    there are more such keys than any answer has parts, or when the rest is not
    JSON.

    This reads it in one go; ``responses_answer_in_turns`` reads it the same way
    without holding the event loop.
    """
    reading = _reading_responses_answer(raw)
    while True:
        try:
            next(reading)
        except StopIteration as read:
            return read.value


async def responses_answer_in_turns(raw: bytes, turn: float = 0.001) -> dict[str, Any] | None:
    """``responses_answer``, giving the event loop a turn each ``turn`` seconds.

    Skipping the logprobs of an 8,192-token answer with ``top_logprobs`` 20 is
    0.1-0.2 s of regular expression; in one call, every stream through the proxy
    would wait that long for its next event.
    """
    reading = _reading_responses_answer(raw)
    paused = time.perf_counter()
    while True:
        try:
            next(reading)
        except StopIteration as read:
            return read.value
        if time.perf_counter() - paused >= turn:
            await asyncio.sleep(0)
            paused = time.perf_counter()


def _reading_responses_answer(raw: bytes) -> Generator[None, None, dict[str, Any] | None]:
    """``responses_answer`` as steps: it yields between them, and returns the answer.

    It reads bytes, never decoding the whole: in UTF-8 no byte of a multi-byte
    character is a quote, a backslash or a bracket, and decoding 10 MB at once
    would hold the loop for several ms. Bytes that are not UTF-8 are found by
    the parse of what is kept (the skipped logprobs are not checked).
    """
    kept: list[bytes] = []
    done = seen = 0
    at = raw.find(b'"logprobs"')
    while at != -1:
        seen += 1
        if seen > _MAX_LOGPROBS_KEYS:  # no answer has so many parts: reading it would cost more than parsing it
            return None
        colon = _BYTES_COLON.match(raw, at + len(b'"logprobs"'))
        start = colon.end() if colon is not None else -1
        if start != -1 and raw.startswith(b"[", start):
            end = yield from _skipping_list(raw, start)
            if end is None:
                return None
            kept += (raw[done:start], b"null")
            done = end
        at = raw.find(b'"logprobs"', max(done, at + 1))
    kept.append(raw[done:])
    try:
        return json.loads(b"".join(kept))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _skipping_list(raw: bytes, start: int) -> Generator[None, None, int | None]:
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


@cache  # tens of ms to compile, and most proxies never see a large Responses answer
def _list_items() -> re.Pattern[bytes]:
    """Up to ``_ITEMS_PER_STEP`` of a list's items and the commas between them, nested at most
    ``_SKIP_DEPTH`` deep with the list. Brackets inside strings do not count;
    possessive quantifiers keep a failed match from backtracking."""
    inner = rf'(?:{_STRING}|[^"\[\]{{}}]++)*+'
    for _ in range(_SKIP_DEPTH - 1):
        inner = rf'(?:{_STRING}|[^"\[\]{{}}]++|\[{inner}\]|\{{{inner}\}})*+'
    items = rf'(?:{_STRING}|[^"\[\]{{}}]++|\[{inner}\]|\{{{inner}\}}){{1,{_ITEMS_PER_STEP}}}+'
    return re.compile(items.encode())
