"""Benchmark: measuring a large answer read in part against parsing it whole.

    python -m lab.bench_large_answer [--rounds 5]

A non-streamed answer is measured on the event loop after it has gone, and
while that runs, every stream through the proxy waits. Answers with logprobs
are large; ``proxy/large_answers.py`` reads only the messages, usage and
metrics of one over 64 KiB. This prints, for vLLM-shaped chat answers with
logprobs, the median time of ``json.loads`` of the whole body beside that of
``answer_skeleton``, in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from proxy.large_answers import LARGE_ANSWER_BYTES, answer_skeleton


def chat_answer(tokens: int, top: int) -> bytes:
    def entry(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": -0.123456, "bytes": list(token.encode())}
    content = [{**entry(f" w{i}"), "top_logprobs": [entry(f" a{k}") for k in range(top)]} for i in range(tokens)]
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "Qwen/Qwen3-32B",
              "choices": [{"index": 0, "logprobs": {"content": content}, "finish_reason": "length",
                           "message": {"role": "assistant", "content": "".join(e["token"] for e in content)}}],
              "usage": {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": tokens + 20}}
    return json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()


def median_ms(work: Any, raw: bytes, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work(raw)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'answer':>28} {'size':>8} {'json.loads':>11} {'read in part':>13} {'ratio':>6}  the proxy")
    for tokens, top in ((512, 0), (1024, 5), (4096, 5), (8192, 20)):
        raw = chat_answer(tokens, top)
        whole, part = median_ms(json.loads, raw, args.rounds), median_ms(answer_skeleton, raw, args.rounds)
        label = f"{tokens} tokens, top_logprobs {top}"
        used = "reads it in part" if len(raw) > LARGE_ANSWER_BYTES else "parses it whole"
        print(f"{label:>28} {len(raw) / 1e6:>6.2f}MB {whole:>9.1f}ms {part:>11.2f}ms {whole / part:>6.0f}x  {used}")


if __name__ == "__main__":
    main()
