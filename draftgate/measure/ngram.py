"""``draftgate measure-ngram``: what a copy-based drafter really accepts, replayed exactly.

Real requests with their real answers (BFCL tool calls, ShareGPT conversations,
or your own), laid out by Qwen3's chat template and tokenized with Qwen3's
vocabulary, are decoded round by round with vLLM's ngram proposer (or the
suffix drafter) at temperature 0, where a drafted token is accepted exactly when
it is the next token of the answer. That gives tau per class of request and the
share of each kind of token that was accepted; beside it, what the gate predicts
for the same requests from their structure alone.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from draftgate.emulator.lookup import (
    DEFAULT_LOOKUP_MAX,
    DEFAULT_LOOKUP_MIN,
    AnswerCache,
    NgramProposer,
    Proposer,
    SuffixProposer,
    replay,
)
from draftgate.measure import render
from draftgate.measure.tokenizer import Tokenizer
from draftgate.policy import copying
from draftgate.policy.structure.estimator import estimate
from draftgate.workloads import BFCL_SAMPLE, SHAREGPT_TURNS

Split = Literal["calibration", "held-out", "all"]
Method = Literal["ngram", "suffix"]
_BFCL_CLASSES = {"simple": "tool call", "multiple": "tool call", "parallel": "parallel calls",
                 "parallel_multiple": "parallel calls", "multi_turn": "tool call, later turn"}


@dataclass(frozen=True)
class Pair:
    """One request and the answer that followed it."""

    id: str
    kind: str
    body: dict[str, Any]  # the chat request, as a client sends it
    answer: dict[str, Any]  # the assistant message


def split_of(identifier: str) -> Split:
    """Half the conversations calibrate the predictor, the other half check it; by a hash of the id,
    so every turn of one conversation falls on the same side."""
    return "calibration" if zlib.crc32(identifier.encode()) % 2 == 0 else "held-out"


def bfcl_pairs() -> Iterator[Pair]:
    """BFCL v4 requests with their ground-truth calls (the irrelevance category has no answer to copy)."""
    text = BFCL_SAMPLE.read_text()
    for line in text.splitlines():
        row = json.loads(line)
        calls = (row.get("ground_truth") or {}).get("tool_calls")
        if row["category"] in _BFCL_CLASSES and calls:
            yield Pair(row["id"], _BFCL_CLASSES[row["category"]], row["request"],
                       {"role": "assistant", "content": None, "tool_calls": calls})


def conversation_pairs(path: Path | None = None) -> Iterator[Pair]:
    """Every assistant turn of each conversation, asked with the turns before it: ShareGPT's
    committed sample, or a JSONL file of ``{"id", "messages"[, "tools"]}`` rows."""
    text = (path or SHAREGPT_TURNS).read_text()
    for n, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        messages = row.get("messages")
        if not isinstance(messages, list):
            raise ValueError(f"line {n + 1}: each row needs messages")
        identifier = str(row.get("id", n))
        turn = 0
        for i, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") == "assistant" and i > 0:
                kind = "tool call" if message.get("tool_calls") else "prose"
                kind += ", later turn" if turn else ", first turn" if kind == "prose" else ""
                body = {"model": row.get("model", "Qwen/Qwen3-32B"), "messages": messages[:i]}
                if row.get("tools"):
                    body["tools"] = row["tools"]
                yield Pair(f"{identifier}#{turn}", kind, body, message)
                turn += 1


@dataclass
class Tally:
    """Rounds and accepted tokens of one class, by kind of token, replayed and predicted."""

    law_class: str = "f"  # s for tool calls, f for prose
    requests: int = 0
    tokens: int = 0
    rounds: int = 0
    accepted: int = 0
    predicted_rounds: float = 0.0
    by_kind: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))  # kind -> [accepted, n]
    # per answer: its class (s or f), what it could copy from, its tokens, accepted and drafted tokens
    samples: list[tuple[str, copying.CopySources, int, int, int]] = field(default_factory=list)

    @property
    def tau(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def predicted_tau(self) -> float:
        return self.tokens / self.predicted_rounds - 1.0 if self.predicted_rounds else 0.0


def measure(pairs: Iterator[Pair], tokenizer: Tokenizer, method: Method, k: int, lookup_min: int = DEFAULT_LOOKUP_MIN,
            lookup_max: int = DEFAULT_LOOKUP_MAX, split: Split = "all",
            rates: copying.CopyRates = copying.DEFAULT_RATES) -> dict[str, Tally]:
    """Replay every pair of ``split`` and tally it under its class."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    cache = AnswerCache() if method == "suffix" else None
    for pair in pairs:
        if split != "all" and split_of(pair.id.split("#")[0]) != split:
            continue
        prompt = tokenizer.encode(render.prompt(pair.body["messages"], pair.body.get("tools")))
        segments = render.answer(pair.answer)
        output, starts = tokenizer.offsets("".join(text for text, _ in segments))
        proposer: Proposer = (SuffixProposer(prompt, cache) if method == "suffix"
                              else NgramProposer(prompt, lookup_min, lookup_max))
        result = replay(proposer, output, k)
        if cache is not None:
            cache.add(output)
        tally = tallies[pair.kind]
        # the gate's tau for the answer's class, from the request alone: a call is S, prose F
        # (the gate weighs the two by how likely each answer is; here the answer is known)
        tally.law_class = "s" if pair.answer.get("tool_calls") else "f"
        tally.requests += 1
        tally.tokens += len(output)
        tally.rounds += len(result.rounds)
        tally.accepted += sum(result.rounds)
        for kind, accepted in zip(render.kinds_of_tokens(segments, starts), result.accepted):
            tally.by_kind[kind][0] += accepted
            tally.by_kind[kind][1] += 1
        sources = estimate(pair.body).copyable
        predicted = copying.lookup_taus(sources, k, rates)[tally.law_class]
        tally.predicted_rounds += len(output) / (predicted + 1.0)
        tally.samples.append((tally.law_class, sources, len(output), sum(result.rounds), result.drafted))
    return dict(tallies)


