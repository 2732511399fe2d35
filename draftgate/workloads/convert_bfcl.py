"""Convert a sample of BFCL v4 into OpenAI chat requests with ground-truth tool calls.

Run by hand, not at test time: the outputs, ``bfcl_sample.jsonl`` (30 entries of each category) and
``bfcl_sessions.jsonl`` with ``bfcl_session_tools.jsonl`` (every other multi-turn entry, for the
verdict's agent sessions; each tool list written once), are committed.

    pip download --no-deps bfcl-eval==2026.3.23 -d /tmp/bfcl && unzip -q /tmp/bfcl/*.whl -d /tmp/bfcl/x
    cd draftgate/workloads && data=/tmp/bfcl/x/bfcl_eval/data
    python -m draftgate.workloads.convert_bfcl $data > bfcl_sample.jsonl
    python -m draftgate.workloads.convert_bfcl $data --sessions > bfcl_sessions.jsonl
    python -m draftgate.workloads.convert_bfcl $data --session-tools > bfcl_session_tools.jsonl

The Berkeley Function Calling Leaderboard (BFCL v4) is by the Gorilla team at
UC Berkeley, released under the Apache License 2.0; see ``BFCL_NOTICE.md``.
"""

from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path
from typing import Any

CATEGORIES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
    "parallel_multiple": "BFCL_v4_parallel_multiple.json",
    "irrelevance": "BFCL_v4_irrelevance.json",
    "multi_turn": "BFCL_v4_multi_turn_base.json",
}
PER_CATEGORY = 30
SEED = 20261129
OK_RESULT = '{"status": "ok"}'  # every earlier call's tool result
MULTI_TURN_DOCS = {
    "TwitterAPI": "posting_api.json", "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json", "MessageAPI": "message_api.json", "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json", "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "int": "integer", "bool": "boolean", "str": "string"}


def to_json_schema(node: Any) -> Any:
    """BFCL writes Python-flavoured types (dict, float, tuple, any); make them JSON Schema."""
    if isinstance(node, list):
        return [to_json_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            if value == "any":
                continue
            out[key] = _TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        else:
            out[key] = to_json_schema(value)
    return out


def tool(function: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": function["name"].replace(".", "_"),
            "description": function.get("description", ""),
            "parameters": to_json_schema(function.get("parameters", {"type": "object", "properties": {}})),
        },
    }


def call_from_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """A ground-truth entry lists acceptable values per argument; take the first real one."""
    (name, options), = answer.items()
    arguments = {}
    for key, values in options.items():
        chosen = next((v for v in values if v != ""), None)
        if chosen is not None:
            arguments[key] = chosen
    return {"name": name.replace(".", "_"), "arguments": arguments}


def call_from_python(source: str) -> dict[str, Any]:
    node = ast.parse(source, mode="eval").body
    assert isinstance(node, ast.Call)
    name = ast.unparse(node.func).replace(".", "_")
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    for i, arg in enumerate(node.args):
        arguments[f"arg{i}"] = ast.literal_eval(arg)
    return {"name": name, "arguments": arguments}


def rendered(calls: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{prefix}_{i}", "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for i, c in enumerate(calls)
    ]


def single_turn(data: Path, category: str, rng: random.Random) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in (data / CATEGORIES[category]).open()]
    answers: dict[str, Any] = {}
    answer_file = data / "possible_answer" / CATEGORIES[category]
    if answer_file.exists():
        answers = {a["id"]: a["ground_truth"] for a in map(json.loads, answer_file.open())}
    out = []
    for entry in rng.sample(entries, PER_CATEGORY):
        truth = [call_from_answer(a) for a in answers.get(entry["id"], [])]
        out.append({
            "id": entry["id"], "category": category,
            "request": {"model": "Qwen/Qwen3-32B", "messages": entry["question"][0],
                        "tools": [tool(f) for f in entry["function"]], "tool_choice": "auto"},
            "ground_truth": {"tool_calls": rendered(truth, entry["id"])} if truth else None,
        })
    return out


