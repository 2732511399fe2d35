"""Which output constraint a request sets, read as vLLM reads it.

vLLM turns ``structured_outputs`` into its ``StructuredOutputsParams``: one of
six fields is the constraint (``json``, ``regex``, ``choice``, ``grammar``,
``json_object``, ``structural_tag``); the others, such as
``disable_any_whitespace``, only tune it. ``response_format`` json_object,
json_schema and structural_tag set one of the six. Servers older than 0.12
also honour the ``guided_*`` fields; newer ones ignore them. A ``tool_choice``
that names a function constrains the output to that function's parameters.

The estimate sizes a constrained answer as schema-bound and measurement counts
its content as schema-bound. Both read the constraint here, so that prediction
and observation agree on which requests are constrained. If they disagreed,
the learner would pull every such shape towards the wrong class.
"""

from __future__ import annotations

from typing import Any

from draftgate.policy.vllm_fields import as_bool

CONSTRAINT_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
LEGACY_GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
# a tuple, not a set: a client's "type" may be a list, which a set lookup cannot hash
CONSTRAINED_FORMATS = ("json_schema", "json_object", "structural_tag")


def structured_constraint(structured: dict[str, Any]) -> tuple[str, Any] | None:
    """The constraint a ``structured_outputs`` object sets, as (kind, value), or None.

    vLLM refuses an object with none or several. ``json_object: false`` passes its
    count but builds no grammar, so it constrains nothing here.
    """
    for kind in CONSTRAINT_KINDS:
        value = structured.get(kind)
        if value is None or (kind == "json_object" and not as_bool(value)):
            continue
        return kind, value
    return None


def named_function(tool_choice: Any) -> str | None:
    """The function a chat ``tool_choice`` names (``{"type": "function", "function": {"name": ...}}``).

    vLLM's grammar for it is that function's parameters: the model writes the
    arguments alone, and the server adds the name to the call it returns.
    """
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else None


def legacy_guided_fields(body: dict[str, Any]) -> list[str]:
    """The ``guided_*`` fields a body sets, in the order they are read."""
    return [name for name in LEGACY_GUIDED if body.get(name) is not None]


def output_is_structured(body: Any, legacy_guided_honoured: bool = False) -> bool:
    """Whether the request's content is constrained to JSON or a grammar.

    ``legacy_guided_honoured``: the pools run vLLM older than 0.12, which still
    reads the ``guided_*`` fields (``StructurePriors.legacy_guided_fields_honoured``).
    """
    if not isinstance(body, dict):
        return False
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in CONSTRAINED_FORMATS:
        return True
    structured = body.get("structured_outputs")
    if isinstance(structured, dict) and structured_constraint(structured) is not None:
        return True
    return legacy_guided_honoured and bool(legacy_guided_fields(body))
