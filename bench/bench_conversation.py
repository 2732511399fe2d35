"""Benchmark: identifying a conversation for prefix affinity, against parsing its body.

    python -m bench.bench_conversation [--rounds 200]

Every gated chat request is hashed message by message (``draftgate.proxy.affinity``), so
its next turn can find the pool whose cache holds it. This prints, side by side
in one run, the median time of ``json.loads`` of the body, of that chain as it
was (each message's repr hashed, kept here as the baseline) and as it is, on
agent conversations of growing length. Each round parses the body afresh, as
the proxy does: a string's hash is cached once computed, and a fresh one's is not.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from draftgate.proxy.affinity import Conversation

_WORDS = ("the", "weather", "city", "forecast", "tool", "result", "json", "order", "status", "account", "refund")


def conversation(turns: int, seed: int = 1) -> bytes:
    """A system prompt, then ``turns`` rounds of user ask, assistant tool call and tool result."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    messages: list[dict[str, Any]] = [{"role": "system", "content": words(400)}]
    for i in range(turns):
        messages.append({"role": "user", "content": words(rng.randint(20, 300))})
        messages.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"query": words(4), "limit": 5})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps({"rows": words(200)})})
    return json.dumps({"model": "Qwen/Qwen3-32B", "messages": messages}).encode()


def repr_chain(body: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    """The chain as it was: each message written out by repr, then hashed."""
    h = hash((str(body.get("model")), repr(())))
    out, chars = [], 0
    for message in body["messages"]:
        text = repr(message)
        chars += len(text)
        h = hash((h, text))
        out.append((h, chars))
    return tuple(out)


def paired_medians_us(raw: bytes, works: list[Callable[[Any], Any]], rounds: int) -> list[float]:
    """Median times of ``json.loads(raw)`` and of each of ``works`` on a body parsed afresh for it
    (as a request brings fresh strings, whose hashes are not cached yet), taken in turn within
    each round so that a shared machine's slow spells fall on all alike."""
    times: list[list[int]] = [[] for _ in range(len(works) + 1)]
    for _ in range(rounds):
        start = time.perf_counter_ns()
        json.loads(raw)
        times[0].append(time.perf_counter_ns() - start)
        for row, work in zip(times[1:], works):
            body = json.loads(raw)
            start = time.perf_counter_ns()
            work(body)
            row.append(time.perf_counter_ns() - start)
    return [statistics.median(row) / 1000 for row in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    # shared: hashed alike in every process, as proxy replicas sharing a store hash it
    print(f"{'conversation':>24} {'json.loads':>11} {'repr chain':>11} {'chain':>10} {'chain/loads':>11} "
          f"{'shared':>10} {'shared/chain':>12}")
    for turns in (5, 20, 60, 200):
        raw = conversation(turns)
        loads, by_repr, chain, shared = paired_medians_us(
            raw, [repr_chain, Conversation.of, lambda body: Conversation.of(body, shared=True)], args.rounds)
        label = f"{3 * turns + 1} msgs, {len(raw) // 1000} KB"
        print(f"{label:>24} {loads:>9.0f}us {by_repr:>9.0f}us {chain:>8.0f}us {chain / loads:>11.2f} "
              f"{shared:>8.0f}us {shared / chain:>12.2f}")


if __name__ == "__main__":
    main()