def multi_turn(data: Path, rng: random.Random) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in (data / CATEGORIES["multi_turn"]).open()]
    answers = _multi_turn_answers(data)
    return [session(entry, answers[entry["id"]], class_tools(data, entry["involved_classes"]))
            for entry in rng.sample(entries, PER_CATEGORY)]


def sessions(data: Path) -> list[dict[str, Any]]:
    """Every multi-turn entry the sample (``multi_turn``) did not take, in BFCL's order, naming the classes
    whose tools it is given (``tool_classes``) rather than carrying them: the verdict's agent sessions."""
    taken = {row["id"] for row in multi_turn(data, _sample_rng_at_multi_turn(data))}
    answers = _multi_turn_answers(data)
    entries = [json.loads(line) for line in (data / CATEGORIES["multi_turn"]).open()]
    return [dict(session(entry, answers[entry["id"]]), tool_classes=entry["involved_classes"])
            for entry in entries if entry["id"] not in taken]


def session_tools(data: Path) -> list[dict[str, Any]]:
    """Each multi-turn class's tools, once: what ``sessions`` rows name."""
    return [{"class": cls, "tools": class_tools(data, [cls])} for cls in MULTI_TURN_DOCS]


def class_tools(data: Path, classes: list[str]) -> list[dict[str, Any]]:
    functions = []
    for cls in classes:
        functions += [json.loads(line) for line in (data / "multi_turn_func_doc" / MULTI_TURN_DOCS[cls]).open()]
    return [tool(f) for f in functions]


def session(entry: dict[str, Any], truth: list[list[str]],
            tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A multi-turn entry as one request holding every turn (earlier turns answered with their
    ground-truth calls and ``{"status": "ok"}`` results), with its last turn's truth; ``tools`` left out
    when None."""
    turns = entry["question"]
    last = min(len(turns), len(truth)) - 1
    messages: list[dict[str, Any]] = []
    for k in range(last):
        messages += turns[k]
        calls = [call_from_python(s) for s in truth[k]]
        if calls:
            messages.append({"role": "assistant", "content": None, "tool_calls": rendered(calls, f"{entry['id']}_{k}")})
            messages += [{"role": "tool", "tool_call_id": f"call_{entry['id']}_{k}_{i}", "content": OK_RESULT}
                         for i in range(len(calls))]
        messages.append({"role": "assistant", "content": "Done."})
    messages += turns[last]
    calls = [call_from_python(s) for s in truth[last]]
    return {
        "id": entry["id"], "category": "multi_turn",
        "request": {"model": "Qwen/Qwen3-32B", "messages": messages, **({} if tools is None else {"tools": tools}),
                    "tool_choice": "auto"},
        "ground_truth": {"tool_calls": rendered(calls, entry["id"])} if calls else None,
    }


def _multi_turn_answers(data: Path) -> dict[str, Any]:
    answers = data / "possible_answer" / CATEGORIES["multi_turn"]
    return {a["id"]: a["ground_truth"] for a in map(json.loads, answers.open())}


def _sample_rng_at_multi_turn(data: Path) -> random.Random:
    """The sample's generator as ``main`` leaves it when it reaches the multi-turn category (drawn last)."""
    rng = random.Random(SEED)
    for category in CATEGORIES:
        if category != "multi_turn":
            single_turn(data, category, rng)
    return rng


def main(data_dir: str, part: str = "") -> None:
    data = Path(data_dir)
    if part == "--sessions":
        rows = sessions(data)
    elif part == "--session-tools":
        rows = session_tools(data)
    else:
        rng = random.Random(SEED)
        rows = []
        for category in CATEGORIES:
            rows += multi_turn(data, rng) if category == "multi_turn" else single_turn(data, category, rng)
    for row in rows:
        sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
