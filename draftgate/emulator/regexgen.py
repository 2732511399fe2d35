"""Sample a string that matches a regular expression (the subset structured outputs use).

Walks the pattern as Python's own regex parser reads it; constructs it cannot
sample (look-arounds, back-references) fall back to an empty string, and the
caller's tests say which patterns are supported.
"""

from __future__ import annotations

import random
import string
from typing import Any

try:  # Python 3.11+
    import re._parser as sre_parse  # type: ignore[import-not-found]
    from re._constants import (  # type: ignore[import-not-found]
        ANY,
        BRANCH,
        CATEGORY,
        CATEGORY_DIGIT,
        CATEGORY_SPACE,
        CATEGORY_WORD,
        IN,
        LITERAL,
        MAX_REPEAT,
        MIN_REPEAT,
        NEGATE,
        NOT_LITERAL,
        RANGE,
        SUBPATTERN,
    )
except ImportError:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]
    from sre_constants import (  # type: ignore[no-redef]
        ANY,
        BRANCH,
        CATEGORY,
        CATEGORY_DIGIT,
        CATEGORY_SPACE,
        CATEGORY_WORD,
        IN,
        LITERAL,
        MAX_REPEAT,
        MIN_REPEAT,
        NEGATE,
        NOT_LITERAL,
        RANGE,
        SUBPATTERN,
    )

_CATEGORIES = {CATEGORY_DIGIT: string.digits, CATEGORY_WORD: string.ascii_letters + string.digits + "_",
               CATEGORY_SPACE: " "}


# Past this many characters a sample stops growing: a pattern may demand a{100000000},
# and vLLM's output would be cut at max_tokens long before, as the emulator cuts this.
MAX_SAMPLE_CHARS = 16384


def sample_regex(pattern: str, rng: random.Random, max_repeat: int = 6) -> str:
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - an invalid pattern gets an empty answer
        return ""
    out: list[str] = []
    _emit(parsed, rng, max_repeat, out)
    return "".join(out)


def _emit(items: Any, rng: random.Random, max_repeat: int, out: list[str]) -> None:
    for op, arg in items:
        if len(out) >= MAX_SAMPLE_CHARS:  # every piece is one character
            return
        if op == LITERAL:
            out.append(chr(arg))
        elif op == NOT_LITERAL:
            out.append("a" if chr(arg) != "a" else "b")
        elif op == ANY:
            out.append(rng.choice(string.ascii_lowercase))
        elif op == IN:
            out.append(_from_set(arg, rng))
        elif op in (MAX_REPEAT, MIN_REPEAT):
            lo, hi, sub = arg
            # a repeat of nothing (\b{100000000}) must end too: more rounds than characters add none
            count = min(rng.randint(lo, max(lo, min(hi, lo + max_repeat))), MAX_SAMPLE_CHARS)
            for _ in range(count):
                if len(out) >= MAX_SAMPLE_CHARS:
                    break
                _emit(sub, rng, max_repeat, out)
        elif op == SUBPATTERN:
            _emit(arg[-1], rng, max_repeat, out)
        elif op == BRANCH:
            _emit(rng.choice(arg[1]), rng, max_repeat, out)


def _from_set(items: Any, rng: random.Random) -> str:
    choices: list[str] = []
    negate = False
    for op, arg in items:
        if op == NEGATE:
            negate = True
        elif op == LITERAL:
            choices.append(chr(arg))
        elif op == RANGE:
            choices.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 200) + 1))
        elif op == CATEGORY:
            choices.extend(_CATEGORIES.get(arg, "a"))
    if negate:
        allowed = [c for c in string.ascii_letters + string.digits if c not in choices]
        return rng.choice(allowed) if allowed else "~"
    return rng.choice(choices) if choices else "a"
