"""What the emulated model says: outputs that respect the request.

Tool calls whose arguments validate against the tool's schema, JSON that
validates against a response format, reasoning before the answer when
thinking is on, prose otherwise. Deterministic per request at temperature 0,
and independent of the server's speculation settings: speculation is lossless.
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
from draftgate.policy.structure.constraints import named_function, structured_constraint

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
    cls: str  # "s", "r" or "f"
    channel: str  # "reasoning", "content", "tool_name", "tool_args"
    call: int = -1


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Generated:
    tokens: list[OutputToken] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, text: str, cls: str, channel: str, call: int = -1) -> None:
        self.tokens.extend(OutputToken(t, cls, channel, call) for t in tokenize(text))


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
    structured = _structured_content(body, rng, context_words)
    if structured is not None:
        out.add(structured, "s", "content")
        return out
    tools = body.get("tools") if endpoint == "chat" and isinstance(body.get("tools"), list) else []
    chosen = _choose_calls(body, tools, messages, profile, rng)
    if chosen:
        # a named function's grammar is its parameters: the model writes the arguments, the server the name
        named = named_function(body.get("tool_choice")) is not None
        for i, tool in enumerate(chosen):
            fn = tool["function"]
            args = json.dumps(_instance(fn.get("parameters") or {"type": "object"}, rng, context_words, fn.get("parameters")))
            call_id = f"chatcmpl-tool-{rng.getrandbits(64):016x}"
            out.calls.append(ToolCall(call_id, fn["name"], args))
            if not named:
                out.tokens.append(OutputToken(fn["name"], "s", "tool_name", i))
            out.add(args, "s", "tool_args", i)
        return out
    after_tool = bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
    mean = profile.lengths.prose_after_tool if after_tool else profile.lengths.prose
    out.add(_sentences(rng, _length(rng, mean, profile), context_words), "f", "content")
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
    out.add(rng.choice(_REASONING_OPENERS) + _sentences(rng, n, words), "r", "reasoning")
    budget = body.get("thinking_token_budget")  # checked with the request: a whole number from -1
    if isinstance(budget, int) and budget >= 0:
        del out.tokens[budget:]  # vLLM ends the reasoning there; nothing but reasoning is out yet


def _structured_content(body: dict[str, Any], rng: random.Random, words: list[str]) -> str | None:
    so = body.get("structured_outputs")
    constraint = structured_constraint(so) if isinstance(so, dict) else None
    if constraint is not None:  # the request's check has made sure there is exactly one
        kind, value = constraint
        if kind == "json":
            schema = value if isinstance(value, dict) else json.loads(value)
            return json.dumps(_instance(schema, rng, words, schema))
        if kind == "json_object":
            return _json_object(rng, words)
        if kind == "choice" and isinstance(value, list) and value:
            return str(rng.choice(value))
        if kind == "regex" and isinstance(value, str):
            return sample_regex(value, rng)
        return "grammar output"  # EBNF and structural tags are not sampled; documented limitation
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else {}
            schema = spec.get("schema") if isinstance(spec.get("schema"), dict) else {"type": "object"}
            return json.dumps(_instance(schema, rng, words, schema))
        if fmt.get("type") == "json_object":
            return _json_object(rng, words)
    return None


def _json_object(rng: random.Random, words: list[str]) -> str:
    return json.dumps({"answer": " ".join(rng.choice(words or _WORDS) for _ in range(3)), "confidence": 0.9})


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


def _instance(schema: Any, rng: random.Random, words: list[str], root: Any, depth: int = 0) -> Any:
    """A value that validates against ``schema`` (the subset tool schemas use)."""
    if not isinstance(schema, dict) or depth > 12:
        return "x"
    if "$ref" in schema and isinstance(schema["$ref"], str) and schema["$ref"].startswith("#"):
        target: Any = root
        for part in schema["$ref"][1:].split("/"):
            if part:
                target = target.get(part) if isinstance(target, dict) else None
        return _instance(target, rng, words, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0], rng, words, root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = _instance(part, rng, words, root, depth + 1)
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
        for name, sub in props.items():
            if name in required or rng.random() < 0.3:
                out[name] = _instance(sub, rng, words, root, depth + 1)
        return out
    if kind == "array":
        lo = int(_bound(schema.get("minItems"), 1, 0, _MAX_ITEMS))
        hi = int(_bound(schema.get("maxItems"), max(lo, 3), 0, _MAX_ITEMS))
        items = schema.get("items", {})
        return [_instance(items, rng, words, root, depth + 1) for _ in range(rng.randint(lo, max(lo, hi)))]
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
    return _string(schema, rng, words)


def _string(schema: dict[str, Any], rng: random.Random, words: list[str]) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "date-time":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
    if fmt == "email":
        return f"{rng.choice(_WORDS)}@example.com"
    if isinstance(schema.get("pattern"), str):
        return sample_regex(schema["pattern"], rng)
    pool = words or _WORDS
    text = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
    lo = int(_bound(schema.get("minLength"), 0, 0, _MAX_STRING))
    while len(text) < lo:
        text += " " + rng.choice(_WORDS)
    if "maxLength" in schema:
        text = text[:int(_bound(schema["maxLength"], len(text), 0, _MAX_STRING))]
    return text


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


def _sentences(rng: random.Random, tokens: int, context: list[str]) -> str:
    """Prose of about ``tokens`` tokens (words are ~1.3 tokens here)."""
    words = []
    count = 0
    while count < tokens:
        n = rng.randint(6, 16)
        sentence = [rng.choice(_WORDS) if rng.random() > 0.15 or not context else rng.choice(context) for _ in range(n)]
        sentence[0] = sentence[0].capitalize()
        words.append(" " + " ".join(sentence) + ".")
        count += int(n * 1.3) + 1
    return "".join(words)
