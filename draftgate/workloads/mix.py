"""The evaluation's traffic, from data nobody here wrote, split once into calibration and verdict.

Five workloads, each from committed samples of public sets (a workload is where
traffic comes from; a request's *kind*, as the proxy routes it, is its own):

- ``tool_call``: BFCL v4 single-turn entries (simple, multiple, parallel,
  parallel-multiple, irrelevance) as BFCL sends them, ``tool_choice`` auto,
  with thinking switched off (the Qwen3 template thinks unless told not to);
- ``chat``: ShareGPT V3 first turns, each asking for the length its real answer
  had (``max_tokens`` with ``ignore_eos``, as vLLM's serving benchmark replays it);
- ``agent_session``: BFCL v4 multi-turn entries (all 200 of the base category)
  replayed turn by turn, each request the whole conversation so far (tool
  results included), so a pool's prefix cache matters as it does for real
  agents; thinking off, as above;
- ``reasoning``: ShareGPT first turns with thinking on;
- ``conversation``: ShareGPT conversations replayed turn by turn, each request the
  conversation so far with its real earlier answers, asking for the length the
  next real answer had (multi-turn prose: what a copy-based drafter copies from).

Every request carries a ``seed``, so its answer is the same on every pool even
when it samples (speculation is lossless): the per-request oracle compares like
with like. Which split an item falls in depends on its id alone (a stable
hash), so calibration never sees a verdict request, whatever the seed.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from draftgate.emulator.tokens import tokenize
from draftgate.workloads import BFCL_SAMPLE, BFCL_SESSION_TOOLS, BFCL_SESSIONS, SHAREGPT_SAMPLE, SHAREGPT_TURNS

MODEL = "Qwen/Qwen3-32B"
Split = Literal["calibration", "verdict"]
WORKLOADS = ("tool_call", "chat", "agent_session", "reasoning", "conversation")
# the mix a verdict replays unless told otherwise: agent traffic is mostly tool calls and sessions
WEIGHTS: Mapping[str, float] = {"tool_call": 4, "agent_session": 2, "chat": 2, "reasoning": 1, "conversation": 1}
# mixes an accuracy grid weighs the plan on, besides the default
MIXES: Mapping[str, Mapping[str, float]] = {
    "agent-heavy": WEIGHTS,
    "chat-heavy": {"tool_call": 1, "agent_session": 1, "chat": 5, "reasoning": 1, "conversation": 2},
    "reasoning-heavy": {"tool_call": 1, "agent_session": 1, "chat": 1, "reasoning": 5, "conversation": 1},
}


class MixError(ValueError):
    """A mix that names no workload, an unknown one, or a weight that is not a number of 0 or more."""


def parse_mix(text: str) -> dict[str, float]:
    """``tool_call=4,chat=2,...`` as weights by workload; a workload not named weighs 0 (a space
    may stand for ``_``: ``agent session``)."""
    weights: dict[str, float] = {}
    names = ", ".join(WORKLOADS)
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        workload = name.strip().replace(" ", "_")
        if not sep or workload not in WORKLOADS:
            raise MixError(f"{part!r} is not WORKLOAD=WEIGHT over the workloads {names}")
        if workload in weights:
            raise MixError(f"{workload} is given twice")
        try:
            weight = float(value)
        except ValueError:
            raise MixError(f"{workload}'s weight {value.strip()!r} is not a number") from None
        if not weight >= 0 or weight == float("inf"):
            raise MixError(f"{workload}'s weight must be a finite number of 0 or more, got {value.strip()}")
        weights[workload] = weight
    if not any(weights.values()):
        raise MixError(f"the mix gives no workload a weight above 0 (workloads: {names})")
    return {workload: weights.get(workload, 0.0) for workload in WORKLOADS}


@dataclass(frozen=True)
class Item:
    """One unit of work: a request, or the requests of one session in order."""

    id: str
    workload: str
    requests: tuple[dict[str, Any], ...]


def split_of(item_id: str) -> Split:
    """A third of the data calibrates; the rest is only ever used for the verdict."""
    return "calibration" if zlib.crc32(item_id.encode()) % 3 == 0 else "verdict"


def _rows(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def items(split: Split, traffic: str = "") -> dict[str, list[Item]]:
    """Every item of ``split``, by workload, in a fixed order (not to be changed): the built-in data's, or a
    traffic file's (``traffic``, its path; ``traffic_file`` reads it again when it changes)."""
    if traffic:
        from draftgate.workloads import traffic_file

        return traffic_file.items(traffic, split)
    return _built_in(split)


