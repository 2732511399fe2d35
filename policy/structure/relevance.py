"""Does the user's question share a word with any tool it is offered?

BFCL's irrelevance cases mostly share none; relevant questions almost never
do. So under ``tool_choice=auto`` a question with no word in common with the
tools' names and descriptions makes a call unlikely.

A word is a run of four or more ASCII letters, case folded, compared on its
first five letters (a crude stem: "discovered" meets "discoverer"). The test
runs on every request with tools, so it leans on the bytes methods:
``bytes.translate`` folds case and turns every other byte into a space, and
each stem is then a substring search for ``" stem"`` (a five-letter stem starts
a word) or ``" stem "`` (a four-letter word is itself).
"""

from __future__ import annotations

from typing import Any

# A-Z folded to a-z, a-z kept, every other byte (digits, punctuation, "_", UTF-8) a space.
_FOLD = bytes(c + 32 if 65 <= c <= 90 else c if 97 <= c <= 122 else 32 for c in range(256))
# Words too common to say whether a question concerns a tool, as stems.
_STOP_STEMS = frozenset(w[:5].encode() for w in (
    "what with from that this have will your about which their there would could should into than "
    "then them they been were when where also some more most such only other over under using find "
    "calculate give tell need want please"
).split())
_QUESTION_CHARS = 2000
_DESCRIPTION_CHARS = 200
_MAX_TOOLS = 512
# Tools are searched a batch at a time: a relevant question usually shares a
# word with one of the first few, and one search over a batch costs less than one per tool.
_BATCH = 16


def _folded(text: str) -> bytes:
    return text.encode("utf-8", "replace").translate(_FOLD)


def question_stems(text: str) -> set[bytes]:
    """The stems of the content words of ``text`` (its first 2,000 characters)."""
    return {w[:5] for w in _folded(text[:_QUESTION_CHARS]).split() if len(w) >= 4} - _STOP_STEMS


def last_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            return content if isinstance(content, str) and content else None
    return None


def unrelated_to_tools(messages: Any, tools: list[Any]) -> bool:
    """True when the last user message shares no content word with any tool."""
    return question_unrelated(last_user_text(messages), tools)


def question_unrelated(text: str | None, tools: list[Any]) -> bool:
    """True when ``text`` (the last user message's, None for none) shares no content word with any tool."""
    if text is None:
        return False
    stems = question_stems(text)
    if not stems:
        return False
    needles = [b" " + s if len(s) == 5 else b" " + s + b" " for s in stems]
    offered: list[str] = [""]
    for i, tool in enumerate(tools[:_MAX_TOOLS], 1):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict):
            name, description = fn.get("name"), fn.get("description")
            if isinstance(name, str):
                offered.append(name)
            if isinstance(description, str):
                offered.append(description[:_DESCRIPTION_CHARS])
        if len(offered) > 1 and (i % _BATCH == 0 or i == len(tools) or i == _MAX_TOOLS):
            offered.append("")
            words = _folded(" ".join(offered))
            if any(needle in words for needle in needles):
                return False
            offered = [""]
    return True
