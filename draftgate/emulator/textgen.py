"""What the emulated model says: outputs that respect the request.

Tool calls whose arguments validate against the tool's schema, JSON that
validates against a response format, reasoning before the answer when
thinking is on, prose (or code, when asked for it) otherwise. Deterministic per
request at temperature 0, and independent of the server's speculation settings:
speculation is lossless.

Every token carries its kind (``profile.KINDS``): what makes it more or less
predictable. JSON syntax and keys, an enumerated value, a number, a value
copied from the prompt, free text inside a string (a message body, a file's
content), reasoning, prose, code. A tool call is schema-bound as a whole (its
class is S), but only as predictable as what its arguments are made of.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.regexgen import sample_regex
from draftgate.emulator.tokens import tokenize
from draftgate.emulator.vllm_request import forced_function, output_constraint

_WORDS = (
    "the of and to in is that it for on with as was at by this from are be or have an not which "
    "but all can had one their there has been if more when will would who so no time out up some "
    "into them about than then its only other could new these two may first any like now my over "
    "such our man me even most made after also did many before must through back years where much "
    "your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take "
    "three states himself few house use during without again place around however home small found "
    "thought went say part once general high upon school every does got united left number course "
    "war until always away something fact though water less public put think almost hand enough far "
    "took head yet government system better set told nothing night end why called didn find look "
    "asked later point knew city next program business give group toward young days let room "
    "president side social given present several order national possible rather second face per "
    "among form important often things looked early white john case become large big need four within"
).split()
_REASONING_OPENERS = ("Okay, let me think about this.", "Let me work through the request.", "First, I need to check")


@dataclass
class OutputToken:
    text: str
    cls: str  # "s", "r" or "f": where the answer puts it, as a client measures it
    channel: str  # "reasoning", "content", "tool_name", "tool_args"
    call: int = -1
    kind: str = "prose"  # what decides its predictability (profile.KINDS)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Generated:
    tokens: list[OutputToken] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, text: str, cls: str, channel: str, call: int = -1, kind: str = "prose") -> None:
        self.tokens.extend(OutputToken(t, cls, channel, call, kind) for t in tokenize(text))

    def add_json(self, value: Any, channel: str, call: int = -1) -> str:
        """``value`` as ``json.dumps`` writes it, each piece tokenized with its kind; the text."""
        pieces: list[tuple[str, str]] = []
        _json_pieces(value, pieces)
        text = "".join(piece for piece, _ in pieces)
        kind_at = [kind for piece, kind in pieces for _ in piece]  # one per character
        offset = 0
        for token in tokenize(text):  # the whole text at once, so counts match the answer's
            lead = len(token) - len(token.lstrip())
            self.tokens.append(OutputToken(token, "s", channel, call, kind_at[min(offset + lead, len(text) - 1)]))
            offset += len(token)
        return text


class Copied(str):
    """A string value the model copies from the prompt."""


class FreeText(str):
    """A string value the model writes freely (a message body, a file's content)."""


class Chosen(str):
    """A string value picked from a schema's enumeration."""


def _json_pieces(value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        out.append(("{", "syntax"))
        for i, (key, item) in enumerate(value.items()):
            out.append(((", " if i else "") + json.dumps(str(key)) + ": ", "syntax"))
            _json_pieces(item, out)
        out.append(("}", "syntax"))
    elif isinstance(value, list):
        out.append(("[", "syntax"))
        for i, item in enumerate(value):
            if i:
                out.append((", ", "syntax"))
            _json_pieces(item, out)
        out.append(("]", "syntax"))
    elif isinstance(value, str):
        kind = ("copied" if isinstance(value, Copied) else "text" if isinstance(value, FreeText)
                else "enum" if isinstance(value, Chosen) else "copied")
        quoted = json.dumps(str(value))
        out += [('"', "syntax"), (quoted[1:-1], kind), ('"', "syntax")]
    elif isinstance(value, bool) or value is None:
        out.append((json.dumps(value), "enum"))
    else:
        out.append((json.dumps(value), "number"))


def request_digest(body: dict[str, Any], extra: str = "") -> int:
    keys = ("model", "messages", "prompt", "tools", "tool_choice", "response_format", "structured_outputs",
            "chat_template_kwargs", "reasoning_effort", "parallel_tool_calls")
    canon = json.dumps({k: body.get(k) for k in keys}, sort_keys=True, default=str) + extra
    return int.from_bytes(hashlib.blake2b(canon.encode(), digest_size=8).digest(), "big")


def generate(body: dict[str, Any], profile: EngineProfile, rng: random.Random, endpoint: str) -> Generated:
    out = Generated()
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    context_words = _context_words(messages, body.get("prompt"))
    if endpoint == "chat" and _thinking(body, profile):
        _reasoning(out, body, profile, rng, context_words)
    if _structured_content(out, body, rng, context_words):
        return out
    tools = body.get("tools") if endpoint == "chat" and isinstance(body.get("tools"), list) else []
    chosen = _choose_calls(body, tools, messages, profile, rng)
    if chosen:
        # a named function's grammar is its parameters: the model writes the arguments, the server the name
        named = forced_function(body.get("tool_choice")) is not None
        for i, tool in enumerate(chosen):
            fn = tool["function"]
            call_id = f"chatcmpl-tool-{rng.getrandbits(64):016x}"
            if not named:
                out.tokens.append(OutputToken(fn["name"], "s", "tool_name", i, "enum"))
            value = _instance(fn.get("parameters") or {"type": "object"}, rng, context_words, fn.get("parameters"),
                              profile=profile)
            out.calls.append(ToolCall(call_id, fn["name"], out.add_json(value, "tool_args", i)))
        return out
    after_tool = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
    mean = profile.lengths.prose_after_tool if after_tool else profile.lengths.prose
    length = _length(rng, mean, profile)
    if body.get("ignore_eos") is True and isinstance(body.get("max_tokens"), int):
        length = body["max_tokens"]  # as vLLM's serving benchmark replays a dataset's answer lengths
    said = _conversation_words(messages, body.get("prompt"))
    if _asks_for_code(messages, body.get("prompt")):
        intro = max(4, length // 5)
        out.add(_sentences(rng, intro, context_words, said, profile), "f", "content", kind="prose")
        out.add(_code(rng, length - intro), "f", "content", kind="code")
    else:
        out.add(_sentences(rng, length, context_words, said, profile), "f", "content")
    if body.get("ignore_eos") is True:  # exactly max_tokens, as vLLM generates past the end of text
        while len(out.tokens) < length:
            out.add(_sentences(rng, length - len(out.tokens), context_words, said, profile), "f", "content")
    return out


def _thinking(body: dict[str, Any], profile: EngineProfile) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        for alias in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(alias), bool):
                return kwargs[alias]
    effort = body.get("reasoning_effort")
    if effort in ("low", "medium", "high"):
        return True
    if effort in ("none", "minimal"):
        return False
    return profile.thinking_by_default


def _reasoning(out: Generated, body: dict[str, Any], profile: EngineProfile, rng: random.Random, words: list[str]) -> None:
    effort = body.get("reasoning_effort")
    mean = getattr(profile.lengths, f"reasoning_{effort}", None) if effort in ("low", "medium", "high") else None
    n = _length(rng, mean or profile.lengths.reasoning_default, profile)
    out.add(rng.choice(_REASONING_OPENERS) + _sentences(rng, n, words), "r", "reasoning", kind="reasoning")
    budget = body.get("thinking_token_budget")  # checked with the request: a whole number from -1
    if isinstance(budget, int) and budget >= 0:
        del out.tokens[budget:]  # vLLM ends the reasoning there; nothing but reasoning is out yet


def _structured_content(out: Generated, body: dict[str, Any], rng: random.Random, words: list[str]) -> bool:
    """Content under a JSON format or a grammar, added to ``out``; False when there is no constraint."""
    so = body.get("structured_outputs")
    constraint = output_constraint(so) if isinstance(so, dict) else None
    schema: Any = None
    if constraint is not None:  # the request's check has made sure there is exactly one
        kind, value = constraint
        if kind == "json":
            schema = value if isinstance(value, dict) else json.loads(value)
        elif kind == "json_object":
            out.add_json(_json_object(rng, words), "content")
            return True
        elif kind == "choice" and isinstance(value, list) and value:
            out.add(str(rng.choice(value)), "s", "content", kind="enum")
            return True
        elif kind == "regex" and isinstance(value, str):
            out.add(sample_regex(value, rng), "s", "content", kind="number")
            return True
        else:
            out.add("grammar output", "s", "content", kind="syntax")  # EBNF and structural tags are not sampled
            return True
    fmt = body.get("response_format")
    if schema is None and isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else {}
            schema = spec.get("schema") if isinstance(spec.get("schema"), dict) else {"type": "object"}
        elif fmt.get("type") == "json_object":
            out.add_json(_json_object(rng, words), "content")
            return True
    if schema is None:
        return False
    out.add_json(_instance(schema, rng, words, schema), "content")
    return True


def _json_object(rng: random.Random, words: list[str]) -> dict[str, Any]:
    return {"answer": FreeText(" ".join(rng.choice(words or _WORDS) for _ in range(3))), "confidence": 0.9}


def _choose_calls(body: dict[str, Any], tools: list[Any], messages: list[Any], profile: EngineProfile,
                  rng: random.Random) -> list[dict[str, Any]]:
    usable = [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
              and isinstance(t["function"].get("name"), str)]
    if not usable:
        return []
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return []
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        named = [t for t in usable if t["function"]["name"] == name]
        return named[:1]
    parallel = body.get("parallel_tool_calls", True) is not False
    last_user = next((m.get("content") for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), "")
    calls = 2 if parallel and isinstance(last_user, str) and re.search(r"\band\b|,", last_user) and rng.random() < 0.5 else 1
    if choice != "required":
        after_tool = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
        p = profile.auto_call_probability_after_tool if after_tool else profile.auto_call_probability
        text = (last_user or "").lower() if isinstance(last_user, str) else ""
        related = any(part in text for t in usable for part in t["function"]["name"].lower().split("_") if len(part) > 3)
        if not after_tool and not related:
            p *= 0.4
        if rng.random() >= p:
            return []
    return [rng.choice(usable) for _ in range(calls)]


def _instance(schema: Any, rng: random.Random, words: list[str], root: Any, depth: int = 0, name: str = "",
              profile: EngineProfile | None = None) -> Any:
    """A value that validates against ``schema`` (the subset tool schemas use); ``name`` is
    the property it fills, which says whether a string is copied or written freely."""
    if not isinstance(schema, dict) or depth > 12:
        return "x"
    if "$ref" in schema and isinstance(schema["$ref"], str) and schema["$ref"].startswith("#"):
        target: Any = root
        for part in schema["$ref"][1:].split("/"):
            if part:
                target = target.get(part) if isinstance(target, dict) else None
        return _instance(target, rng, words, root, depth + 1, name, profile)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        picked = rng.choice(schema["enum"])
        return Chosen(picked) if isinstance(picked, str) else picked
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0], rng, words, root, depth + 1, name, profile)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = _instance(part, rng, words, root, depth + 1, name, profile)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        out = {}
        for prop, sub in props.items():
            if prop in required or rng.random() < 0.3:
                out[prop] = _instance(sub, rng, words, root, depth + 1, prop, profile)
        return out
    if kind == "array":
        lo = int(_bound(schema.get("minItems"), 1, 0, _MAX_ITEMS))
        hi = int(_bound(schema.get("maxItems"), max(lo, 3), 0, _MAX_ITEMS))
        items = schema.get("items", {})
        return [_instance(items, rng, words, root, depth + 1, name, profile) for _ in range(rng.randint(lo, max(lo, hi)))]
    if kind == "integer":
        lo = int(_bound(schema.get("minimum"), 0, -_MAX_MAGNITUDE, _MAX_MAGNITUDE))
        hi = int(_bound(schema.get("maximum"), lo + 100, -_MAX_MAGNITUDE, _MAX_MAGNITUDE))
        return rng.randint(lo, max(lo, hi))
    if kind == "number":
        low = _bound(schema.get("minimum"), 0.0, -_MAX_MAGNITUDE, _MAX_MAGNITUDE)
        high = _bound(schema.get("maximum"), low + 100.0, -_MAX_MAGNITUDE, _MAX_MAGNITUDE)
        return round(rng.uniform(low, max(low, high)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(schema, rng, words, name, profile)


# a property by one of these names holds what the model writes, not what it copies
_FREE_TEXT_NAMES = re.compile(r"(content|body|message|text|description|comment|note|summary|reply|prompt|draft)s?$",
                              re.IGNORECASE)


def _string(schema: dict[str, Any], rng: random.Random, words: list[str], name: str = "",
            profile: EngineProfile | None = None) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "date-time":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
    if fmt == "email":
        return f"{rng.choice(_WORDS)}@example.com"
    if isinstance(schema.get("pattern"), str):
        return Chosen(sample_regex(schema["pattern"], rng))
    lo = int(_bound(schema.get("minLength"), 0, 0, _MAX_STRING))
    if _FREE_TEXT_NAMES.search(name) or lo > 40:
        mean = profile.lengths.free_text_value if profile is not None else 90.0
        text = _sentences(rng, _length(rng, mean, profile) if profile is not None else int(mean), words).strip()
        if "maxLength" in schema:
            text = text[:int(_bound(schema["maxLength"], len(text), 0, _MAX_STRING))]
        return FreeText(text)
    pool = words or _WORDS
    text = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
    while len(text) < lo:
        text += " " + rng.choice(_WORDS)
    if "maxLength" in schema:
        text = text[:int(_bound(schema["maxLength"], len(text), 0, _MAX_STRING))]
    return Copied(text) if words else FreeText(text)


# A schema may ask for anything (a million items, 1e308, "3"); the output is cut at
# max_tokens in any case, as vLLM's is, so what is built before that is bounded.
_MAX_ITEMS = 64
_MAX_STRING = 4096
_MAX_MAGNITUDE = 10**15


def _bound(value: Any, default: float, lo: float, hi: float) -> float:
    """A schema's bound held within ``lo..hi``; ``default`` when it is no finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return max(lo, min(hi, value))


def _context_words(messages: list[Any], prompt: Any) -> list[str]:
    """Words of the last user turn: tool arguments copy from context."""
    text = prompt if isinstance(prompt, str) else ""
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            text = m["content"]
            break
    return [w for w in re.findall(r"[A-Za-z][A-Za-z'-]{2,}", text)][:64]


def _length(rng: random.Random, mean: float, profile: EngineProfile) -> int:
    spread = profile.lengths.spread
    return max(4, int(rng.lognormvariate(0, spread) * mean / (2.718281828 ** (spread * spread / 2))))


def _conversation_words(messages: list[Any], prompt: Any) -> list[str]:
    """The words of every message (or of the prompt), in order: what an answer may repeat."""
    texts = [prompt] if isinstance(prompt, str) else []
    texts += [m["content"] for m in messages if isinstance(m, dict) and isinstance(m.get("content"), str)]
    return re.findall(r"\S+", " ".join(texts))[-4000:]


def _sentences(rng: random.Random, tokens: int, context: list[str], said: list[str] | None = None,
               profile: EngineProfile | None = None) -> str:
    """Prose of about ``tokens`` tokens (words are ~1.3 tokens here); given the conversation so far
    (``said``), some sentences repeat a run of it, or of the answer itself, verbatim (``Repeats``)."""
    words: list[str] = []
    out = []
    count = 0
    repeats = profile.repeats if profile is not None and said is not None else None
    chance = 0.0 if repeats is None else repeats.sentence + repeats.with_context * min(1.0, len(said or ()) / 400)
    while count < tokens:
        source = (said or []) + words
        if repeats is not None and len(source) > repeats.run_words[1] and rng.random() < chance:
            n = rng.randint(*repeats.run_words)
            start = rng.randrange(len(source) - n)
            sentence = source[start:start + n]
        else:
            n = rng.randint(6, 16)
            sentence = [rng.choice(_WORDS) if rng.random() > 0.15 or not context else rng.choice(context)
                        for _ in range(n)]
            sentence[0] = sentence[0].capitalize()
            sentence[-1] += "."
        words += sentence
        out.append(" " + " ".join(sentence))
        count += int(len(sentence) * 1.3) + 1
    return "".join(out)


_CODE_REQUEST = re.compile(r"```|\b(code|function|script|python|javascript|sql|implement|bug|class|regex)\b",
                           re.IGNORECASE)


def _asks_for_code(messages: list[Any], prompt: Any) -> bool:
    last = next((m.get("content") for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"),
                prompt)
    return isinstance(last, str) and _CODE_REQUEST.search(last) is not None


def _code(rng: random.Random, tokens: int) -> str:
    """A fenced block of about ``tokens`` tokens of Python-like code."""
    names = ("value", "items", "result", "count", "index", "total", "config", "path", "row", "key")
    lines = ["\n```python"]
    count = 0
    while count < tokens:
        a, b = rng.choice(names), rng.choice(names)
        line = rng.choice((f"    {a} = {b}.get({rng.randint(0, 99)})", f"    for {a} in {b}:", f"        {a} += {b}",
                           f"    if {a} is None:", f"        return {b}", f"def {a}_{b}({b}):"))
        lines.append(line)
        count += len(tokenize(line)) + 1
    lines.append("```")
    return "\n".join(lines)