@functools.lru_cache(maxsize=2)
def _built_in(split: Split) -> dict[str, list[Item]]:
    """The committed samples' items of ``split``, read once."""
    out: dict[str, list[Item]] = {workload: [] for workload in WORKLOADS}
    tools = {row["class"]: row["tools"] for row in _rows(BFCL_SESSION_TOOLS)}
    sessions = [dict(row, request=dict(row["request"], tools=[t for c in row["tool_classes"] for t in tools[c]]))
                for row in _rows(BFCL_SESSIONS)]
    for n, row in enumerate(_rows(BFCL_SAMPLE) + sessions):
        if split_of(row["id"]) != split:
            continue
        # thinking off, explicitly: these workloads measure the calls (Qwen3 thinks unless told not to);
        # reasoning is a workload of its own
        request = dict(row["request"], seed=n, chat_template_kwargs={"enable_thinking": False})
        if row["category"] == "multi_turn":
            out["agent_session"].append(Item(row["id"], "agent_session", tuple(_turns(request))))
        else:
            out["tool_call"].append(Item(row["id"], "tool_call", (request,)))
    for n, row in enumerate(_rows(SHAREGPT_SAMPLE)):
        if split_of(row["id"]) != split:
            continue
        messages = [{"role": "user", "content": row["prompt"]}]
        if n % 4 == 3:  # a quarter of the prompts, thought through first
            body = {"model": MODEL, "messages": messages, "max_tokens": 2048, "seed": n,
                    "chat_template_kwargs": {"enable_thinking": True}}
            out["reasoning"].append(Item(row["id"], "reasoning", (body,)))
        else:
            body = {"model": MODEL, "messages": messages, "max_tokens": row["answer_tokens"], "ignore_eos": True,
                    "seed": n, "chat_template_kwargs": {"enable_thinking": False}}
            out["chat"].append(Item(row["id"], "chat", (body,)))
    for n, row in enumerate(_rows(SHAREGPT_TURNS)):
        if split_of(row["id"]) == split:
            out["conversation"].append(Item(row["id"], "conversation", tuple(_conversation(row["messages"], n))))
    return out


def _conversation(messages: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Each assistant turn asked for with the conversation before it, at its real answer's length."""
    return [{"model": MODEL, "messages": messages[:i], "max_tokens": max(1, len(tokenize(m["content"]))),
             "ignore_eos": True, "seed": seed, "chat_template_kwargs": {"enable_thinking": False}}
            for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]


def _turns(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's requests: the conversation up to each user turn (the last is BFCL's own)."""
    messages = request["messages"]
    ends = [i + 1 for i, m in enumerate(messages) if m.get("role") == "user"]
    return [dict(request, messages=messages[:end]) for end in ends]


def weights_for(given: Mapping[str, float] | None, traffic: str = "") -> Mapping[str, float]:
    """The weights items are drawn by: ``given`` (``parse_mix``'s), else a traffic file's own shares,
    else the built-in ``WEIGHTS``."""
    if given:
        return given
    if traffic:
        from draftgate.workloads import traffic_file

        return traffic_file.shares(traffic)
    return WEIGHTS


def sample(split: Split, count: int, seed: int, weights: Mapping[str, float] = WEIGHTS,
           traffic: str = "") -> list[Item]:
    """``count`` items of ``split`` drawn by ``weights`` (without repeats while any are left)."""
    return list(itertools.islice(stream(split, seed, weights, traffic), count))


def stream(split: Split, seed: int, weights: Mapping[str, float] = WEIGHTS, traffic: str = "") -> Iterator[Item]:
    """Items of ``split`` (of the built-in data, or of the ``traffic`` file) drawn by ``weights`` (by
    workload), endlessly: each workload's items in a shuffled order, over and over."""
    rng = random.Random(seed)
    pools = {name: rng.sample(found, len(found)) for name, found in items(split, traffic).items() if found}
    names = list(pools)
    shares = [weights.get(name, 0.0) for name in names]
    if not any(shares):
        raise MixError(f"the {split} part holds none of the workloads the mix weighs ({', '.join(names)} it "
                       "holds)")
    taken = dict.fromkeys(names, 0)
    while True:
        name = rng.choices(names, weights=shares)[0]
        yield pools[name][taken[name] % len(pools[name])]
        taken[name] += 1


def requests_per_item(split: Split, weights: Mapping[str, float] = WEIGHTS, traffic: str = "") -> float:
    """Requests an item drawn by ``weights`` makes, on average (a session's turns each count)."""
    found = items(split, traffic)
    total = sum(weights.get(name, 0.0) for name, its_items in found.items() if its_items)
    return sum(weights.get(name, 0.0) / total * sum(len(i.requests) for i in its_items) / len(its_items)
               for name, its_items in found.items() if its_items)
