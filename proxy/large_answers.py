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

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

# Above this an answer is read in part: a full parse of 64 KiB takes a few ms on a
# slow core, and a chat answer without logprobs (8k tokens of prose is 32 KB)
# rarely reaches it.
LARGE_ANSWER_BYTES = 64 * 1024

_DECODER = json.JSONDecoder()
_COLON = re.compile(r"\s*:\s*")


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
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    kept: list[str] = []
    done = seen = 0
    at = text.find('"logprobs"')
    while at != -1:
        seen += 1
        if seen > _MAX_LOGPROBS_KEYS:  # no answer has so many parts: reading it would cost more than parsing it
            return None
        colon = _COLON.match(text, at + len('"logprobs"'))
        start = colon.end() if colon is not None else -1
        if start != -1 and text.startswith("[", start):
            value = _skippable_list().match(text, start)
            if value is None:
                return None
            kept += (text[done:start], "null")
            done = value.end()
        at = text.find('"logprobs"', max(done, at + 1))
    kept.append(text[done:])
    try:
        return json.loads("".join(kept))
    except (ValueError, RecursionError):
        return None


@cache  # tens of ms to compile, and most proxies never see a large Responses answer
def _skippable_list() -> re.Pattern[str]:
    """A JSON list nested at most ``_SKIP_DEPTH`` deep. Brackets inside strings do
    not count; possessive quantifiers keep a failed match from backtracking."""
    inner = rf'(?:{_STRING}|[^"\[\]{{}}]++)*+'
    for _ in range(_SKIP_DEPTH):
        inner = rf'(?:{_STRING}|[^"\[\]{{}}]++|\[{inner}\]|\{{{inner}\}})*+'
    return re.compile(rf"\[{inner}\]")