def pairs_of(data: str) -> Iterator[Pair]:
    """``bfcl``, ``sharegpt``, ``both`` (the committed samples), or a JSONL file of conversations."""
    if data == "bfcl":
        return bfcl_pairs()
    if data == "sharegpt":
        return conversation_pairs()
    if data == "both":
        return itertools.chain(bfcl_pairs(), conversation_pairs())
    return conversation_pairs(Path(data))


def report(tallies: dict[str, Tally], heading: list[str]) -> str:
    """The table: per class of request and per class of the law, the replayed and the predicted tau;
    then per kind of token, the share accepted."""
    lines = [*heading, "", f"{'class':<24} {'answers':>7} {'tokens':>7} {'tau replayed':>12} {'predicted':>9} "
                           f"{'error':>6}"]

    def row(name: str, answers: int | str, tokens: int, tau: float, predicted: float) -> str:
        error = f"{predicted / tau - 1.0:+.0%}" if tau > 0 else "-"
        return f"{name:<24} {answers:>7} {tokens:>7} {tau:>12.3f} {predicted:>9.3f} {error:>6}"

    by_law: dict[str, Tally] = defaultdict(Tally)
    for name, tally in sorted(tallies.items()):
        lines.append(row(name, tally.requests, tally.tokens, tally.tau, tally.predicted_tau))
        total = by_law["all S (tool calls)" if tally.law_class == "s" else "all F (prose)"]
        total.requests += tally.requests
        total.tokens += tally.tokens
        total.rounds += tally.rounds
        total.accepted += tally.accepted
        total.predicted_rounds += tally.predicted_rounds
    for name, total in sorted(by_law.items()):
        lines.append(row(name, total.requests, total.tokens, total.tau, total.predicted_tau))
    lines += ["", "accepted share by kind of token:"]
    for name, tally in sorted(tallies.items()):
        kinds = ", ".join(f"{kind} {accepted / n:.2f} of {n}" for kind, (accepted, n) in sorted(tally.by_kind.items()))
        lines.append(f"  {name:<24} {kinds}")
    return "\n".join(lines)
