"""Write the committed four-arm workloads (run by hand; the JSONL files are committed).

    python -m draftgate.workloads.make_arms

A: free prose. B: schema-bound tool calls at temperature 0, from the BFCL
sample. C: long reasoning (thinking on). D: a replay of an agent loop: tool
calls, tool results and final answers over growing conversations.
"""

from __future__ import annotations

import json
import random

from draftgate.workloads import HERE as WORKLOADS

HERE = WORKLOADS
MODEL = "Qwen/Qwen3-32B"
TOPICS = ["the history of the printing press", "how tides work", "why sourdough rises", "the rules of cricket",
          "how a heat pump works", "the life of honeybees", "what makes a good API", "the water cycle",
          "how vaccines train immunity", "the origins of jazz", "why the sky is blue", "how compilers optimise",
          "the economics of container shipping", "how glaciers move", "the design of suspension bridges",
          "how birds navigate", "the chemistry of baking soda", "what a database index does",
          "the history of the bicycle", "how noise-cancelling headphones work"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                            "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city", "unit"]}}}
BOOK = {"type": "function", "function": {"name": "book_table", "description": "Book a restaurant table",
        "parameters": {"type": "object", "properties": {
            "restaurant": {"type": "string"}, "date": {"type": "string", "format": "date"},
            "people": {"type": "integer", "minimum": 1, "maximum": 12}}, "required": ["restaurant", "date", "people"]}}}


def arm_a() -> list[dict]:
    return [{"model": MODEL, "messages": [{"role": "user", "content": f"Write a short paragraph about {t}."}],
             "max_tokens": 96} for t in TOPICS * 2]


def arm_b() -> list[dict]:
    rows = [json.loads(line) for line in (HERE / "bfcl_sample.jsonl").open()]
    out = []
    for row in rows:
        if row["ground_truth"] is None:
            continue
        out.append(dict(row["request"], tool_choice="required", temperature=0))
    return out[::3]


def arm_c() -> list[dict]:
    return [{"model": MODEL, "messages": [{"role": "user", "content": f"Think it through: explain {t}."}],
             "chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "low", "max_tokens": 320}
            for t in TOPICS]


def arm_d() -> list[dict]:
    rng = random.Random(11)
    out = []
    for session in range(10):
        city = rng.choice(["Paris", "Rome", "Oslo", "Lima", "Kyoto"])
        messages = [{"role": "system", "content": "You are a travel agent. Use tools when they help. " * 20},
                    {"role": "user", "content": f"Plan dinner in {city} for session {session} and check the weather."}]
        for turn in range(4):
            body = {"model": MODEL, "messages": [dict(m) for m in messages], "tools": [WEATHER, BOOK],
                    "tool_choice": "auto" if turn % 2 else "required", "max_tokens": 200}
            if turn % 2 == 0:  # the agent thinks before it calls: one response, two classes
                body.update(chat_template_kwargs={"enable_thinking": True}, reasoning_effort="low")
            out.append(body)
            if turn % 2 == 0:
                call_id = f"call_{session}_{turn}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [{
                    "id": call_id, "type": "function", "function": {
                        "name": "get_weather", "arguments": json.dumps({"city": city, "unit": "c"})}}]})
                messages.append({"role": "tool", "tool_call_id": call_id, "content": "{\"temp\": 18, \"sky\": \"clear\"}"})
            else:
                messages.append({"role": "assistant", "content": "Booked; the evening will be clear and mild."})
                messages.append({"role": "user", "content": "Great, what else should I know?"})
    return out


def main() -> None:
    for name, rows in (("A", arm_a()), ("B", arm_b()), ("C", arm_c()), ("D", arm_d())):
        path = HERE / "arms" / f"arm_{name}.jsonl"
        path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
        print(f"{path}: {len(rows)} requests")


if __name__ == "__main__":
    main()
